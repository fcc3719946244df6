import Core
import Events
import HTTP
import JSON

/// A user's own alert targets (docs/found-notices.md): where "notify when found" goes, an ntfy topic
/// URL and a webhook URL, kept as two user settings (event 33, `notify_ntfy_url` and
/// `notify_webhook_url`; "" for none). Set through `PUT /api/find-my/account/settings` and the
/// panel's account page; checked like a fence's notification URLs when set (`AlertTargetRules`),
/// and against the address policy again when sent.
/// What the account routes need from the notifier's side (Geofences builds it): how a target URL
/// is checked (`checkNotifyURL` under the server's address policy) and the secret that signs a
/// user's found-notice webhooks (`WebhookSigning`).
public struct AlertTargetRules: Sendable {
    public var checkURL: @Sendable (_ url: String, _ field: String) throws(APIError) -> Void
    public var webhookSecret: @Sendable (_ userID: UInt64) -> String

    public init(
        checkURL: @escaping @Sendable (_ url: String, _ field: String) throws(APIError) -> Void,
        webhookSecret: @escaping @Sendable (_ userID: UInt64) -> String
    ) {
        self.checkURL = checkURL
        self.webhookSecret = webhookSecret
    }
}

extension IdentityService {
    /// User `userID`'s alert targets, "" where none.
    public func notifyTargets(userID: UInt64) -> (ntfyURL: String, webhookURL: String) {
        store.registry.read { state in
            let user = state.registry.users[userID]
            return (user?.notifyNtfyURL ?? "", user?.notifyWebhookURL ?? "")
        }
    }

    /// Sets user `userID`'s alert targets: nil leaves one as it is, "" clears it. Both URLs are
    /// checked (`checkURL`, `AlertTargetRules.checkURL`) before either is written; a value equal to the current one appends nothing. `via`
    /// names the caller's path in the server log (`api`, `panel`).
    public func setNotifyTargets(
        userID: UInt64, ntfyURL: String?, webhookURL: String?,
        checkURL: (_ url: String, _ field: String) throws(APIError) -> Void, via: String
    ) throws(APIError) {
        if let ntfyURL { try checkURL(ntfyURL, UserSettingChanged.notifyNtfyURL) }
        if let webhookURL { try checkURL(webhookURL, UserSettingChanged.notifyWebhookURL) }
        try store.mutations.withLock { _ throws(APIError) in
            guard let user = store.registry.read({ $0.registry.users[userID] }) else {
                throw APIError(status: 404, code: .userNotFound, message: "no user with id \(userID)")
            }
            let changes = [
                (UserSettingChanged.notifyNtfyURL, ntfyURL, user.notifyNtfyURL),
                (UserSettingChanged.notifyWebhookURL, webhookURL, user.notifyWebhookURL),
            ]
            for (name, wanted, current) in changes {
                guard let wanted, wanted != current else { continue }
                _ = try appendAndApply(
                    .userSettingChanged(UserSettingChanged(userID: userID, name: name, value: wanted)),
                    receivedAtMicros: clockMicros())
                // The URL is the user's own; the log line says only whether one is set.
                StructuredLog.info(
                    "user_setting_changed",
                    [
                        "user_id": .int(Int64(userID)), "setting": .string(name),
                        "set": .bool(!wanted.isEmpty),
                        "via": .string(via),
                    ])
            }
        }
    }
}
