import Core
import Events
import HTTPClient
import Identity

/// Limits of a notification setting (docs/geofences.md, "Notifications").
public enum GeofenceNotifyLimits {
    /// A URL longer than this is not a webhook someone typed or pasted.
    public static let urlBytesMax = OutgoingURL.urlBytesMax
}

extension IdentityService {
    /// The rules of a user's alert targets (docs/found-notices.md): URLs checked as a fence's are,
    /// under `policy`, and webhooks signed with the user's secret from `signing`.
    public static func alertTargetRules(policy: AddressPolicy, signing: WebhookSigning) -> AlertTargetRules {
        AlertTargetRules(
            checkURL: { url, field throws(APIError) in try checkNotifyURL(url, field: field, policy: policy)
            },
            webhookSecret: { signing.secret(userID: $0) })
    }

    /// The settings of fence `geofenceID`, if it has any.
    public func geofenceNotifications(_ geofenceID: UInt64) -> GeofenceNotificationsSet? {
        store.registry.read { $0.registry.geofenceNotifications[geofenceID] }
    }

    /// Checks a URL for a notification channel (`OutgoingURL.problem`: `http` or `https`, a host,
    /// no spaces, at most `urlBytesMax` bytes, not a literal address `policy` refuses). An empty
    /// string means "no such channel".
    public static func checkNotifyURL(_ url: String, field: String, policy: AddressPolicy) throws(APIError) {
        guard !url.isEmpty else { return }
        if let problem = OutgoingURL.problem(url, field: field, policy: policy) {
            throw .badRequest(.invalidField, problem)
        }
    }

    /// Sets where fence `fence`'s transitions go (event 39); the fence must be the caller's (checked
    /// again under the mutation lock, so a concurrent delete wins cleanly), and each URL's host one
    /// that `outgoingTargets` lets the server send to. Returns the log offset.
    public func setGeofenceNotifications(
        _ fence: UInt64, owner: UInt64, webhookURL: String, ntfyURL: String, outgoingTargets: AddressPolicy
    ) throws(APIError) -> UInt64 {
        try Self.checkNotifyURL(webhookURL, field: "webhook_url", policy: outgoingTargets)
        try Self.checkNotifyURL(ntfyURL, field: "ntfy_url", policy: outgoingTargets)
        return try store.mutations.withLock { _ throws(APIError) -> UInt64 in
            guard store.registry.read({ $0.registry.geofences.fences[fence]?.ownerUserID }) == owner else {
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
