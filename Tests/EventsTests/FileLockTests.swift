import Events
import Foundation
import Testing

/// `flock` goes through the file layer like every other call on a descriptor: one holder at a time,
/// released when its descriptor closes.
@Test func anExclusiveLockHasOneHolderUntilItsDescriptorCloses() throws {
    let directory = TemporaryDirectory()
    let io: any FileIO = PosixFileIO()
    let path = directory.path + "/LOCK"
    let first = try io.open(path, flags: O_CREAT | O_RDWR, mode: 0o600)
    let second = try io.open(path, flags: O_RDONLY, mode: 0)
    defer { io.close(second) }
    #expect(try io.lockExclusive(first, path: path))
    #expect(try !io.lockExclusive(second, path: path))
    io.close(first)
    #expect(try io.lockExclusive(second, path: path))
}

@Test func lockingWhatIsNotADescriptorIsAnIOError() {
    let io: any FileIO = PosixFileIO()
    #expect(throws: IOError(operation: "flock", path: "nowhere", errno: EBADF)) {
        try io.lockExclusive(-1, path: "nowhere")
    }
}
