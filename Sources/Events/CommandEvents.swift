/// The lifecycle of a command to a device (locate, sound, lost, found), and the permission a share
/// gives (docs/log-format.md, types 27-32; docs/commands.md). Every step is an event, so
/// replay and audit see who asked a device for its position, when, and what became of it.
///
/// Every command event names its device in `deviceKey`, so a scan finds a device's commands
/// without decoding. None carries coordinates: an answer points at the fix (the batch's offset and
/// the fix's index), so retention and erasure of fixes reach answers too.

/// What a command asks of a device. The numbers are stored; the names are the API's.
public enum CommandKindCode: UInt8, Sendable, CaseIterable {
    case locate = 0
    case sound = 1
    case lost = 2
    case found = 3

    public var name: String {
        switch self {
        case .locate: "locate"
        case .sound: "sound"
        case .lost: "lost"
        case .found: "found"
        }
    }

    public init?(name: String) {
        guard let found = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = found
    }
}

/// A user asked a device to do something (type 27).
public struct CommandRequested: Equatable, Sendable {
    public var commandID: UUID128
    public var deviceID: UInt64
    public var kind: CommandKindCode
    /// For `lost`: what a finder should read, and a number to call; empty otherwise.
    public var message: String
    public var phone: String
    public var requestedByUserID: UInt64
    public var requestedAtMicros: Int64

    public init(
        commandID: UUID128, deviceID: UInt64, kind: CommandKindCode, message: String = "", phone: String = "",
        requestedByUserID: UInt64, requestedAtMicros: Int64
    ) {
        self.commandID = commandID
        self.deviceID = deviceID
        self.kind = kind
        self.message = message
        self.phone = phone
        self.requestedByUserID = requestedByUserID
        self.requestedAtMicros = requestedAtMicros
    }
}

/// A channel handed the command on (type 28): a provider accepted it, or a report answer carried
/// it. Sent is never delivered, let alone done.
public struct CommandSent: Equatable, Sendable {
    public var commandID: UUID128
    public var deviceID: UInt64
    /// `apns`, `fcm`, `unifiedpush`, `owntracks-mqtt`, `report-answer`, `owntracks-http`.
    public var channel: String
    /// The provider's id for the message (apns-id, FCM message name); empty when it gives none.
    public var providerID: String

    public init(commandID: UUID128, deviceID: UInt64, channel: String, providerID: String = "") {
        self.commandID = commandID
        self.deviceID = deviceID
        self.channel = channel
        self.providerID = providerID
    }
}

/// One attempt through a channel failed (type 29).
public struct CommandDeliveryFailed: Equatable, Sendable {
    public var commandID: UUID128
    public var deviceID: UInt64
    public var channel: String
    public var reason: String
    /// When the dispatcher tries this channel again; nil when it will not.
    public var retryAtMicros: Int64?
    /// The address is gone for good (a push_token_invalidated event follows for it).
    public var addressDead: Bool

    public init(
        commandID: UUID128, deviceID: UInt64, channel: String, reason: String, retryAtMicros: Int64?,
        addressDead: Bool
    ) {
        self.commandID = commandID
        self.deviceID = deviceID
        self.channel = channel
        self.reason = reason
        self.retryAtMicros = retryAtMicros
        self.addressDead = addressDead
    }
}

/// The device answered (type 30): the fix at `fixIndex` of the batch at `batchOffset` (the batch's
/// newest fix) is the answer.
public struct CommandAnswered: Equatable, Sendable {
    public var commandID: UUID128
    public var deviceID: UInt64
    public var batchOffset: UInt64
    public var fixIndex: UInt32
    /// The wire format the answer came in (native `in_reply_to`, OwnTracks `t: "r"`).
    public var clientProtocol: ClientProtocol

    public init(
        commandID: UUID128, deviceID: UInt64, batchOffset: UInt64, fixIndex: UInt32,
        clientProtocol: ClientProtocol
    ) {
        self.commandID = commandID
        self.deviceID = deviceID
        self.batchOffset = batchOffset
        self.fixIndex = fixIndex
        self.clientProtocol = clientProtocol
    }
}

/// The command ended unanswered (type 31): its time ran out, or (a `lost`) a `found` ended it.
public struct CommandExpired: Equatable, Sendable {
    public var commandID: UUID128
    public var deviceID: UInt64
    public var reason: String

    public init(commandID: UUID128, deviceID: UInt64, reason: String) {
        self.commandID = commandID
        self.deviceID = deviceID
        self.reason = reason
    }
}

/// What a share lets its grantee do (type 32). A share starts "see only" (`locate` false): the
/// grantee reads positions. With `locate`, the grantee may also send commands (locate, sound,
/// lost, found). Granting a share again keeps its permission; revoking ends both.
public struct SharePermissionChanged: Equatable, Sendable {
    public var deviceID: UInt64
    public var granteeUserID: UInt64
    public var locate: Bool

