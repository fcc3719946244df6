import Crypto

/// A message to an ntfy topic (https://docs.ntfy.sh/publish/): a POST of the text to the topic's
/// URL, with the title, priority and tags in ntfy's headers. Geofence alerts and the ntfy command
/// channel both send through this one form.
public struct NtfyMessage: Sendable, Equatable {
    /// ntfy's priorities, 1 (min) to 5 (max, `urgent`): the Android app lets a user make a topic's
    /// max-priority messages ring through Do Not Disturb, and keep ringing.
    public static let priorityMax = 5
    public static let priorityDefault = 3

    public var title: String
    /// Comma-separated; a tag that is an emoji short code (`rotating_light`) is shown as the emoji.
    public var tags: String
    public var priority: Int
    public var body: String

    public init(title: String, tags: String, priority: Int = NtfyMessage.priorityDefault, body: String) {
        precondition((1...NtfyMessage.priorityMax).contains(priority), "ntfy priorities are 1 to 5")
        self.title = title
        self.tags = tags
        self.priority = priority
        self.body = body
    }

    /// The POST to `topicURL`, with `extraHeaders` (`name: value`) after ntfy's.
    public func request(topicURL: String, extraHeaders: [String] = []) -> OutgoingRequest {
        var headers = ["Content-Type: text/plain; charset=utf-8"]
        if !title.isEmpty { headers.append("Title: " + Self.headerValue(title)) }
        if !tags.isEmpty { headers.append("Tags: " + Self.headerValue(tags)) }
        if priority != Self.priorityDefault { headers.append("Priority: \(priority)") }
        return OutgoingRequest(url: topicURL, headers: headers + extraHeaders, body: Array(body.utf8))
    }

    /// A header value as ntfy reads it: plain when printable ASCII, else RFC 2047 (`=?UTF-8?B?...?=`),
    /// which ntfy decodes; a header can then carry neither a line break nor a byte libcurl would reject.
    public static func headerValue(_ text: String) -> String {
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return text }
        return "=?UTF-8?B?" + Base64.encode(Array(text.utf8)) + "?="
    }
}

/// Why a URL someone gave for the server to send to (a webhook, an ntfy topic) is refused when it
/// is set; what it resolves to is checked again at each connection (`AddressPolicy`).
public enum OutgoingURL {
    /// A URL longer than this is not one someone typed or pasted.
    public static let urlBytesMax = 2048

    /// Nil when `url` may be used: `http` or `https`, a host, no spaces or control characters, at
    /// most `urlBytesMax` bytes, no `user:password@` unless `allowsUserinfo`, and a host that is not
    /// a literal address (or `localhost`) `policy` refuses. Else what is wrong, naming `field`.
    public static func problem(
        _ url: String, field: String, policy: AddressPolicy, allowsUserinfo: Bool = true
    ) -> String? {
        guard url.utf8.count <= urlBytesMax else {
            return "\(field) is \(url.utf8.count) bytes; at most \(urlBytesMax)"
        }
        let lower = url.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            rest = url.dropFirst(8)
        } else if lower.hasPrefix("http://") {
            rest = url.dropFirst(7)
        } else {
            return "\(field) must start with https:// or http://, got \"\(url)\""
        }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.isEmpty,
            !url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F })
        else {
            return "\(field) must name a host and hold no spaces, got \"\(url)\""
        }
        if !allowsUserinfo && authority.contains("@") {
            return "\(field) must not hold a user name or password (user:password@host)"
        }
        if let host = AddressPolicy.host(ofURL: url), let kind = policy.refusal(host: host) {
            return "\(field) points at a \(kind) address (\(host)); the server sends only to public addresses"
                + " unless its operator allows others (--allow-private-targets)"
        }
        return nil
    }
}
