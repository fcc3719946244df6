import Core
import Identity

// The seam between what a command is (this module: the API, the events, the dispatcher) and the ways
// a device can be reached (the Push module's APNs, FCM and UnifiedPush; OwnTracks over MQTT). A
// channel knows where it can reach a device and how to send there; the dispatcher decides which
// channels to try, in which order, when to retry, and writes every step to the log.

/// What a command asks of a device.
public enum CommandKind: String, Sendable, CaseIterable, Equatable {
    /// Report a fresh position now.
    case locate
    /// Ring, even when silenced where the platform allows.
    case sound
    /// Show "this device is lost" with the owner's message and phone number until `found`.
    case lost
    /// End a `lost`.
    case found
}

/// One command on its way to one device, as a channel needs it.
public struct CommandDelivery: Sendable, Equatable {
    /// The command's id, a UUID in its canonical lower-case text form; it goes into every payload so
    /// the device can answer with `in_reply_to`.
    public var commandID: String
    public var kind: CommandKind
    public var deviceID: UInt64
    /// For `lost`: what the finder should read, and a number to call. Nil for the other kinds.
    public var message: String?
    public var phone: String?
    /// The second step a channel asked for with `.sentWithFollowUp`, now due and the command still
    /// open; false for the first.
    public var followUp: Bool

    public init(
        commandID: String, kind: CommandKind, deviceID: UInt64, message: String?, phone: String?,
        followUp: Bool = false
    ) {
        self.commandID = commandID
        self.kind = kind
        self.deviceID = deviceID
        self.message = message
        self.phone = phone
        self.followUp = followUp
    }
}

/// Where a channel can reach a device: one registered push token, or one MQTT topic.
public struct ChannelAddress: Sendable, Equatable, Hashable {
    /// As registered: `apns`, `apns-location`, `fcm`, `unifiedpush`; `owntracks-mqtt` for a topic;
    /// `ntfy` for an ntfy topic.
    public var provider: String
    /// The push token, the UnifiedPush endpoint URL, the MQTT topic the device publishes on, or the
    /// ntfy topic URL.
    public var token: String
    /// APNs: the app's bundle id (the `apns-topic`); empty where the provider has none.
    public var topic: String
    /// APNs: `sandbox` or `production`; empty where the provider has none.
    public var environment: String

    public init(provider: String, token: String, topic: String = "", environment: String = "") {
        self.provider = provider
        self.token = token
        self.topic = topic
        self.environment = environment
    }
}

/// What became of one attempt. `sent` means the provider accepted it, never that the device got it.
public enum DeliveryOutcome: Sendable, Equatable {
    /// Accepted by the provider; its id for the message where it gives one (apns-id, FCM message name).
    case sent(providerID: String?)
    /// Accepted, and the channel has a second step should the command still be open (neither
    /// answered nor expired) `afterSeconds` later: the dispatcher then delivers it again with
    /// `followUp` set. APNs without a location-push token: the alert asking to open the app
    /// follows the background push only when the background push did not make the app answer.
    case sentWithFollowUp(providerID: String?, afterSeconds: Int)
    /// The address is gone for good (APNs 410 or BadDeviceToken, FCM UNREGISTERED, Web Push 404/410):
    /// the dispatcher invalidates the push token in the log and tries the next channel.
    case addressDead(reason: String)
    /// Try this address again after the given number of seconds (429, 5xx, Retry-After).
    case retry(afterSeconds: Int, reason: String)
    /// Failed in a way retrying will not mend (a bad key, a refused payload).
    case failed(reason: String)
}

/// A way to reach devices. Implementations must not block the caller of `deliver`: they answer
/// through `completion`, exactly once, on any thread.
public protocol CommandChannel: AnyObject, Sendable {
    /// The channel's name in the API's `deliveries` and in the log: `apns`, `fcm`, `unifiedpush`,
    /// `ntfy`, `owntracks-mqtt`.
    var name: String { get }
    /// Where this channel can reach the device now, best first; empty when it cannot.
    func addresses(forDevice deviceID: UInt64) -> [ChannelAddress]
    /// The addresses that can carry a command of `kind`, best first. An APNs location-push token
    /// carries `locate` only (it wakes the app's location extension, which cannot ring or show a
    /// message). The default is `addresses(forDevice:)`.
    func addresses(forDevice deviceID: UInt64, kind: CommandKind) -> [ChannelAddress]
    /// As `addresses(forDevice:kind:)`, from the device's push registrations that the dispatcher
    /// read once for every channel (one ordered read of the registry per command rather than one
    /// per channel). A channel that reaches devices otherwise (OwnTracks MQTT's topics) keeps the
    /// default, which ignores them.
    func addresses(
        forDevice deviceID: UInt64, kind: CommandKind, registrations: [DevicePushRegistration]
    ) -> [ChannelAddress]
    /// Sends one command to one address.
    func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void)
}

extension CommandChannel {
    public func addresses(forDevice deviceID: UInt64, kind: CommandKind) -> [ChannelAddress] {
        addresses(forDevice: deviceID)
    }

    public func addresses(
        forDevice deviceID: UInt64, kind: CommandKind, registrations: [DevicePushRegistration]
    ) -> [ChannelAddress] {
        addresses(forDevice: deviceID, kind: kind)
    }
}

/// One push token of a device as the registry holds it (`IdentityService.pushRegistrations`).
public typealias DevicePushRegistration = (key: Registry.PushKey, registration: Registry.PushRegistration)
