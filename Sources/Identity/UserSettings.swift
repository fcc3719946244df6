import Events
import HTTP
import JSON

/// A user's own settings (docs/api.md, "Account settings"): `GET` and `PUT
/// /api/find-my/account/settings`, and the panel's account page. Each change is one
/// `user_setting_changed` event, applied to the registry before the answer is sent, so the next
/// request (and a restarted server, from the log or the snapshot) sees it.
extension IdentityService {
    func addSettingsRoutes(to router: inout GuardedRouter, alertTargets: AlertTargetRules?) {
        router.add("GET", "/api/find-my/account/settings") { [self] _, caller in
            settingsAnswer(userID: caller.userID, webhookSecret: alertTargets?.webhookSecret)
        }
        router.add("PUT", "/api/find-my/account/settings") { [self] request, caller in
            respond { () throws(APIError) in
                let object = try parseObject(
                    request.body,
                    allowed: [
                        UserSettingChanged.owntracksFriends, UserSettingChanged.notifyNtfyURL,
                        UserSettingChanged.notifyWebhookURL,
                    ])
                // A URL as a string, "" or null to clear it; absent leaves it as it is.
                func url(_ name: String) throws(APIError) -> String? {
                    if case .null? = object[name] { return "" }
                    return try field { () throws(JSONAccessError) in try object.stringIfPresent(name) }
                }
                let ntfy = try url(UserSettingChanged.notifyNtfyURL)
                let webhook = try url(UserSettingChanged.notifyWebhookURL)
                let friends = try field { () throws(JSONAccessError) in
                    try object.boolIfPresent(UserSettingChanged.owntracksFriends)
                }
                if ntfy != nil || webhook != nil {
                    guard let alertTargets else {
                        throw .badRequest(
                            .unknownField, "this server sends no notifications: no alert targets")
                    }
                    try setNotifyTargets(
                        userID: caller.userID, ntfyURL: ntfy, webhookURL: webhook,
                        checkURL: alertTargets.checkURL, via: "api")
                }
                if let friends { try setOwnTracksFriends(userID: caller.userID, friends, via: "api") }
                return settingsAnswer(userID: caller.userID, webhookSecret: alertTargets?.webhookSecret)
            }
        }
    }

    /// Whether OwnTracks' answers to user `userID`'s devices carry the devices shared with them.
    public func owntracksFriends(userID: UInt64) -> Bool {
        store.registry.read { $0.registry.users[userID]?.owntracksFriends ?? false }
    }

    /// Turns user `userID`'s OwnTracks Friends setting on or off. Setting it to what it is already
    /// appends nothing. `via` names the caller's path in the server log (`api`, `panel`).
    public func setOwnTracksFriends(userID: UInt64, _ on: Bool, via: String) throws(APIError) {
        let changed = try store.mutations.withLock { _ throws(APIError) -> Bool in
            guard let user = store.registry.read({ $0.registry.users[userID] }) else {
                throw APIError(status: 404, code: .userNotFound, message: "no user with id \(userID)")
            }
            guard user.owntracksFriends != on else { return false }
            _ = try appendAndApply(
                .userSettingChanged(
                    UserSettingChanged(
                        userID: userID, name: UserSettingChanged.owntracksFriends,
                        value: on ? "true" : "false")),
                receivedAtMicros: clockMicros())
            return true
        }
        guard changed else { return }
        StructuredLog.info(
            "user_setting_changed",
            [
                "user_id": .int(Int64(userID)), "setting": .string(UserSettingChanged.owntracksFriends),
                "value": .bool(on), "via": .string(via),
            ])
    }

    /// `{"owntracks_friends": bool, "notify_ntfy_url": url|null, "notify_webhook_url": url|null,
    /// "notify_webhook_secret", "signature_header"}`: every setting there is, whether the request
    /// changed it or not; the secret (the key of the webhook's signature) where a notifier signs.
    func settingsAnswer(userID: UInt64, webhookSecret: (@Sendable (UInt64) -> String)?) -> HTTPResponse {
        let targets = notifyTargets(userID: userID)
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key(UserSettingChanged.owntracksFriends)
        writer.bool(owntracksFriends(userID: userID))
        for (name, url) in [
            (UserSettingChanged.notifyNtfyURL, targets.ntfyURL),
            (UserSettingChanged.notifyWebhookURL, targets.webhookURL),
        ] {
            writer.key(name)
            if url.isEmpty { writer.null() } else { writer.string(url) }
        }
        if let webhookSecret {
            writer.key("notify_webhook_secret")
            writer.string(webhookSecret(userID))
            writer.key("signature_header")
            writer.string("X-Findmy-Signature")
        }
        writer.endObject()
        return .json(writer.bytes)
    }
}