    public init(deviceID: UInt64, granteeUserID: UInt64, locate: Bool) {
        self.deviceID = deviceID
        self.granteeUserID = granteeUserID
        self.locate = locate
    }
}

extension EventCodec {
    /// The type and device of a command event, its payload written to `writer`.
    static func encodeCommand(_ event: Event, into w: inout ByteWriter) -> (type: UInt8, deviceKey: UInt64)? {
        switch event {
        case .commandRequested(let c):
            w.uuid(c.commandID)
            w.u64(c.deviceID)
            w.u8(c.kind.rawValue)
            w.string(c.message)
            w.string(c.phone)
            w.u64(c.requestedByUserID)
            w.i64(c.requestedAtMicros)
            return (EventType.commandRequested.rawValue, c.deviceID)
        case .commandSent(let c):
            w.uuid(c.commandID)
            w.u64(c.deviceID)
            w.string(c.channel)
            w.string(c.providerID)
            return (EventType.commandSent.rawValue, c.deviceID)
        case .commandDeliveryFailed(let c):
            w.uuid(c.commandID)
            w.u64(c.deviceID)
            w.string(c.channel)
            w.string(c.reason)
            w.u8(c.retryAtMicros == nil ? 0 : 1)
            w.i64(c.retryAtMicros ?? 0)
            w.u8(c.addressDead ? 1 : 0)
            return (EventType.commandDeliveryFailed.rawValue, c.deviceID)
        case .commandAnswered(let c):
            w.uuid(c.commandID)
            w.u64(c.deviceID)
            w.u64(c.batchOffset)
            w.u32(c.fixIndex)
            w.u8(c.clientProtocol.rawValue)
            return (EventType.commandAnswered.rawValue, c.deviceID)
        case .commandExpired(let c):
            w.uuid(c.commandID)
            w.u64(c.deviceID)
            w.string(c.reason)
            return (EventType.commandExpired.rawValue, c.deviceID)
        case .sharePermissionChanged(let c):
            w.u64(c.deviceID)
            w.u64(c.granteeUserID)
            w.u8(c.locate ? 1 : 0)
            return (EventType.sharePermissionChanged.rawValue, c.deviceID)
        default:
            return nil
        }
    }

    static func decodeCommand(_ type: EventType, _ r: inout ByteReader) throws -> Event? {
        func flag(_ name: String) throws -> Bool {
            let value = try r.u8()
            guard value <= 1 else { throw DecodeError.invalid("\(name) flag \(value) is not 0 or 1") }
            return value == 1
        }
        switch type {
        case .commandRequested:
            let id = try r.uuid()
            let device = try r.u64()
            let number = try r.u8()
            guard let kind = CommandKindCode(rawValue: number) else {
                throw DecodeError.invalid("command kind \(number) is not 0-3")
            }
            return .commandRequested(
                CommandRequested(
                    commandID: id, deviceID: device, kind: kind, message: try r.string(),
                    phone: try r.string(),
                    requestedByUserID: try r.u64(), requestedAtMicros: try r.i64()))
        case .commandSent:
            return .commandSent(
                CommandSent(
                    commandID: try r.uuid(), deviceID: try r.u64(), channel: try r.string(),
                    providerID: try r.string()))
        case .commandDeliveryFailed:
            let id = try r.uuid()
            let device = try r.u64()
            let channel = try r.string()
            let reason = try r.string()
            let hasRetry = try flag("retry")
            let retryAt = try r.i64()
            return .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: id, deviceID: device, channel: channel, reason: reason,
                    retryAtMicros: hasRetry ? retryAt : nil, addressDead: try flag("address dead")))
        case .commandAnswered:
            let id = try r.uuid()
            let device = try r.u64()
            let offset = try r.u64()
            let index = try r.u32()
            let number = try r.u8()
            guard let clientProtocol = ClientProtocol(rawValue: number) else {
                throw DecodeError.invalid("protocol \(number) is out of range")
            }
            return .commandAnswered(
                CommandAnswered(
                    commandID: id, deviceID: device, batchOffset: offset, fixIndex: index,
                    clientProtocol: clientProtocol))
        case .commandExpired:
            return .commandExpired(
                CommandExpired(commandID: try r.uuid(), deviceID: try r.u64(), reason: try r.string()))
        case .sharePermissionChanged:
            return .sharePermissionChanged(
                SharePermissionChanged(
                    deviceID: try r.u64(), granteeUserID: try r.u64(), locate: try flag("locate")))
        default:
            return nil
        }
    }
}

extension ByteWriter {
    mutating func uuid(_ value: UUID128) { raw(value.bytes) }
}

extension ByteReader {
    mutating func uuid() throws -> UUID128 { UUID128(bytes: try raw(16)) }
}
