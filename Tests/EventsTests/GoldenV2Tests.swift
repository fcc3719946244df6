import Events
import Foundation
import Testing
import Workload

/// A log written by format version 2 (group records), committed in Fixtures/log-v2/, must read
/// back exactly, by this version and every later one. Regenerate only for a new format version, in
/// a new folder: FINDMY_WRITE_GOLDEN=1 swift test --filter GoldenV2Tests
@Suite(.serialized) struct GoldenV2Tests {
    static var fixture: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Fixtures/log-v2").path
    }

    /// Every event of the version-1 golden log, a 40-fix batch, then a batch from each app protocol.
    static var events: [Event] {
        let fix = Fix(
            latitude: 48.858370, longitude: 2.294481, accuracyMeters: nil, source: "gps",
            recordedAtMicros: 1_764_684_500_000_000)
        let apps: [Event] = [1, 3, 4].map { raw in
            .fixBatch(
                FixBatch(
                    deviceID: 1, batchID: UUID128(high: 0x5eed, low: UInt64(raw)), fixes: [fix],
                    clientProtocol: ClientProtocol(rawValue: raw)!))
        }
        // Over 1,024 bytes raw: kept in the group as the appender's LZ4 block, beside raw members.
        var track = TrackGenerator(seed: 7, startMicros: 1_764_684_000_000_000)
        let long = Event.fixBatch(
            FixBatch(deviceID: 1, batchID: UUID128(high: 0x5eed, low: 40), fixes: track.next(40)))
        return GoldenTests.events + [long] + apps
    }

    /// The group commits the fixture was written in: requests per group record, and where the
    /// writer rolled to a new segment.
    static let groups = [5, 8, 1]
    static let rollAfterGroup = 0
    static func receivedAt(_ index: Int) -> Int64 { 1_764_684_400_000_000 + Int64(index) * 1_000_000 }

    @Test func writeGoldenWhenAsked() throws {
        // This findmy writes fix batch payload version 2 (GoldenFixBatchV2Tests): it can no longer
        // write this fixture, whose batches are version 1.
        guard ProcessInfo.processInfo.environment["FINDMY_WRITE_GOLDEN"] == "1",
            EventCodec.fixBatchVersionCurrent == 1
        else { return }
        try? FileManager.default.removeItem(atPath: Self.fixture)
        var options = quietOptions()
        options.clockMicros = { 1_764_684_400_000_000 }
        options.groupCommitDelayMicros = 1_000_000
        let writer = try LogWriter(directory: Self.fixture, options: options)
        var start = 0
        for (index, size) in Self.groups.enumerated() {
            let offsets = try GroupRecordTests.appendAsOneGroup(
                writer, Array(Self.events[start..<(start + size)]),
                receivedAt: { Self.receivedAt(start + $0) })
            #expect(offsets == Array(UInt64(start)..<UInt64(start + size)))
            start += size
            if index == Self.rollAfterGroup { try writer.roll() }
        }
        writer.close()
        try? FileManager.default.removeItem(atPath: Self.fixture + "/LOCK")
    }

    @Test func theVersion2LogReadsBackExactly() throws {
        let records = try readAll(Self.fixture)
        #expect(records.map(\.offset) == Array(0..<UInt64(Self.events.count)))
        #expect(try records.map { try $0.event() } == Self.events)
        #expect(records.map(\.header.receivedAtMicros) == (0..<Self.events.count).map(Self.receivedAt))
        #expect(records.suffix(3).map(\.header.clientProtocol.rawValue) == [1, 3, 4])
        #expect(records[5].header.idempotencyKey == UUID128("0b7e2d7c-2f51-4c84-a1f3-5d0b4f4e9a10")!)
        let batch = records[5].header
        #expect(
            batch.fixCount == 3 && batch.recordedMinMicros == 1_764_684_000_123_000
                && batch.recordedMaxMicros == 1_764_770_000_000_000 && batch.deviceKey == 1)
        // On disk: two version-2 segments, one group record per group commit.
        let files = try segmentFiles(Self.fixture)
        #expect(files.count == 2)
        var members: [[UInt32]] = []
        for name in files {
            let path = name
            #expect(try Data(contentsOf: URL(fileURLWithPath: path))[8] == 2, "\(name) is version 2")
            members.append(try GroupRecordTests.frames(path).compactMap { $0.group?.memberCount })
        }
        #expect(members == [[5], [8, 1]])
    }

    @Test func theVersion2LogVerifiesAndAcceptsAppends() throws {
        let copy = TemporaryDirectory()
        try FileManager.default.removeItem(atPath: copy.path)
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: copy.path)
        let report = try LogInspector(directory: copy.path).verify()
        #expect(report.ok, "\(report.problems)")
        #expect(
            report.records == Self.events.count && report.fixes == 46 && report.unknownRecords == 0
                && report.tornBytesTruncated == 0)
        let writer = try LogWriter(directory: copy.path, options: quietOptions())
        #expect(
            try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
                == UInt64(Self.events.count))
        writer.close()
        #expect(try readAll(copy.path).count == Self.events.count + 1)
    }
}
