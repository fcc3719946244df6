import Commands
import Core
import HTTPClient
import Identity
import JSON
import Threads

// ntfy (https://ntfy.sh, or a server of one's own) as a way to ring a phone that runs no app of
// ours: the device's owner gives it a topic (event 41), subscribes to it in the ntfy app, and a
// command becomes one message there:
//   POST {topic URL}  Title: ..., Priority: 1-5, Tags: ..., body: text
//   200 {"id": "...", "time": ..., "event": "message", ...}
// `sound` and `lost` go at priority 5, which the ntfy app for Android can let ring through Do Not
// Disturb and repeat; `found` at 3. `locate` cannot go this way: a human reads the message, no
// program answers it with a position.

/// Where the ntfy channel finds a device's topic and name: the registry (`IdentityService`), or in
/// tests a registry of their own.
public protocol NtfyTopicSource: Sendable {
    /// The device's topic URL and name; nil when it has no topic or is not a live device.
    func ntfyTopic(deviceID: UInt64) -> (topicURL: String, deviceName: String)?
}

extension IdentityService: NtfyTopicSource {
    public func ntfyTopic(deviceID: UInt64) -> (topicURL: String, deviceName: String)? {
        store.registry.read { state in
            guard let url = state.registry.ntfyTopicURL(deviceID: deviceID),
                let device = state.registry.liveDevice(deviceID)
            else { return nil }
            return (url, device.name)
        }
    }
}

public final class NtfyChannel: CommandChannel {
    public let name = "ntfy"
    let topics: any NtfyTopicSource
    let backoff = Backoff()
    let client: HTTP2Client

    /// `addressPolicy`: where a topic's server may be (`--allow-private-targets`); `caFile`: a CA
    /// to trust for https servers instead of the system's.
    public init(topics: any NtfyTopicSource, addressPolicy: AddressPolicy, caFile: String? = nil) {
        self.topics = topics
        client = HTTP2Client(name: "ntfy", options: .init(caFile: caFile, addressPolicy: addressPolicy))
    }

    public func close() { client.close() }

    public func addresses(forDevice deviceID: UInt64) -> [ChannelAddress] {
        guard let topic = topics.ntfyTopic(deviceID: deviceID) else { return [] }
        return [ChannelAddress(provider: name, token: topic.topicURL)]
    }

    public func addresses(forDevice deviceID: UInt64, kind: CommandKind) -> [ChannelAddress] {
        kind == .locate ? [] : addresses(forDevice: deviceID)
    }

    /// The message a command becomes (docs/commands.md, "ntfy"); nil for `locate`.
    public static func message(_ delivery: CommandDelivery, deviceName: String) -> NtfyMessage? {
        switch delivery.kind {
        case .locate:
            return nil
        case .sound:
            return NtfyMessage(
                title: "Play sound on \(deviceName)", tags: "rotating_light,findmy",
                priority: NtfyMessage.priorityMax,
                body: "Someone is looking for \(deviceName) and asked it to ring.")
        case .lost:
            var text = delivery.message.map { $0.isEmpty ? "" : $0 } ?? ""
            if let phone = delivery.phone, !phone.isEmpty {
                text += (text.isEmpty ? "" : "\n") + "Call \(phone)"
            }
            return NtfyMessage(
                title: "\(deviceName) is lost", tags: "warning,findmy", priority: NtfyMessage.priorityMax,
                body: text.isEmpty ? "\(deviceName) was marked as lost." : text)
        case .found:
            return NtfyMessage(
                title: "\(deviceName) was found", tags: "white_check_mark,findmy",
                priority: NtfyMessage.priorityDefault,
                body: "\(deviceName) is no longer marked as lost.")
        }
    }

    public func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        let deviceName =
            topics.ntfyTopic(deviceID: delivery.deviceID)?.deviceName ?? "device \(delivery.deviceID)"
        guard let message = Self.message(delivery, deviceName: deviceName) else {
            completion(.failed(reason: "ntfy cannot carry a locate"))
            return
        }
        let request = message.request(
            topicURL: address.token,
            extraHeaders: ["X-Findmy-Command: " + delivery.commandID, "User-Agent: findmy-ntfy"])
        let addressKey = "ntfy " + address.token
        let backoff = self.backoff
        client.send(request) { result in
            completion(Self.outcome(result, addressKey: addressKey, backoff: backoff))
        }
    }

    /// What an answer means, as for a webhook: 2xx sent (with ntfy's message id), 429 and 5xx
    /// retried (after `Retry-After` when given), another status failed; no answer is retried, an
    /// address the policy refused is not. The server's words are never quoted: a topic URL is the
    /// user's choice, and its answer could be an internal service's.
    static func outcome(
        _ result: Result<IncomingResponse, TransportFailure>, addressKey: String, backoff: Backoff
    ) -> DeliveryOutcome {
        switch result {
        case .failure(let failure) where failure.permanent:
            return .failed(reason: "ntfy server not sent to: \(failure.message)")
        case .failure(let failure):
            return .retry(
                afterSeconds: backoff.failed(addressKey),
                reason: "ntfy server unreachable: \(failure.message)")
        case .success(let response):
            let reason = "ntfy server answered \(response.status)"
            switch response.status {
            case 200...299:
                backoff.succeeded(addressKey)
                return .sent(providerID: errorField(response.body, "id"))
            case 429, 500...599:
                return .retry(
                    afterSeconds: backoff.retryDelay(addressKey, retryAfter: response.header("retry-after")),
                    reason: reason)
            default:
                backoff.succeeded(addressKey)
                return .failed(reason: reason)
            }
        }
    }
}

/// The ntfy channel as a service of `findmy serve`: always there (it needs no key), its
/// connections closed when it stops.
public final class NtfyChannelService: Service {
    public let name = "ntfy"
    public let channel: NtfyChannel
    private let current = Locked<ServiceState>(.idle)

    public init(channel: NtfyChannel) { self.channel = channel }

    public var state: ServiceState { current.withLock { $0 } }
    public func start() throws { current.withLock { $0 = .running } }

    public func stop(graceMicros: Int64) {
        channel.close()
        current.withLock { $0 = .stopped }
    }

    /// Starts the channel in `group` and returns it, for the dispatcher.
    public static func start(
        topics: any NtfyTopicSource, addressPolicy: AddressPolicy, caFile: String?, group: ServiceGroup
    ) throws -> [any CommandChannel] {
        let service = NtfyChannelService(
            channel: NtfyChannel(topics: topics, addressPolicy: addressPolicy, caFile: caFile))
        try group.start(service)
        return [service.channel]
    }
}
