/// Where a geofence's transitions are announced (docs/log-format.md, type 39,
/// docs/geofences.md "Notifications").
///
/// Payload of type 39, version 1: u64 geofence id, u64 owner user id, string webhook URL, string
/// ntfy topic URL (an empty string: no such channel). The last event for a fence wins; deleting the
/// fence (type 37) drops its settings. No secret is in the log: the webhook's signing key is derived
/// from a key file in the data directory (Sources/Geofences).
public struct GeofenceNotificationsSet: Equatable, Sendable {
    public var geofenceID: UInt64
    public var ownerUserID: UInt64
    /// Receives a signed JSON POST per transition; empty when none.
    public var webhookURL: String
    /// An ntfy topic URL that receives a text POST per transition; empty when none.
    public var ntfyURL: String

    public init(geofenceID: UInt64, ownerUserID: UInt64, webhookURL: String, ntfyURL: String) {
        self.geofenceID = geofenceID
        self.ownerUserID = ownerUserID
        self.webhookURL = webhookURL
        self.ntfyURL = ntfyURL
    }
}

extension EventCodec {
    static func encodeGeofenceNotify(_ set: GeofenceNotificationsSet, into w: inout ByteWriter) -> UInt8 {
        w.u64(set.geofenceID)
        w.u64(set.ownerUserID)
        w.string(set.webhookURL)
        w.string(set.ntfyURL)
        return EventType.geofenceNotificationsSet.rawValue
    }

    static func decodeGeofenceNotify(_ r: inout ByteReader) throws -> Event {
        .geofenceNotificationsSet(
            GeofenceNotificationsSet(
                geofenceID: try r.u64(), ownerUserID: try r.u64(), webhookURL: try r.string(),
                ntfyURL: try r.string()))
    }
}
