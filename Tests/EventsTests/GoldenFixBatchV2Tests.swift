import Events
import Foundation
import Testing
import Workload

/// A log whose fix batches are payload version 2 (decimal columns), committed in
/// Fixtures/log-v2-fixbatch-v2/, must read back exactly, by this version and every later one. It
/// is log format version 2 (group records) like Fixtures/log-v2: only the fix batch payload
/// changed. Regenerate only for a new payload version, in a new folder:
/// FINDMY_WRITE_GOLDEN=1 swift test --filter GoldenFixBatchV2Tests
@Suite(.serialized) struct GoldenFixBatchV2Tests {
    static var fixture: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Fixtures/log-v2-fixbatch-v2").path
    }

    /// The version-2 golden log's events, then batches that take every form of a column: 7-decimal
    /// coordinates, full-precision doubles, values no decimal holds (-0.0, NaN, infinity),
    /// seconds, milliseconds and microseconds, several sources, absent fields.
    static var events: [Event] {
        let precise = Fix(
            latitude: 37.332331410000004, longitude: -122.03121860050201, accuracyMeters: 4.999999,
            altitudeMeters: 12.345678901, speedMetersPerSecond: 0.30000000000000004, headingDegrees: 0,
            batteryPercent: 100, isCharging: true, source: "significant",
            recordedAtMicros: 1_764_684_399_123_456)
        let special = Fix(
            latitude: -0.0, longitude: Double(bitPattern: 0x7ff8_0000_dead_beef), accuracyMeters: .infinity,
            altitudeMeters: -0.0, source: "manual", recordedAtMicros: 1_764_684_399_000_001,
            clockSuspect: true)
        let plain = Fix(
            latitude: 52.5200066, longitude: 13.4049540, accuracyMeters: nil, source: "visit",
            recordedAtMicros: 1_764_684_399_000_000)
        var track = TrackGenerator(seed: 15, startMicros: 1_764_684_000_000_000)
        return GoldenV2Tests.events + [
            .fixBatch(FixBatch(deviceID: 1, batchID: UUID128(high: 0x2_5eed, low: 1), fixes: [track.next()])),
            .fixBatch(
                FixBatch(
                    deviceID: 1, batchID: UUID128(high: 0x2_5eed, low: 2), fixes: [precise, special, plain],
                    rejections: [
                        Rejection(index: 3, reason: "out_of_range: heading_deg must be within [0, 360)")
                    ],
                    clientProtocol: .overland)),
            .fixBatch(
                FixBatch(deviceID: 1, batchID: UUID128(high: 0x2_5eed, low: 3), fixes: track.next(100))),
        ]
    }

    /// Group commits: the log-v2 fixture's, then the three new batches in one group.
    static let groups = GoldenV2Tests.groups + [3]
    static func receivedAt(_ index: Int) -> Int64 { GoldenV2Tests.receivedAt(index) }

    @Test func writeGoldenWhenAsked() throws {
        guard ProcessInfo.processInfo.environment["FINDMY_WRITE_GOLDEN"] == "1",
            EventCodec.fixBatchVersionCurrent == 2
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
            if index == GoldenV2Tests.rollAfterGroup { try writer.roll() }
        }
        writer.close()
        try? FileManager.default.removeItem(atPath: Self.fixture + "/LOCK")
    }

    @Test func theFixBatchVersion2LogReadsBackExactly() throws {
        let records = try readAll(Self.fixture)
        #expect(records.map(\.offset) == Array(0..<UInt64(Self.events.count)))
        #expect(try records.map { try $0.event() } == Self.events)
        #expect(records.map(\.header.receivedAtMicros) == (0..<Self.events.count).map(Self.receivedAt))
        let batches = records.filter { $0.header.type == EventType.fixBatch.rawValue }
        #expect(batches.count == 8)
        // Every batch of this fixture, the log-v2 fixture's included, was written as version 2.
        #expect(batches.allSatisfy { $0.header.eventVersion == 2 })
        #expect(records.suffix(2).first?.header.clientProtocol == .overland)
        let files = try segmentFiles(Self.fixture)
        #expect(files.count == 2)
        for path in files {
            #expect(try Data(contentsOf: URL(fileURLWithPath: path))[8] == 2, "\(path) is format version 2")
        }
    }

    @Test func theFixBatchVersion2LogVerifiesAndAcceptsAppends() throws {
        let copy = TemporaryDirectory()
        try FileManager.default.removeItem(atPath: copy.path)
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: copy.path)
        let report = try LogInspector(directory: copy.path).verify()
        #expect(report.ok, "\(report.problems)")
        #expect(report.records == Self.events.count && report.fixes == 46 + 104 && report.unknownRecords == 0)
        let writer = try LogWriter(directory: copy.path, options: quietOptions())
        #expect(
            try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
                == UInt64(Self.events.count))
        writer.close()
        #expect(try readAll(copy.path).count == Self.events.count + 1)
    }
}
