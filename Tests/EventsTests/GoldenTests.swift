import Events
import Foundation
import Testing

/// A log written by format version 1, committed in Fixtures/log-v1/, must read back exactly,
/// by this version and every later one. Regenerate only for a new format version, in a new folder:
/// FINDMY_WRITE_GOLDEN=1 swift test --filter GoldenTests
@Suite(.serialized) struct GoldenTests {
    static var fixture: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Fixtures/log-v1").path
    }

    /// The events of the golden log: every event type of version 1, and fixes with every field.
    static var events: [Event] {
        let hash = (0..<32).map { UInt8($0) }
        let device = UUID128("6f1c2a8e-4b7d-4e2a-9c3f-1a2b3c4d5e6f")!
        let fixes = [
            Fix(
                latitude: 52.520008, longitude: 13.404954, accuracyMeters: 12, altitudeMeters: 34.5,
                speedMetersPerSecond: 1.2,
                headingDegrees: 90, batteryPercent: 81, isCharging: false, source: "significant",
                recordedAtMicros: 1_764_684_000_123_000),
            Fix(
                latitude: 52.520102, longitude: 13.405011, accuracyMeters: 65, source: "visit",
                recordedAtMicros: 1_764_684_300_000_000),
            Fix(
                latitude: -33.8688, longitude: 151.2093, accuracyMeters: 3000, batteryPercent: 4,
                isCharging: true,
                source: "ondemand", recordedAtMicros: 1_764_770_000_000_000, clockSuspect: true),
        ]
        return [
            .userCreated(UserCreated(userID: 1, name: "ada", role: .admin, tokenHash: hash)),
            .userTokenIssued(UserTokenIssued(userID: 1, tokenHash: hash.reversed())),
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: device, name: "Ada's phone", platform: "ios",
                    model: "iPhone15,2")),
            .deviceTokenIssued(DeviceTokenIssued(deviceID: 1, tokenHash: hash)),
            .pushTokenRegistered(
                PushTokenRegistered(
                    deviceID: 1, provider: "apns", token: "a1b2c3", topic: "org.findmy.app",
                    environment: "production")),
            .fixBatch(
                FixBatch(
                    deviceID: 1, batchID: UUID128("0b7e2d7c-2f51-4c84-a1f3-5d0b4f4e9a10")!, fixes: fixes,
                    rejections: [Rejection(index: 3, reason: "latitude 91 is outside [-90, 90]")])),
            .reportingChanged(ReportingChanged(deviceID: 1, paused: true)),
            .pushTokenInvalidated(
                PushTokenInvalidated(provider: "apns", token: "a1b2c3", reason: "Unregistered")),
            .deviceTokenRevoked(DeviceTokenRevoked(deviceID: 1, tokenHash: hash)),
            .reportingChanged(ReportingChanged(deviceID: 1, paused: false)),
        ]
    }

    static let rollAfter = 5
    static func receivedAt(_ index: Int) -> Int64 { 1_764_684_400_000_000 + Int64(index) * 1_000_000 }

    @Test func writeGoldenWhenAsked() throws {
        // This findmy writes format version 2 (GoldenV2Tests): it can no longer write this fixture.
        guard ProcessInfo.processInfo.environment["FINDMY_WRITE_GOLDEN"] == "1", LogFormat.version == 1 else {
            return
        }
        try? FileManager.default.removeItem(atPath: Self.fixture)
        var options = quietOptions()
        options.clockMicros = { 1_764_684_400_000_000 }
        let writer = try LogWriter(directory: Self.fixture, options: options)
        for (index, event) in Self.events.enumerated() {
            if index == Self.rollAfter { try writer.roll() }
            try writer.append(event, receivedAtMicros: Self.receivedAt(index))
        }
        writer.close()
        try? FileManager.default.removeItem(atPath: Self.fixture + "/LOCK")
    }

    @Test func theVersion1LogReadsBackExactly() throws {
        let records = try readAll(Self.fixture)
        #expect(records.map(\.offset) == Array(0..<UInt64(Self.events.count)))
        #expect(try records.map { try $0.event() } == Self.events)
        #expect(records.map(\.header.receivedAtMicros) == (0..<Self.events.count).map(Self.receivedAt))
        #expect(try segmentFiles(Self.fixture).count == 2)
        let batch = records[5].header
        #expect(
            batch.fixCount == 3 && batch.recordedMinMicros == 1_764_684_000_123_000
                && batch.recordedMaxMicros == 1_764_770_000_000_000)
    }

    @Test func theVersion1LogVerifiesAndAcceptsAppends() throws {
        let copy = TemporaryDirectory()
        try FileManager.default.removeItem(atPath: copy.path)
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: copy.path)
        let report = try LogInspector(directory: copy.path).verify()
        #expect(report.ok, "\(report.problems)")
        #expect(
            report.records == Self.events.count && report.unknownRecords == 0
                && report.tornBytesTruncated == 0)
        let writer = try LogWriter(directory: copy.path, options: quietOptions())
        #expect(
            try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
                == UInt64(Self.events.count))
        writer.close()
    }
}
