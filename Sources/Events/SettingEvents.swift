/// A user's own settings (type 33; docs/log-format.md). One event type for every setting, named by
/// a string, so a later setting adds a name, not an event type. A reader ignores a name it does not
/// know, which lets an older findmy replay a newer one's log.

/// A user set `name` to `value` (type 33). The last event for a (user, name) pair wins.
public struct UserSettingChanged: Equatable, Sendable {
    public var userID: UInt64
    /// `owntracks_friends`: OwnTracks' answers carry the devices shared with the user.
    public var name: String
    /// `true` or `false` for a switch; a URL or "" for an alert target.
    public var value: String

    public init(userID: UInt64, name: String, value: String) {
        self.userID = userID
        self.name = name
        self.value = value
    }

    /// The names findmy writes (the API's and the panel's), one place.
    public static let owntracksFriends = "owntracks_friends"
    /// Where "notify when found" goes (docs/found-notices.md): an ntfy topic URL, "" for none.
    public static let notifyNtfyURL = "notify_ntfy_url"
    /// Where "notify when found" goes: a webhook URL (signed JSON), "" for none.
    public static let notifyWebhookURL = "notify_webhook_url"
}

extension EventCodec {
    static func encodeSetting(_ changed: UserSettingChanged, into w: inout ByteWriter) -> UInt8 {
        w.u64(changed.userID)
        w.string(changed.name)
        w.string(changed.value)
        return EventType.userSettingChanged.rawValue
    }

    static func decodeSetting(_ r: inout ByteReader) throws -> Event {
        .userSettingChanged(
            UserSettingChanged(userID: try r.u64(), name: try r.string(), value: try r.string()))
    }
}
