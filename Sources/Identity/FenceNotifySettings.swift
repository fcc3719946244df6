import Events
import HTTPClient

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

/// Limits of a notification setting (docs/geofences.md, "Notifications").
public enum GeofenceNotifyLimits {
    /// A URL longer than this is not a webhook someone typed or pasted.
    public static let urlBytesMax = 2048
}

extension IdentityService {
    /// The settings of fence `geofenceID`, if it has any.
    public func geofenceNotifications(_ geofenceID: UInt64) -> GeofenceNotificationsSet? {
        registry.read { $0.registry.geofenceNotifications[geofenceID] }
    }

    /// Checks a URL for a notification channel: `http` or `https`, a host, no spaces or control
    /// characters, at most `urlBytesMax` bytes, and a host that is not a literal address (or
    /// `localhost`) `policy` refuses. An empty string means "no such channel".
    public static func checkNotifyURL(_ url: String, field: String, policy: AddressPolicy) throws(APIError) {
        guard !url.isEmpty else { return }
        guard url.utf8.count <= GeofenceNotifyLimits.urlBytesMax else {
            throw .badRequest(
                .invalidField,
                "\(field) is \(url.utf8.count) bytes; at most \(GeofenceNotifyLimits.urlBytesMax)")
        }
        let lower = url.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            rest = url.dropFirst(8)
        } else if lower.hasPrefix("http://") {
            rest = url.dropFirst(7)
        } else {
            throw .badRequest(.invalidField, "\(field) must start with https:// or http://, got \"\(url)\"")
        }
        guard let host = rest.split(separator: "/", omittingEmptySubsequences: false).first, !host.isEmpty,
            !url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F })
        else {
            throw .badRequest(.invalidField, "\(field) must name a host and hold no spaces, got \"\(url)\"")
        }
        if let host = AddressPolicy.host(ofURL: url), let kind = policy.refusal(host: host) {
            throw .badRequest(
                .invalidField,
                "\(field) points at a \(kind) address (\(host)); the server sends only to public addresses"
                    + " unless its operator allows others (--allow-private-targets)")
        }
    }

    /// Sets where fence `fence`'s transitions go (event 39); the fence must be the caller's (checked
    /// again under the mutation lock, so a concurrent delete wins cleanly). Returns the log offset.
    public func setGeofenceNotifications(
        _ fence: UInt64, owner: UInt64, webhookURL: String, ntfyURL: String
    ) throws(APIError) -> UInt64 {
        try Self.checkNotifyURL(webhookURL, field: "webhook_url", policy: limits.outgoingTargets)
        try Self.checkNotifyURL(ntfyURL, field: "ntfy_url", policy: limits.outgoingTargets)
        return try mutations.withLock { _ throws(APIError) -> UInt64 in
            guard registry.read({ $0.registry.geofences.fences[fence]?.ownerUserID }) == owner else {
                throw Self.geofenceNotFound
            }
            return try appendAndApply(
                .geofenceNotificationsSet(
                    GeofenceNotificationsSet(
                        geofenceID: fence, ownerUserID: owner, webhookURL: webhookURL, ntfyURL: ntfyURL)),
                receivedAtMicros: clockMicros())
        }
    }
}
