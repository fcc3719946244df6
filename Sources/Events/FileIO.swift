#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A failed system call: which call, on which path, and errno, read at once.
public struct IOError: Error, Equatable, Sendable, CustomStringConvertible {
    public var operation: String
    public var path: String
    public var errno: Int32

    public init(operation: String, path: String, errno: Int32) {
        self.operation = operation
        self.path = path
        self.errno = errno
    }

    public var description: String {
        "\(operation) \(path): \(String(cString: strerror(errno))) (errno \(errno))"
    }

    /// Any error from the file layer as an IOError (the layer throws nothing else).
    public init(_ error: any Error) {
        self = error as? IOError ?? IOError(operation: "file operation", path: "", errno: EIO)
    }

    public var isNoSpace: Bool { errno == ENOSPC || errno == EDQUOT }
}

/// The file operations the log performs, as a protocol so that tests can inject faults (a failed
/// fsync, ENOSPC, a short write) without touching the real disk's behaviour.
///
/// Every method is one system call; EINTR is retried here and nowhere else.
public protocol FileIO: Sendable {
    func open(_ path: String, flags: Int32, mode: mode_t) throws -> Int32
    func close(_ fd: Int32)
    /// Writes some prefix of `bytes` at `offset`; returns how many bytes were written (at least 1).
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws -> Int
    /// Reads up to `buffer.count` bytes at `offset`; returns 0 at end of file.
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int, path: String) throws
        -> Int
    func fdatasync(_ fd: Int32, path: String) throws
    func fsync(_ fd: Int32, path: String) throws
    func ftruncate(_ fd: Int32, size: Int, path: String) throws
    func fileSize(_ fd: Int32, path: String) throws -> Int
    func rename(_ from: String, _ to: String) throws
    func unlink(_ path: String) throws
    /// Names in a directory, without `.` and `..`.
    func list(_ directory: String) throws -> [String]
    func makeDirectory(_ path: String) throws
    /// `flock(LOCK_EX | LOCK_NB)`: true when this descriptor now holds the lock, false when another
    /// open file holds it. Closing the descriptor releases it.
    func lockExclusive(_ fd: Int32, path: String) throws -> Bool
}

extension FileIO {
    /// Writes all of `bytes`, continuing after short writes.
    public func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws {
        var done = 0
        while done < bytes.count {
            done += try pwrite(
                fd, UnsafeRawBufferPointer(rebasing: bytes[done...]), at: offset + done, path: path)
        }
    }

    public func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int, path: String) throws {
        try bytes.withUnsafeBytes { (raw) in try writeAll(fd, raw, at: offset, path: path) }
    }

    /// Reads exactly `count` bytes at `offset`, or fewer at end of file.
    public func read(_ fd: Int32, count: Int, at offset: Int, path: String) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = try buffer.withUnsafeMutableBytes { (raw) in
                try pread(
                    fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]), at: offset + done,
                    path: path)
            }
            if got == 0 { break }
            done += got
        }
        buffer.removeLast(count - done)
        return buffer
    }

    /// The real `flock`, EINTR retried, for every file layer: a lock is on the open file, which a
    /// fault-injecting layer shares with the real one.
    public func lockExclusive(_ fd: Int32, path: String) throws -> Bool {
        while true {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return true }
            let error = errno
            if error == EWOULDBLOCK { return false }
            if error != EINTR { throw IOError(operation: "flock", path: path, errno: error) }
        }
    }

    /// fsync of a directory: makes the creation, rename or removal of its entries durable.
    public func syncDirectory(_ path: String) throws {
        let fd = try open(path, flags: O_RDONLY | O_DIRECTORY, mode: 0)
        defer { close(fd) }
        try fsync(fd, path: path)
    }
}

/// The real file layer: POSIX calls, EINTR retried.
public struct PosixFileIO: FileIO {
    public init() {}

    private func retrying(_ operation: String, _ path: String, _ call: () -> Int) throws -> Int {
        while true {
            let result = call()
            if result >= 0 { return result }
            let error = errno
            if error != EINTR { throw IOError(operation: operation, path: path, errno: error) }
        }
    }

    public func open(_ path: String, flags: Int32, mode: mode_t) throws -> Int32 {
        Int32(try retrying("open", path) { Int(Glibc.open(path, flags | O_CLOEXEC, mode)) })
    }

    public func close(_ fd: Int32) { _ = Glibc.close(fd) }

    public func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws
        -> Int
    {
        let written = try retrying("write", path) {
            Glibc.pwrite(fd, bytes.baseAddress, bytes.count, off_t(offset))
        }
        if written == 0 && bytes.count > 0 { throw IOError(operation: "write", path: path, errno: EIO) }
        return written
    }

    public func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int, path: String)
        throws -> Int
    {
        try retrying("read", path) { Glibc.pread(fd, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    public func fdatasync(_ fd: Int32, path: String) throws {
        _ = try retrying("fdatasync", path) { Int(Glibc.fdatasync(fd)) }
    }

    public func fsync(_ fd: Int32, path: String) throws {
        _ = try retrying("fsync", path) { Int(Glibc.fsync(fd)) }
    }

    public func ftruncate(_ fd: Int32, size: Int, path: String) throws {
        _ = try retrying("ftruncate", path) { Int(Glibc.ftruncate(fd, off_t(size))) }
    }

    public func fileSize(_ fd: Int32, path: String) throws -> Int {
        var info = stat()
        _ = try retrying("fstat", path) { Int(fstat(fd, &info)) }
        return Int(info.st_size)
    }

    public func rename(_ from: String, _ to: String) throws {
        _ = try retrying("rename", from) { Int(Glibc.rename(from, to)) }
    }

    public func unlink(_ path: String) throws {
        _ = try retrying("unlink", path) { Int(Glibc.unlink(path)) }
    }

    public func list(_ directory: String) throws -> [String] {
        guard let handle = opendir(directory) else {
            throw IOError(operation: "opendir", path: directory, errno: errno)
        }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    public func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw IOError(operation: "mkdir", path: path, errno: errno)
        }
    }
}

/// Microseconds since the Unix epoch from the system's real-time clock.
public func wallClockMicros() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1_000
}

/// One line to standard error, unbuffered, without touching C's shared `stderr` stream object.
public func writeStandardError(_ line: String) {
    var bytes = Array(line.utf8)
    bytes.append(UInt8(ascii: "\n"))
    bytes.withUnsafeBytes { raw in
        var done = 0
        while done < raw.count {
            let written = write(2, raw.baseAddress! + done, raw.count - done)
            if written <= 0 { return }
            done += written
        }
    }
}
