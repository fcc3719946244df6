/// The events of retention and erasure (docs/log-format.md, types 10 to 12; docs/retention.md).
///
/// They carry no coordinates, so the compactor keeps them for as long as the log exists: they are
/// what makes a later rewrite, a rebuild or a restored backup remove the same fixes again.

/// Whose retention window a `RetentionChanged` sets.
public enum RetentionScope: Equatable, Sendable {
    case device(UInt64)
    case user(UInt64)
}

/// A per-device or per-user retention window, or the removal of one (`days == nil`: back to the
/// user's window, or to the server's default). A device's window wins over its user's.
public struct RetentionChanged: Equatable, Sendable {
    public var scope: RetentionScope
    public var days: UInt32?

    public init(scope: RetentionScope, days: UInt32?) {
        self.scope = scope
        self.days = days
    }
}

/// The owner erased a device's history: every fix of records before this event whose `recorded_at`
/// lies in `fromMicros ..< toMicros` (an absent bound is open). Both absent: the whole history.
public struct HistoryErased: Equatable, Sendable {
    public var deviceID: UInt64
    public var fromMicros: Int64?
    public var toMicros: Int64?

    public init(deviceID: UInt64, fromMicros: Int64? = nil, toMicros: Int64? = nil) {
        self.deviceID = deviceID
        self.fromMicros = fromMicros
        self.toMicros = toMicros
    }

    /// True when a fix recorded at `recordedAtMicros` falls in the erased range.
    public func covers(recordedAtMicros: Int64) -> Bool {
        (fromMicros.map { recordedAtMicros >= $0 } ?? true)
            && (toMicros.map { recordedAtMicros < $0 } ?? true)
    }
}

/// The owner removed a device: its tokens stop working, its fixes and envelopes are deleted, and
/// its id is never given to another device.
public struct DeviceRemoved: Equatable, Sendable {
    public var deviceID: UInt64

    public init(deviceID: UInt64) { self.deviceID = deviceID }
}

extension EventCodec {
    static func encodeRetention(_ event: Event, into writer: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64
    )? {
        switch event {
        case .retentionChanged(let change):
            let (scope, id): (UInt8, UInt64) =
                switch change.scope {
                case .device(let id): (0, id)
                case .user(let id): (1, id)
                }
            writer.u8(scope)
            writer.u64(id)
            writer.u8(change.days == nil ? 0 : 1)
            writer.u32(change.days ?? 0)
            return (EventType.retentionChanged.rawValue, scope == 0 ? id : 0)
        case .historyErased(let erase):
            writer.u64(erase.deviceID)
            writer.u8((erase.fromMicros == nil ? 0 : 1) | (erase.toMicros == nil ? 0 : 2))
            writer.u64(UInt64(bitPattern: erase.fromMicros ?? 0))
            writer.u64(UInt64(bitPattern: erase.toMicros ?? 0))
            return (EventType.historyErased.rawValue, erase.deviceID)
        case .deviceRemoved(let removed):
            writer.u64(removed.deviceID)
            return (EventType.deviceRemoved.rawValue, removed.deviceID)
        default:
            return nil
        }
    }

    static func decodeRetention(_ type: EventType, _ reader: inout ByteReader) throws -> Event? {
        switch type {
        case .retentionChanged:
            let scope = try reader.u8()
            let id = try reader.u64()
            let hasDays = try reader.u8()
            let days = try reader.u32()
            guard scope <= 1 else { throw DecodeError.invalid("retention scope \(scope) is not 0 or 1") }
            guard hasDays <= 1 else {
                throw DecodeError.invalid("retention days flag \(hasDays) is not 0 or 1")
            }
            return .retentionChanged(
                RetentionChanged(scope: scope == 0 ? .device(id) : .user(id), days: hasDays == 1 ? days : nil)
            )
        case .historyErased:
            let deviceID = try reader.u64()
            let bounds = try reader.u8()
            guard bounds <= 3 else { throw DecodeError.invalid("erase bounds flags \(bounds) unknown") }
            let from = Int64(bitPattern: try reader.u64())
            let to = Int64(bitPattern: try reader.u64())
            return .historyErased(
                HistoryErased(
                    deviceID: deviceID, fromMicros: bounds & 1 != 0 ? from : nil,
                    toMicros: bounds & 2 != 0 ? to : nil))
        case .deviceRemoved:
            return .deviceRemoved(DeviceRemoved(deviceID: try reader.u64()))
        default:
            return nil
        }
    }
}
