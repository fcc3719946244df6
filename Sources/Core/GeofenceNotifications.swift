import Events

/// Where a geofence's transitions are announced (docs/geofences.md "Notifications"): the
/// settings are event 39, folded here so that the API and the notifier read them without a database,
/// and kept in the registry snapshot (body version 7). Deleting the fence drops them; a definition
/// by another owner than the fence's is not trusted, as in `GeofenceBook`.
extension Registry {
    mutating func applyGeofenceNotifications(_ event: Event) {
        switch event {
        case .geofenceNotificationsSet(let set):
            guard geofences.fences[set.geofenceID]?.ownerUserID == set.ownerUserID else { return }
            if set.webhookURL.isEmpty && set.ntfyURL.isEmpty {
                geofenceNotifications[set.geofenceID] = nil
            } else {
                geofenceNotifications[set.geofenceID] = set
            }
        case .geofenceDeleted(let deleted):
            if geofences.fences[deleted.geofenceID] == nil { geofenceNotifications[deleted.geofenceID] = nil }
        default:
            break
        }
    }

    // Snapshot body, version 7: u32 count, then each setting as the payload of its type 39 event.
    func encodeGeofenceNotificationPart(_ w: inout ByteWriter) {
        w.u32(UInt32(geofenceNotifications.count))
        for set in geofenceNotifications.values.sorted(by: { $0.geofenceID < $1.geofenceID }) {
            w.u64(set.geofenceID)
            w.u64(set.ownerUserID)
            w.string(set.webhookURL)
            w.string(set.ntfyURL)
        }
    }

    mutating func decodeGeofenceNotificationPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let set = GeofenceNotificationsSet(
                geofenceID: try r.u64(), ownerUserID: try r.u64(), webhookURL: try r.string(),
                ntfyURL: try r.string())
            guard geofences.fences[set.geofenceID]?.ownerUserID == set.ownerUserID,
                geofenceNotifications[set.geofenceID] == nil
            else {
                throw DecodeError.invalid(
                    "notification settings of geofence \(set.geofenceID) are inconsistent")
            }
            geofenceNotifications[set.geofenceID] = set
        }
    }
}
