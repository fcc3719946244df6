/// "Notify when found" (docs/found-notices.md; docs/log-format.md, type 42).
///
/// Payload of type 42, version 1: u64 device id, u64 user id (the device's owner, who asked), u8
/// armed (1 on, 0 off). The record's device key is the device id. The last event for a device wins
/// until the device's first fix batch with at least one accepted fix at a later offset, which fires
/// the notice once and disarms it; removing the device (type 12) disarms it too. Both the registry
/// and the geofence projection fold this rule, so a replay decides the same.
public struct FoundNoticeSet: Equatable, Sendable {
    public var deviceID: UInt64
    public var userID: UInt64
    public var armed: Bool

    public init(deviceID: UInt64, userID: UInt64, armed: Bool) {
        self.deviceID = deviceID
        self.userID = userID
        self.armed = armed
    }
}

extension EventCodec {
    static func encodeFoundNotice(_ set: FoundNoticeSet, into w: inout ByteWriter) -> (UInt8, UInt64) {
        w.u64(set.deviceID)
        w.u64(set.userID)
        w.u8(set.armed ? 1 : 0)
        return (EventType.foundNoticeSet.rawValue, set.deviceID)
    }

    static func decodeFoundNotice(_ r: inout ByteReader) throws -> Event {
        let deviceID = try r.u64()
        let userID = try r.u64()
        let flag = try r.u8()
        guard flag <= 1 else {
            throw DecodeError.invalid("found_notice_set armed flag is \(flag), not 0 or 1")
        }
        return .foundNoticeSet(FoundNoticeSet(deviceID: deviceID, userID: userID, armed: flag == 1))
    }
}
