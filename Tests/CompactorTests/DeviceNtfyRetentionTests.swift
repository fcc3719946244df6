import Compactor
import Events
import Testing

/// The compactor keeps a device's last ntfy topic (type 41) and drops the ones it replaced, and
/// every one of a removed device: the registry folded from the compacted log is the same.
@Suite struct DeviceNtfyRetentionTests {
    static let now: Int64 = 1_750_000_000_000_000

    static func record(_ event: Event, offset: UInt64) -> LogRecord {
        var encoded = EventCodec.encode(event, receivedAtMicros: now)
        encoded.header.offset = offset
        return LogRecord(header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
    }

    @Test func theLastTopicOfALiveDeviceStaysTheRestGo() throws {
        let log: [Event] = [
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 10, deviceUUID: .zero, name: "a", platform: "android", model: "")),
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 2, userID: 10, deviceUUID: UUID128(high: 0, low: 2), name: "b",
                    platform: "android",
                    model: "")),
            .deviceNtfySet(DeviceNtfySet(deviceID: 1, topicURL: "https://ntfy.example/one")),
            .deviceNtfySet(DeviceNtfySet(deviceID: 2, topicURL: "https://ntfy.example/two")),
            .deviceNtfySet(DeviceNtfySet(deviceID: 1, topicURL: "https://ntfy.example/three")),
            .deviceRemoved(DeviceRemoved(deviceID: 2)),
        ]
        var policy = RetentionPolicy(settings: RetentionSettings())
        for (offset, event) in log.enumerated() {
            policy.apply(event, offset: UInt64(offset))
            policy.collectSetting(event, offset: UInt64(offset))
        }
        let plans = try log.enumerated().map { offset, event in
            try policy.plan(Self.record(event, offset: UInt64(offset)), nowMicros: Self.now)
        }
        #expect(plans == [.keep, .keep, .drop(removedFixes: 0), .drop(removedFixes: 0), .keep, .keep])
        // A topic beyond what the fold saw is kept: nothing is known to replace it.
        let later = Self.record(
            .deviceNtfySet(DeviceNtfySet(deviceID: 1, topicURL: "https://ntfy.example/four")), offset: 9)
        #expect(try policy.plan(later, nowMicros: Self.now) == .keep)
    }
}
