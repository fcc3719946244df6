/// Where a device can be rung through ntfy (docs/log-format.md, type 41; docs/commands.md, "ntfy").
///
/// Payload of type 41, version 1: u64 device id, string topic URL (an empty string: none). The last
/// event for a device wins; the device's removal (type 12) drops it. `deviceKey` = the device, so
/// that the compactor keeps the last one per device without decoding the others.
public struct DeviceNtfySet: Equatable, Sendable {
    public var deviceID: UInt64
    /// The full URL of the ntfy topic (`https://ntfy.example/abc`); empty when the device has none.
    public var topicURL: String

    public init(deviceID: UInt64, topicURL: String) {
        self.deviceID = deviceID
        self.topicURL = topicURL
    }
}

extension EventCodec {
    static func encodeDeviceNtfy(_ set: DeviceNtfySet, into w: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64
    ) {
        w.u64(set.deviceID)
        w.string(set.topicURL)
        return (EventType.deviceNtfySet.rawValue, set.deviceID)
    }

    static func decodeDeviceNtfy(_ r: inout ByteReader) throws -> Event {
        .deviceNtfySet(DeviceNtfySet(deviceID: try r.u64(), topicURL: try r.string()))
    }
}
