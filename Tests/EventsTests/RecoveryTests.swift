import Events
import Foundation
import Testing
import Workload

@Suite struct RecoveryTests {
    /// Writes `count` fix batches and returns the segment's bytes and the end position of each frame.
    func writeLog(_ directory: String, count: Int, seed: UInt64 = 5) throws -> (
        segment: String, frameEnds: [Int]
    ) {
        let writer = try LogWriter(directory: directory, options: quietOptions())
        var track = TrackGenerator(seed: seed, startMicros: 1_700_000_000_000_000)
        var ends: [Int] = []
        let segment = try segmentFiles(directory)[0]
        for index in 0..<count {
            try writer.append(
                .fixBatch(
                    FixBatch(
                        deviceID: 1, batchID: UUID128(high: 0, low: UInt64(index)),
                        fixes: track.next(1 + index % 4))))
            ends.append(try FileManager.default.attributesOfItem(atPath: segment)[.size] as! Int)
        }
        writer.close()
        return (segment, ends)
    }

    @Test func tornTailsAreCutAtEveryByte() throws {
        let source = TemporaryDirectory()
        let (segment, ends) = try writeLog(source.log, count: 6)
        let original = try Data(contentsOf: URL(fileURLWithPath: segment))
        // Cut every byte of the last three records (and the seam before them).
        let firstCut = ends[ends.count - 4]
        for cut in firstCut...original.count {
            let directory = TemporaryDirectory()
            try FileManager.default.createDirectory(atPath: directory.log, withIntermediateDirectories: true)
            try original.prefix(cut).write(
                to: URL(fileURLWithPath: directory.log + "/" + (segment as NSString).lastPathComponent))
            // No watermark file: as after an operating-system crash that lost it, nothing is known durable.
            let writer = try LogWriter(directory: directory.log, options: quietOptions())
            let complete = ends.filter { $0 <= cut }.count
            #expect(writer.durableEnd == UInt64(complete), "cut at \(cut)")
            #expect(
                writer.recovery.tornBytesTruncated == cut - (complete == 0 ? 64 : ends[complete - 1]),
                "cut at \(cut)")
            // The log is usable again: the next append takes the next offset.
            #expect(
                try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
                    == UInt64(complete))
            writer.close()
            let records = try readAll(directory.log)
            #expect(records.map(\.offset) == Array(0...UInt64(complete)), "cut at \(cut)")
        }
    }

    @Test func damageBelowTheWatermarkRefusesToOpen() throws {
        let directory = TemporaryDirectory()
        let (segment, ends) = try writeLog(directory.log, count: 4)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: segment))
        try handle.seek(toOffset: UInt64(ends[1] + 20))
        try handle.write(contentsOf: [0xAA])
        try handle.close()
        #expect {
            _ = try LogWriter(directory: directory.log, options: quietOptions())
        } throws: { error in
            guard case LogError.corrupt(let file, let position, _) = error else { return false }
            return file == segment && position == ends[1]
        }
        let report = try LogInspector(directory: directory.log).verify()
        #expect(!report.ok)
        // Repair cuts the log there and moves the rest aside; the log opens again.
        let repair = try LogInspector(directory: directory.log).repair()
        #expect(repair.newEndOffset == 2)
        #expect(!repair.movedFiles.isEmpty)
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(writer.durableEnd == 2)
        writer.close()
        #expect(try LogInspector(directory: directory.log).verify().ok)
    }

    @Test func everySingleBitFlipInASealedSegmentIsDetected() throws {
        let directory = TemporaryDirectory()
        var options = quietOptions()
        options.segmentBytesMax = 1
        do {
            let writer = try LogWriter(directory: directory.log, options: options)
            var track = TrackGenerator(seed: 6, startMicros: 0)
            for _ in 0..<3 {
                try writer.append(.fixBatch(FixBatch(deviceID: 2, batchID: .zero, fixes: track.next(3))))
            }
            writer.close()
        }
        let sealed = try segmentFiles(directory.log)[0]
        let original = try Data(contentsOf: URL(fileURLWithPath: sealed))
        #expect(try LogInspector(directory: directory.log).verify().ok)
        for byte in 0..<original.count {
            for bit in 0..<8 {
                var damaged = original
                damaged[byte] ^= UInt8(1 << bit)
                try damaged.write(to: URL(fileURLWithPath: sealed))
                let report = try LogInspector(directory: directory.log).verify(decodePayloads: false)
                #expect(!report.ok, "flip of bit \(bit) of byte \(byte) went unnoticed")
                if report.ok { return }
            }
        }
        try original.write(to: URL(fileURLWithPath: sealed))
    }

    @Test func anIncompleteNewSegmentIsRemoved() throws {
        let directory = TemporaryDirectory()
        _ = try writeLog(directory.log, count: 3)
        do {
            let writer = try LogWriter(directory: directory.log, options: quietOptions())
            try writer.roll()
            writer.close()
        }
        // A crash right after creating the next segment's file, before its header was complete.
        let next = directory.log + "/" + LogFormat.segmentFileName(baseOffset: 3)
        try Data([0x46, 0x49]).write(to: URL(fileURLWithPath: next))
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(writer.recovery.removedIncompleteSegment == next)
        #expect(try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: false))) == 3)
        writer.close()
        #expect(try readAll(directory.log).map(\.offset) == [0, 1, 2, 3])
        #expect(try LogInspector(directory: directory.log).verify().ok)
    }

    @Test func aMissingSegmentIsCorruption() throws {
        let directory = TemporaryDirectory()
        var options = quietOptions()
        options.segmentBytesMax = 1
        let writer = try LogWriter(directory: directory.log, options: options)
        for _ in 0..<4 { try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true))) }
        writer.close()
        let files = try segmentFiles(directory.log)
        try FileManager.default.removeItem(atPath: files[1])
        #expect {
            _ = try LogWriter(directory: directory.log, options: quietOptions())
        } throws: { error in
            guard case LogError.corrupt(let file, _, let reason) = error else { return false }
            return file == files[2] && reason.contains("not contiguous")
        }
    }
}
