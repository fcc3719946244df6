import Core
import Events
import Testing

/// The registry keeps the Web Push keys a UnifiedPush registration carries, one token per provider
/// per device (`apns-location` being a provider of its own), and snapshots keep them too.
@Suite struct PushRegistrationTests {
    func registry() -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: 3)
        registry.apply(
            .userCreated(
                UserCreated(
                    userID: 1, name: "alice", role: .member, tokenHash: .init(repeating: 1, count: 32))),
            offset: 0)
        registry.apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: UUID128("1b4e28ba-2fa1-11d2-883f-0016d3cca427")!,
                    name: "phone", platform: "ios", model: "")),
            offset: 1)
        return registry
    }

    let publicKey = [UInt8(4)] + [UInt8](repeating: 7, count: 64)
    let authSecret = [UInt8](repeating: 3, count: 16)

    @Test func keysAndProvidersAreKeptPerDevice() {
        var registry = registry()
        let events: [PushTokenRegistered] = [
            PushTokenRegistered(
                deviceID: 1, provider: "apns", token: "app", topic: "org.example", environment: "production"),
            PushTokenRegistered(
                deviceID: 1, provider: "apns-location", token: "loc", topic: "org.example.location-query",
                environment: "production"),
            PushTokenRegistered(
                deviceID: 1, provider: "unifiedpush", token: "https://up.example/1", topic: "",
                environment: "",
                webPushPublicKey: publicKey, webPushAuthSecret: authSecret),
            PushTokenRegistered(
                deviceID: 1, provider: "apns-location", token: "loc2", topic: "org.example.location-query",
                environment: "production"),
        ]
        for (index, event) in events.enumerated() {
            registry.apply(.pushTokenRegistered(event), offset: UInt64(2 + index))
        }
        let found = registry.pushRegistrations(deviceID: 1)
        #expect(found.map(\.key.provider) == ["apns", "apns-location", "unifiedpush"])
        #expect(found.map(\.key.token) == ["app", "loc2", "https://up.example/1"])
        #expect(found[2].registration.webPushPublicKey == publicKey)
        #expect(found[2].registration.webPushAuthSecret == authSecret)
    }

    @Test func snapshotsKeepTheKeysAndVersion1SnapshotsAreNoLongerRead() throws {
        var keyed = registry()
        keyed.apply(
            .pushTokenRegistered(
                PushTokenRegistered(
                    deviceID: 1, provider: "unifiedpush", token: "https://up.example/1", topic: "",
                    environment: "",
                    webPushPublicKey: publicKey, webPushAuthSecret: authSecret)),
            offset: 2)
        let snapshot = RegistrySnapshot(offset: 3, logID: .zero, segments: [], registry: keyed)
        let decoded = try RegistrySnapshot.decode(snapshot.encoded())
        #expect(decoded.registry.differences(from: keyed) == [])

        // A version 1 file, as findmy wrote it before: no key section at the end of the body. Not
        // read since version 9 (it holds no import batches): skipped as any unknown version.
        var plain = registry()
        plain.apply(
            .pushTokenRegistered(
                PushTokenRegistered(deviceID: 1, provider: "fcm", token: "f", topic: "", environment: "")),
            offset: 2)
        var bytes = RegistrySnapshot(offset: 3, logID: .zero, segments: [], registry: plain).encoded()
        // The CRC, version 8's flag (no record count), version 9's empty count (import batches),
        // version 7's empty count (notification settings), version 6's geofence part (highest id,
        // empty count), version 5's two empty counts (presence), version 4's empty count
        // (settings), version 3's four empty counts (locate permissions, commands), the empty key
        // section's count.
        bytes.removeLast(4 + 1 + 4 + 4 + 12 + 8 + 4 + 16 + 4)
        bytes[8] = 1
        bytes[9] = 0
        let bodyBytes = bytes.count - RegistrySnapshotFormat.headerBytes
        for index in 0..<8 { bytes[44 + index] = UInt8(truncatingIfNeeded: UInt64(bodyBytes) >> (8 * index)) }
        let crc = CRC32C.checksum(bytes)
        for index in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: crc >> (8 * UInt32(index)))) }
        #expect(throws: SnapshotDamage.unknownVersion(1)) { try RegistrySnapshot.decode(bytes) }
    }
}
