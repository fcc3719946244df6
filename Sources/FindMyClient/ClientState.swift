// What the client keeps beside the queue (`client-state.json` in its state directory): the pause
// switch, the push tokens to register (again after an enrolment), and the command ledger.

/// A push token as `POST /api/find-my/push-tokens` takes it.
public struct PushToken: Sendable, Equatable {
    /// `apns`, `apns-location`, `fcm` or `unifiedpush`.
    public var provider: String
    public var token: String
    public var topic: String?
    public var environment: String?
    /// UnifiedPush's subscription keys (base64url), required for `unifiedpush` only.
    public var p256dh: String?
    public var auth: String?

    public init(
        provider: String, token: String, topic: String? = nil, environment: String? = nil,
        p256dh: String? = nil,
        auth: String? = nil
    ) {
        self.provider = provider
        self.token = token
        self.topic = topic
        self.environment = environment
        self.p256dh = p256dh
        self.auth = auth
    }

    var requestBody: [UInt8] {
        var members = ["\"provider\":\(Wire.quoted(provider))", "\"token\":\(Wire.quoted(token))"]
        for (name, value) in [
            ("topic", topic), ("environment", environment), ("p256dh", p256dh), ("auth", auth),
        ] {
            if let value { members.append("\"\(name)\":\(Wire.quoted(value))") }
        }
        return Array(("{" + members.joined(separator: ",") + "}").utf8)
    }
}

struct ClientState: Equatable {
    var paused = false
    /// The newest token of each provider (a rotated one replaces the old).
    var pushTokens: [PushToken] = []
    var commands = CommandLedger()

    static func load(_ path: String) throws -> ClientState {
        guard let bytes = try QueueFiles.read(path) else { return ClientState() }
        return try ClientState(jsonBytes: bytes)
    }

    /// Written whole to a temporary file, fsynced and renamed.
    func save(_ path: String) throws {
        try QueueFiles.writeDurably(jsonBytes, to: path, temporary: path + ".tmp")
    }
}

/// Why a call of the client failed, in words a person can act on.
public enum ClientError: Error, Equatable, CustomStringConvertible {
    /// Not enrolled yet: no device token.
    case notEnrolled
    /// The server answered with an error.
    case refused(status: Int, code: String, message: String)
    /// The answer could not be read.
    case unreadableAnswer(status: Int, String)

    public var description: String {
        switch self {
        case .notEnrolled:
            "this device is not enrolled: run enrolment first (a user token or the panel's setup link)"
        case .refused(let status, let code, let message): "the server refused (\(status) \(code)): \(message)"
        case .unreadableAnswer(let status, let why):
            "the server's answer (\(status)) could not be read: \(why)"
        }
    }

    static func from(_ response: ClientResponse) -> ClientError {
        if let error = ErrorAnswer.parse(response.body) {
            return .refused(status: response.status, code: error.code, message: error.message)
        }
        return .unreadableAnswer(
            status: response.status, String(decoding: response.body.prefix(200), as: UTF8.self))
    }
}
