import JSON

/// One node of `GET /api/v1/node`, in the shape every headscale from 0.23 to 0.29 answers with
/// (docs/presence.md, "What headscale answers"). The differences between versions that matter here:
///
/// | field | 0.23-0.27 | 0.28-0.29 |
/// | --- | --- | --- |
/// | `id`, `user.id` | uint64 written as a JSON string (protojson); a number is read too | same |
/// | `user` | the owner | null or absent for a tagged node (tags own it) |
/// | tags | `forcedTags`, `validTags`, `invalidTags` | `tags` |
/// | `lastSeen` | RFC 3339, with or without a fraction; null, absent or `0001-01-01T00:00:00Z` when never | same |
/// | `online` | bool, absent when false in some builds | same |
///
/// Members this findmy does not use are ignored, so a newer headscale adding some breaks nothing.
public struct HeadscaleNode: Equatable, Sendable {
    public var id: String
    /// The node's name in the tailnet: `givenName` when set, else `name`.
    public var name: String
    /// `name` (the machine's hostname-derived name), which a link may name too.
    public var hostName: String
    /// The owner's headscale user name; nil for a tagged node without a user.
    public var userName: String?
    public var online: Bool
    public var lastSeenMicros: Int64?
    /// `tags` (0.28+) or the union of `forcedTags` and `validTags` (earlier).
    public var tags: [String]

    public init(
        id: String, name: String, hostName: String, userName: String?, online: Bool, lastSeenMicros: Int64?,
        tags: [String] = []
    ) {
        self.id = id
        self.name = name
        self.hostName = hostName
        self.userName = userName
        self.online = online
        self.lastSeenMicros = lastSeenMicros
        self.tags = tags
    }
}

/// Why a poll of headscale gave no node list. The text is what /healthz shows, and says what to do.
public enum HeadscaleFailure: Error, Equatable, Sendable, CustomStringConvertible {
    /// 401, or 500 with "Unauthorized" (the answer of some versions to an unknown or expired key).
    case unauthorized(status: Int)
    case unreachable(String)
    case httpStatus(Int)
    case badAnswer(String)
    /// The API key file cannot be read (gone, or readable by others since the start).
    case keyFile(String)

    /// The short state name of /healthz and /metrics.
    public var state: String {
        switch self {
        case .unauthorized: "unauthorized"
        case .unreachable: "unreachable"
        case .httpStatus: "http_error"
        case .badAnswer: "bad_answer"
        case .keyFile: "key_file"
        }
    }

    public var description: String {
        switch self {
        case .unauthorized(let status):
            "headscale refused the API key (HTTP \(status)): make a new one with `headscale apikeys create` and write it to the --headscale-api-key-file"
        case .unreachable(let why): "headscale did not answer: \(why); check --headscale-url"
        case .httpStatus(let status): "headscale answered HTTP \(status) to GET /api/v1/node"
        case .badAnswer(let why): "headscale's node list could not be read: \(why)"
        case .keyFile(let why): "the API key file cannot be used: \(why)"
        }
    }
}

public enum HeadscaleNodes {
    /// The nodes of an answer, or why there are none. `body` is read only for a 2xx, or to tell a
    /// 500 "Unauthorized" from another 500.
    public static func nodes(status: Int, body: [UInt8]) -> Result<[HeadscaleNode], HeadscaleFailure> {
        if status == 401 || status == 403 { return .failure(.unauthorized(status: status)) }
        if status == 500, String(decoding: body.prefix(4096), as: UTF8.self).contains("Unauthorized") {
            return .failure(.unauthorized(status: status))
        }
        guard (200..<300).contains(status) else { return .failure(.httpStatus(status)) }
        do {
            return .success(try parse(body))
        } catch {
            return .failure(error)
        }
    }

    /// `{"nodes": [...]}`.
    public static func parse(_ body: [UInt8]) throws(HeadscaleFailure) -> [HeadscaleNode] {
        let document: JSONValue
        do {
            document = try JSONParser.parse(body)
        } catch {
            throw .badAnswer("not JSON (\(error))")
        }
        guard case .object(let top) = document else { throw .badAnswer("not a JSON object") }
        switch top["nodes"] {
        case nil, .null?:
            return []  // protojson leaves an empty list out
        case .array(let items)?:
            var nodes: [HeadscaleNode] = []
            for (index, item) in items.enumerated() {
                do {
                    nodes.append(try node(item))
                } catch {
                    throw .badAnswer("node \(index): \(error)")
                }
            }
            return nodes
        case let other?:
            throw .badAnswer("`nodes` is a \(other.typeName), not an array")
        }
    }

    struct FieldError: Error, CustomStringConvertible {
        var description: String
    }

    static func node(_ value: JSONValue) throws(FieldError) -> HeadscaleNode {
        guard case .object(let object) = value else { throw FieldError(description: "not an object") }
        guard let id = identifier(object["id"]) else {
            throw FieldError(description: "`id` is missing or not a string or integer")
        }
        let hostName = string(object["name"]) ?? ""
        let givenName = string(object["givenName"]) ?? ""
        var userName: String?
        if case .object(let user)? = object["user"] { userName = string(user["name"]) }
        var online = false
        switch object["online"] {
        case nil, .null?: online = false
        case .bool(let value)?: online = value
        case let other?: throw FieldError(description: "`online` is a \(other.typeName)")
        }
        var lastSeen: Int64?
        switch object["lastSeen"] {
        case nil, .null?: lastSeen = nil
        case .string(let text)?:
            do {
                let micros = try RFC3339.parseMicros(text)
                // Go's zero time: the node was never seen.
                lastSeen = micros <= RFC3339.microsMin ? nil : micros
            } catch {
                throw FieldError(description: "`lastSeen` \(text): \(error)")
            }
        case let other?: throw FieldError(description: "`lastSeen` is a \(other.typeName)")
        }
        var tags: [String] = []
        for key in ["tags", "forcedTags", "validTags"] {
            if case .array(let items)? = object[key] {
                for case .string(let tag) in items where !tags.contains(tag) { tags.append(tag) }
            }
        }
        return HeadscaleNode(
            id: id, name: givenName.isEmpty ? hostName : givenName, hostName: hostName, userName: userName,
            online: online, lastSeenMicros: lastSeen, tags: tags)
    }

    static func identifier(_ value: JSONValue?) -> String? {
        switch value {
        case .string(let text)? where !text.isEmpty && text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }):
            return String(UInt64(text) ?? 0) == text ? text : nil
        case .integer(let number)? where number >= 0: return String(number)
        default: return nil
        }
    }

    static func string(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value { return text }
        return nil
    }
}
