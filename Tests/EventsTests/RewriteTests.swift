import Events
import Foundation
import Testing
import Workload

@Suite struct RewriteTests {
    /// Three sealed segments of fix batches from two devices, and an active one.
    func makeLog(_ directory: String) throws -> LogWriter {
        var options = quietOptions()
        options.segmentBytesMax = 2_000
        let writer = try LogWriter(directory: directory, options: options)
        var tracks = [
            TrackGenerator(seed: 1, startMicros: 1_700_000_000_000_000),
            TrackGenerator(seed: 2, startMicros: 1_700_000_000_000_000),
        ]
        for index in 0..<30 {
            let device = index % 2
            try writer.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(device + 1), batchID: UUID128(high: 0, low: UInt64(index)),
                        fixes: tracks[device].next(4))))
        }
        return writer
    }

    @Test func rewritingKeepsOffsetsAndSurvivesReopening() throws {
        let directory = TemporaryDirectory()
        let writer = try makeLog(directory.log)
        let before = try readAll(directory.log)
        let firstSegment = try segmentFiles(directory.log)[0]
        let base = LogFormat.baseOffset(fileName: (firstSegment as NSString).lastPathComponent)!

        // A reader that opened the old segment before the rewrite keeps reading the old file.
        let oldHandle = try FileHandle(forReadingFrom: URL(fileURLWithPath: firstSegment))

        // Device 2's batches go; device 1's keep only their first fix.
        let report = try writer.rewriteSegment(base: base) { record in
            if record.header.deviceKey == 2 { return .drop }
            guard case .fixBatch(var batch) = try record.event() else { return .keep }
            batch.fixes = Array(batch.fixes.prefix(1))
            return .replace(
                EventCodec.encode(.fixBatch(batch), receivedAtMicros: record.header.receivedAtMicros))
        }
        #expect(report.recordsDropped > 0 && report.recordsReplaced > 0)
        #expect(report.bytesAfter < report.bytesBefore)
        #expect(try oldHandle.readToEnd()?.count == report.bytesBefore)
        try oldHandle.close()

        let after = try readAll(directory.log)
        let rewrittenOffsets = Set(before.filter { $0.segmentPath == firstSegment }.map(\.offset))
        for record in after where rewrittenOffsets.contains(record.offset) {
            #expect(record.header.deviceKey == 1)
            #expect(record.header.fixCount == 1)
            let original = before.first { $0.offset == record.offset }!
            #expect(record.header.receivedAtMicros == original.header.receivedAtMicros)
            #expect(record.header.idempotencyKey == original.header.idempotencyKey)
        }
        // Records outside the rewritten segment are untouched, at the same offsets.
        let untouched = before.filter { !rewrittenOffsets.contains($0.offset) }
        #expect(
            after.filter { !rewrittenOffsets.contains($0.offset) }.map(\.offset) == untouched.map(\.offset))

        // Appends continue at the next offset; the log verifies and reopens.
        #expect(try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true))) == 30)
        writer.close()
        #expect(try LogInspector(directory: directory.log).verify().ok)
        let reopened = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(reopened.durableEnd == 31)
        reopened.close()
    }

    @Test func aCrashDuringARewriteLeavesTheOldSegment() throws {
        let directory = TemporaryDirectory()
        let writer = try makeLog(directory.log)
        writer.close()
        let first = try segmentFiles(directory.log)[0]
        let original = try Data(contentsOf: URL(fileURLWithPath: first))
        // The temporary file a crashed rewrite leaves behind, half written.
        try original.prefix(original.count / 2).write(to: URL(fileURLWithPath: first + ".tmp"))
        let reopened = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(reopened.recovery.removedTemporaryFiles == 1)
        reopened.close()
        #expect(!FileManager.default.fileExists(atPath: first + ".tmp"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: first)) == original)
        #expect(try LogInspector(directory: directory.log).verify().ok)
    }

    @Test func aRewriteThatDropsEverythingKeepsTheSegmentContiguous() throws {
        let directory = TemporaryDirectory()
        let writer = try makeLog(directory.log)
        let segments = try segmentFiles(directory.log)
        let second = LogFormat.baseOffset(fileName: (segments[1] as NSString).lastPathComponent)!
        _ = try writer.rewriteSegment(base: second) { _ in .drop }
        writer.close()
        let report = try LogInspector(directory: directory.log).verify()
        #expect(report.ok, "\(report.problems)")
        let reopened = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(reopened.durableEnd == 30)
        reopened.close()
    }
}
