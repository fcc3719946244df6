import Events
import Testing

@testable import Core

/// Event 39 in the registry: the last setting wins, another owner's is ignored, deleting the fence
/// drops it, and the snapshot body (version 7) carries it.
struct FenceNotifySettingsTests {
    let fence = GeofenceDefined(
        geofenceID: 3, ownerUserID: 1, name: "Home", latitude: 52.52, longitude: 13.405, radiusMeters: 100,
        deviceIDs: [7])

    func set(_ webhook: String, owner: UInt64 = 1) -> Event {
        .geofenceNotificationsSet(
            GeofenceNotificationsSet(geofenceID: 3, ownerUserID: owner, webhookURL: webhook, ntfyURL: ""))
    }

    @Test func theOwnersLastSettingWinsAndTheSnapshotKeepsIt() throws {
        var registry = Registry(recentBatchesPerDeviceMax: 4)
        registry.apply(.geofenceDefined(fence), offset: 0)
        registry.apply(set("https://a.example/hook"), offset: 1)
        registry.apply(set("https://b.example/hook"), offset: 2)
        registry.apply(set("https://evil.example/hook", owner: 2), offset: 3)
        #expect(registry.geofenceNotifications[3]?.webhookURL == "https://b.example/hook")
        let body = registry.encodeBody()
        var reader = ByteReader(body[...])
        let decoded = try Registry.decodeBody(&reader, recentBatchesPerDeviceMax: 4)
        #expect(decoded.geofenceNotifications == registry.geofenceNotifications)
        #expect(decoded.differences(from: registry) == [])

        registry.apply(.geofenceDeleted(GeofenceDeleted(geofenceID: 3, ownerUserID: 1)), offset: 4)
        #expect(registry.geofenceNotifications[3] == nil)
        // Both channels empty: no settings at all.
        var cleared = Registry(recentBatchesPerDeviceMax: 4)
        cleared.apply(.geofenceDefined(fence), offset: 0)
        cleared.apply(set("https://a.example/hook"), offset: 1)
        cleared.apply(set(""), offset: 2)
        #expect(cleared.geofenceNotifications.isEmpty)
    }

    @Test func theEventRoundTripsThroughTheCodec() throws {
        let event = Event.geofenceNotificationsSet(
            GeofenceNotificationsSet(
                geofenceID: 9, ownerUserID: 4, webhookURL: "https://x.example/h?a=1",
                ntfyURL: "https://ntfy.sh/t"))
        let encoded = EventCodec.encode(event, receivedAtMicros: 5)
        #expect(encoded.header.type == 39)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
    }
}
