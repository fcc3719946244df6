import Events
import Testing

@testable import Core

/// Event 41 in the registry: the last topic of a live device wins, an empty one clears it, the
/// device's removal drops it, and the snapshot body (version 10) carries it; a version 9 body
/// reads with none.
struct DeviceNtfyTopicsTests {
    static func enrolled() -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: 4)
        registry.apply(
            .userCreated(
                UserCreated(
                    userID: 1, name: "olga", role: .member, tokenHash: [UInt8](repeating: 1, count: 32))),
            offset: 0)
        for id in [UInt64(7), 8] {
            registry.apply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: id, userID: 1, deviceUUID: UUID128(high: id, low: id), name: "phone \(id)",
                        platform: "android", model: "Pixel")),
                offset: id)
        }
        return registry
    }

    static func set(_ device: UInt64, _ url: String) -> Event {
        .deviceNtfySet(DeviceNtfySet(deviceID: device, topicURL: url))
    }

    @Test func theLastTopicWinsAndTheSnapshotKeepsIt() throws {
        var registry = Self.enrolled()
        registry.apply(Self.set(7, "https://ntfy.example/a"), offset: 10)
        registry.apply(Self.set(7, "https://ntfy.example/b"), offset: 11)
        registry.apply(Self.set(8, "https://ntfy.example/c"), offset: 12)
        registry.apply(Self.set(8, ""), offset: 13)
        registry.apply(Self.set(99, "https://ntfy.example/nobody"), offset: 14)
        #expect(registry.ntfyTopicURL(deviceID: 7) == "https://ntfy.example/b")
        #expect(registry.ntfyTopicURL(deviceID: 8) == nil)
        #expect(registry.ntfyTopicURL(deviceID: 99) == nil)

        var reader = ByteReader(registry.encodeBody()[...])
        let decoded = try Registry.decodeBody(&reader, recentBatchesPerDeviceMax: 4)
        #expect(reader.remaining == 0)
        #expect(decoded.differences(from: registry) == [])
        #expect(decoded.ntfyTopicURL(deviceID: 7) == "https://ntfy.example/b")

        registry.apply(.deviceRemoved(DeviceRemoved(deviceID: 7)), offset: 15)
        #expect(registry.ntfyTopicURL(deviceID: 7) == nil)
        #expect(registry.ntfyTopics.isEmpty)
        // A removed device takes none again.
        registry.apply(Self.set(7, "https://ntfy.example/d"), offset: 16)
        #expect(registry.ntfyTopics.isEmpty)
    }

    @Test func theEventRoundTripsThroughTheCodecWithItsDevice() throws {
        let event = Self.set(9, "https://ntfy.sh/olga-phone?x=1")
        let encoded = EventCodec.encode(event, receivedAtMicros: 5)
        #expect(encoded.header.type == 41 && encoded.header.deviceKey == 9)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
    }
}
