import Commands
import Crypto
import Events
import Identity
import Ingest
import MQTT

/// Commands to OwnTracks phones in MQTT mode: a `cmd` message published at QoS 1 to the device's
/// topic + `/cmd`, which the app subscribes to when its remote commands are on (OwnTracks booklet,
/// "JSON", `_type=cmd`, and "Topics"). `sent` means the broker acknowledged the message (PUBACK):
/// it holds it for the phone's session and delivers it when the phone is connected, which may be
/// much later. The location that answers comes back on the device's topic with `t: "r"`.
///
/// What OwnTracks can do (booklet, `_type=cmd`): `reportLocation` (iOS and Android). Nothing
/// rings the phone or shows a lost-mode screen (`action` with `notification` is iOS-only and a
/// notification, not a lost mode), so `sound`, `lost` and `found` fail with a reason.
public final class OwnTracksMQTTChannel: CommandChannel {
    public let name = "owntracks-mqtt"
    private let ingest: IngestService
    private let topicFilter: TopicFilter
    private let client: @Sendable () -> MQTTClient?

    /// `topicFilter`: the subscription's (`owntracks/+/+`), whose two wildcards are a device's user
    /// and device names. `client`: the subscriber's client while it runs, nil otherwise.
    public init(
        ingest: IngestService, topicFilter: TopicFilter, client: @escaping @Sendable () -> MQTTClient?
    ) {
        self.ingest = ingest
        self.topicFilter = topicFilter
        self.client = client
    }

    /// The device's topic, when the device is a live one its topic enrolled: the topic made of its
    /// user's and its own name derives its UUID. A device enrolled otherwise (the API, the panel)
    /// has no topic findmy knows, hence no address here.
    public func addresses(forDevice deviceID: UInt64) -> [ChannelAddress] {
        let registry = ingest.registrySnapshot
        guard let device = registry.liveDevice(deviceID), let user = registry.users[device.userID],
            let topic = topicFilter.topic(filling: [user.name, device.name]),
            OwnTracksMQTT.deviceUUID(topic: topic) == device.uuid
        else { return [] }
        return [ChannelAddress(provider: name, token: topic)]
    }

    public func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        guard address.provider == name, topicFilter.match(address.token) != nil else {
            return completion(.failed(reason: "not an OwnTracks MQTT topic: '\(address.token)'"))
        }
        let payload: [UInt8]
        switch Self.payload(delivery.kind) {
        case .success(let bytes): payload = bytes
        case .failure(let unsupported): return completion(.failed(reason: unsupported.reason))
        }
        guard let client = client() else {
            return completion(.failed(reason: "the OwnTracks MQTT client is not running"))
        }
        client.publish(topic: address.token + "/cmd", payload: payload) { outcome in
            switch outcome {
            case .acknowledged: completion(.sent(providerID: nil))
            case .failed(let why): completion(.failed(reason: why))
            }
        }
    }

    public struct Unsupported: Error, Equatable {
        public var reason: String
    }

    /// The `cmd` message of a command kind, or why OwnTracks has none.
    public static func payload(_ kind: CommandKind) -> Result<[UInt8], Unsupported> {
        switch kind {
        case .locate:
            .success(Array(#"{"_type":"cmd","action":"reportLocation"}"#.utf8))
        case .sound:
            .failure(Unsupported(reason: "OwnTracks has no command that plays a sound"))
        case .lost:
            .failure(Unsupported(reason: "OwnTracks has no lost mode to show a message and a phone number"))
        case .found:
            .failure(Unsupported(reason: "OwnTracks has no lost mode to end"))
        }
    }
}

/// How OwnTracks MQTT topics name devices.
public enum OwnTracksMQTT {
    /// The device's UUID: the first 16 bytes of SHA-256 of the topic, marked as an RFC 9562
    /// version 8 (custom) UUID. The same topic is always the same device, across restarts and
    /// reinstalls of findmy; another topic (another user, device or prefix) is another device.
    public static func deviceUUID(topic: String) -> UUID128 {
        var bytes = Array(SHA256.hash(Array(topic.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID128(bytes: bytes)
    }
}
