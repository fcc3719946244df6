import Crypto
import Events

extension IngestService {
    /// The UUID of the device that publishes on broker topic `topic` (OwnTracks' MQTT mode,
    /// `owntracks/USER/DEVICE`): the first 16 bytes of the topic's SHA-256, marked as an RFC 9562
    /// version 8 (custom) UUID. The same topic is always the same device, whether the panel's
    /// "Add a device" enrolled it or its first message did; another topic is another device.
    public static func deviceUUID(topic: String) -> UUID128 {
        var bytes = Array(SHA256.hash(Array(topic.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID128(bytes: bytes)
    }

    /// The topic a device publishes on under topic filter `filter` (two `+` levels: the findmy user
    /// name, then the device name); nil when a name holds a character a topic level cannot
    /// (`/`, `+`, `#`, NUL).
    public static func topic(filter: String, userName: String, deviceName: String) -> String? {
        for name in [userName, deviceName] {
            guard !name.isEmpty, !name.utf8.contains(where: { [0x2F, 0x2B, 0x23, 0x00].contains($0) }) else {
                return nil
            }
        }
        var levels = filter.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard let user = levels.firstIndex(of: "+"), let device = levels.lastIndex(of: "+"), user != device
        else { return nil }
        levels[user] = userName
        levels[device] = deviceName
        return levels.joined(separator: "/")
    }
}
