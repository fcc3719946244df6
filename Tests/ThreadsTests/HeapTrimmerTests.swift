import Testing
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// How many of the 4 KiB pages from 8 to 24 KiB into `block` are resident (mincore): the middle of
/// a 32 KiB block, clear of malloc's chunk header and of its neighbours.
private func residentMiddlePages(_ block: UnsafeMutableRawPointer) -> Int {
    let pageBytes = 4096
    let start = (Int(bitPattern: block) + 8192) & ~(pageBytes - 1)
    var vector = [UInt8](repeating: 0, count: 4)
    guard mincore(UnsafeMutableRawPointer(bitPattern: start), 4 * pageBytes, &vector) == 0 else { return -1 }
    return vector.filter { $0 & 1 == 1 }.count
}

@Suite struct HeapTrimmerTests {
    /// Every other block of 32 MiB freed: 16 MiB of holes between blocks still in use, which
    /// malloc keeps (free itself gives back only the top of the heap); a trim returns their pages.
    /// Counted per page with mincore, so that other tests allocating meanwhile do not blur it.
    @Test func aTrimGivesFreedPagesBack() {
        let blockBytes = 32 << 10
        let blocks: [UnsafeMutableRawPointer] = (0..<1024).map { _ in
            let block = malloc(blockBytes)!
            memset(block, 1, blockBytes)
            return block
        }
        defer { for block in blocks.indices where block % 2 == 1 { free(blocks[block]) } }
        let holes = blocks.indices.filter { $0 % 2 == 0 }.map { blocks[$0] }
        for hole in holes { free(hole) }
        let before = holes.map(residentMiddlePages).reduce(0, +)
        HeapTrimmer.trim()
        let after = holes.map(residentMiddlePages).reduce(0, +)
        // Another thread's malloc may take a hole back between the free and the trim: most stay.
        #expect(
            before == 4 * holes.count && after < holes.count,
            "\(before) pages resident before, \(after) after")
    }

    @Test func theServiceTrimsUntilStopped() throws {
        let trimmer = HeapTrimmer(intervalMicros: 1_000)
        try trimmer.start()
        #expect(trimmer.state == .running)
        trimmer.stop(graceMicros: 0)
        #expect(trimmer.state == .stopped)
    }
}
