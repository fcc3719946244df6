import Testing
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// This process's resident memory (VmRSS), in kB.
private func residentKB() -> Int {
    guard let file = fopen("/proc/self/status", "r") else { return 0 }
    defer { fclose(file) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix("VmRSS:") {
            return Int(text.dropFirst(6).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "") ?? 0
        }
    }
    return 0
}

@Suite struct HeapTrimmerTests {
    /// Every other block of 32 MiB freed: 16 MiB of holes between blocks still in use, which
    /// malloc keeps (free itself gives back only the top of the heap); a trim returns their pages.
    @Test func aTrimGivesFreedPagesBack() {
        let blockBytes = 32 << 10
        let blocks: [UnsafeMutableRawPointer] = (0..<1024).map { _ in
            let block = malloc(blockBytes)!
            memset(block, 1, blockBytes)
            return block
        }
        defer { for block in blocks.indices where block % 2 == 1 { free(blocks[block]) } }
        for block in blocks.indices where block % 2 == 0 { free(blocks[block]) }
        let before = residentKB()
        HeapTrimmer.trim()
        let after = residentKB()
        #expect(before - after >= 12 << 10, "VmRSS \(before) kB before the trim, \(after) kB after")
    }

    @Test func theServiceTrimsUntilStopped() throws {
        let trimmer = HeapTrimmer(intervalMicros: 1_000)
        try trimmer.start()
        #expect(trimmer.state == .running)
        trimmer.stop(graceMicros: 0)
        #expect(trimmer.state == .stopped)
    }
}
