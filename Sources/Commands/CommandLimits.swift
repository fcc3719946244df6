import Events

/// The limits of commands (docs/commands.md, "Rate limits" and "Expiry"), every one named with its
/// unit. `findmy serve` sets them from its options.
public struct CommandLimits: Sendable, Equatable {
    /// At most one command of a kind per device within this many seconds; another answers 429 with
    /// Retry-After. Locate asks a phone to wake and use its GPS: once per 30 s is plenty.
    public var locateIntervalSeconds = 30
    public var soundIntervalSeconds = 30
    public var lostIntervalSeconds = 10
    public var foundIntervalSeconds = 10
    /// A locate unanswered this long ends (`command_expired`): an answer after that is not "now".
    public var locateExpirySeconds = 300
    /// A sound unanswered this long ends.
    public var soundExpirySeconds = 3_600
    /// A found unanswered this long ends. A lost never expires: it ends with a found.
    public var foundExpirySeconds = 3_600
    /// Attempts through one address, the first included, before a `.retry` outcome is given up.
    public var deliveryAttemptsMax = 5
    /// The longest retry wait honoured; a provider asking for more is capped here.
    public var retryAfterSecondsMax = 600
    /// `lost`'s message and phone, in UTF-8 bytes.
    public var messageBytesMax = 500
    public var phoneBytesMax = 40
    /// A page of `GET .../commands`: the default and the largest `limit`.
    public var pageCommandsDefault = 50
    public var pageCommandsMax = 500

    public init() {}

    public func intervalSeconds(_ kind: CommandKindCode) -> Int {
        switch kind {
        case .locate: locateIntervalSeconds
        case .sound: soundIntervalSeconds
        case .lost: lostIntervalSeconds
        case .found: foundIntervalSeconds
        }
    }

    /// Nil: the kind does not expire (lost, until found).
    public func expirySeconds(_ kind: CommandKindCode) -> Int? {
        switch kind {
        case .locate: locateExpirySeconds
        case .sound: soundExpirySeconds
        case .lost: nil
        case .found: foundExpirySeconds
        }
    }
}

extension CommandKind {
    /// The stored number of this kind (docs/log-format.md, type 27).
    public var code: CommandKindCode {
        switch self {
        case .locate: .locate
        case .sound: .sound
        case .lost: .lost
        case .found: .found
        }
    }

    public init(_ code: CommandKindCode) {
        switch code {
        case .locate: self = .locate
        case .sound: self = .sound
        case .lost: self = .lost
        case .found: self = .found
        }
    }
}
