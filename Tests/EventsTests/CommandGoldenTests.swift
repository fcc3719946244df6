import Events
import Foundation
import Testing

/// The command events (types 27-32) as first written, committed in
/// Fixtures/log-commands-v1/: every later findmy must read them back exactly. Regenerate only for a
/// new payload version, in a new folder: FINDMY_WRITE_GOLDEN=1 swift test --filter CommandGoldenTests
@Suite(.serialized) struct CommandGoldenTests {
    static var fixture: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Fixtures/log-commands-v1").path
    }

    static var events: [Event] {
        let command = UUID128("3d1e6c1a-8f0b-4d5e-9a7c-2b4f6e8d0a1c")!
        let lost = UUID128("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")!
        return [
            .sharePermissionChanged(SharePermissionChanged(deviceID: 1, granteeUserID: 2, locate: true)),
            .commandRequested(
                CommandRequested(
                    commandID: command, deviceID: 1, kind: .locate, requestedByUserID: 2,
                    requestedAtMicros: 1_764_684_400_000_000)),
            .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: command, deviceID: 1, channel: "apns", reason: "429 TooManyRequests",
                    retryAtMicros: 1_764_684_405_000_000, addressDead: false)),
            .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: command, deviceID: 1, channel: "fcm", reason: "UNREGISTERED",
                    retryAtMicros: nil,
                    addressDead: true)),
            .commandSent(
                CommandSent(
                    commandID: command, deviceID: 1, channel: "apns",
                    providerID: "5E4C2A1B-0000-4000-8000-1234")),
            .commandAnswered(
                CommandAnswered(
                    commandID: command, deviceID: 1, batchOffset: 41, fixIndex: 2,
                    clientProtocol: .owntracksHTTP)),
            .commandRequested(
                CommandRequested(
                    commandID: lost, deviceID: 1, kind: .lost, message: "Lost — please call",
                    phone: "+49 30 1234567",
                    requestedByUserID: 1, requestedAtMicros: 1_764_684_500_000_000)),
            .commandSent(CommandSent(commandID: lost, deviceID: 1, channel: "report-answer")),
            .commandExpired(CommandExpired(commandID: lost, deviceID: 1, reason: "found")),
            .sharePermissionChanged(SharePermissionChanged(deviceID: 1, granteeUserID: 2, locate: false)),
        ]
    }

    static func receivedAt(_ index: Int) -> Int64 { 1_764_684_400_000_000 + Int64(index) * 1_000_000 }

    @Test func writeGoldenWhenAsked() throws {
        guard ProcessInfo.processInfo.environment["FINDMY_WRITE_GOLDEN"] == "1" else { return }
        try? FileManager.default.removeItem(atPath: Self.fixture)
        var options = quietOptions()
        options.clockMicros = { 1_764_684_400_000_000 }
        let writer = try LogWriter(directory: Self.fixture, options: options)
        for (index, event) in Self.events.enumerated() {
            try writer.append(event, receivedAtMicros: Self.receivedAt(index))
        }
        writer.close()
        try? FileManager.default.removeItem(atPath: Self.fixture + "/LOCK")
    }

    @Test func theCommandEventsReadBackExactly() throws {
        let records = try readAll(Self.fixture)
        #expect(try records.map { try $0.event() } == Self.events)
        #expect(records.map(\.header.type) == [32, 27, 29, 29, 28, 30, 27, 28, 31, 32])
        // Every command event names its device in the header, for scans that do not decode.
        #expect(records.allSatisfy { $0.header.deviceKey == 1 })
    }
}
