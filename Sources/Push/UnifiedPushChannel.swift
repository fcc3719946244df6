import Commands
import Crypto
import HTTPClient
import JSON
import Threads

// UnifiedPush, which is Web Push (RFC 8030) to an endpoint the device's distributor gave it:
//   POST {endpoint}  body: the payload encrypted to the device's keys (RFC 8291, aes128gcm)
//   content-encoding: aes128gcm, content-type: application/octet-stream, ttl: seconds, urgency: high
//   authorization: vapid t={JWT}, k={our public key, base64url}  (RFC 8292)
//     JWT = ES256({"typ":"JWT","alg":"ES256"}, {"aud": the endpoint's origin, "exp", "sub": contact})
//   201 Created (location: the message's URL) or 202; 404/410: the subscription is gone.
// The push service (ntfy, NextPush, Mozilla's autopush, ...) sees only ciphertext.

public struct UnifiedPushConfiguration: Sendable {
    /// The VAPID `sub`: how a push service operator can reach whoever runs this server
    /// (`mailto:` or `https:`).
    public var contact: String
    public var caFile: String?
    /// Which addresses an endpoint (a URL the device gave) may be reached at.
    public var addressPolicy = AddressPolicy()

    public init(contact: String) { self.contact = contact }
}

public final class UnifiedPushChannel: CommandChannel {
    public let name = "unifiedpush"
    /// A VAPID token says it expires this long after it is signed (RFC 8292 §2: at most 24 hours)...
    static let vapidLifetimeSeconds: Int64 = 12 * 3600
    /// ...and is signed anew once it has less than this left.
    static let vapidRenewSecondsBefore: Int64 = 3600
    /// Endpoints' origins remembered with their VAPID tokens; beyond it the cache starts over.
    static let originsMax = 10_000

    let configuration: UnifiedPushConfiguration
    let vapidKey: PrivateKey
    let vapidPublicKey: String
    let tokens: any PushTokenSource
    let clock: WallClockMicros
    let backoff = Backoff()
    let client: HTTP2Client
    private let vapidTokens = Locked<[String: (jwt: String, expiresAtSeconds: Int64)]>([:])

    public init(
        configuration: UnifiedPushConfiguration, vapidKey: PrivateKey, tokens: any PushTokenSource,
        clock: @escaping WallClockMicros = systemWallClockMicros
    ) {
        precondition(vapidKey.kind == .p256, "a VAPID key is a P-256 key")
        self.configuration = configuration
        self.vapidKey = vapidKey
        self.vapidPublicKey = Base64URL.encode(vapidKey.publicPoint)
        self.tokens = tokens
        self.clock = clock
        // Endpoints live on many hosts; libcurl keeps one connection per host on this client.
        client = HTTP2Client(
            name: "unifiedpush",
            options: .init(caFile: configuration.caFile, addressPolicy: configuration.addressPolicy))
    }

    public func close() { client.close() }
    public var connectionsOpened: Int { client.connectionsOpened }

    public func addresses(forDevice deviceID: UInt64) -> [ChannelAddress] {
        addresses(
            forDevice: deviceID, kind: .locate, registrations: tokens.pushRegistrations(deviceID: deviceID))
    }

    public func addresses(
        forDevice deviceID: UInt64, kind: CommandKind, registrations: [DevicePushRegistration]
    ) -> [ChannelAddress] {
        pushAddresses(registrations, providers: ["unifiedpush"])
    }

    public func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        guard let origin = Self.origin(address.token) else {
            completion(.addressDead(reason: "the endpoint is not an https URL"))
            return
        }
        // The keys stay in the registry rather than travelling in the address through the dispatcher.
        guard let registration = tokens.pushRegistration(provider: "unifiedpush", token: address.token),
            !registration.webPushPublicKey.isEmpty
        else {
            completion(
                .addressDead(reason: "the endpoint has no registered keys: the device must register again"))
            return
        }
        let plaintext = JSONWriter.encode(.object(JSONObject(commandMembers(delivery))))
        let body: [UInt8]
        do {
            body = try WebPushEncryption.encrypt(
                plaintext, receiverPoint: registration.webPushPublicKey,
                authSecret: registration.webPushAuthSecret)
        } catch {
            completion(.failed(reason: "cannot encrypt to this subscription: \(error)"))
            return
        }
        let request = OutgoingRequest(
            url: address.token,
            headers: [
                "authorization: vapid t=\(vapidToken(origin: origin)), k=\(vapidPublicKey)",
                "content-encoding: aes128gcm", "content-type: application/octet-stream",
                "ttl: \(timeToLiveSeconds(delivery.kind))", "urgency: high",
            ],
            body: body)
        let addressKey = "unifiedpush " + address.token
        let backoff = self.backoff
        client.send(request) { result in
            switch result {
            case .failure(let failure) where failure.permanent:
                completion(.failed(reason: "push service not sent to: \(failure.message)"))
            case .failure(let failure):
                completion(
                    .retry(
                        afterSeconds: backoff.failed(addressKey),
                        reason: "push service unreachable: \(failure.message)"))
            case .success(let response):
                let reason = "push service \(response.status)"
                switch response.status {
                case 200...299:
                    backoff.succeeded(addressKey)
                    completion(.sent(providerID: response.header("location")))
                case 404, 410:
                    backoff.succeeded(addressKey)
                    completion(.addressDead(reason: reason))
                case 429, 500...599:
                    completion(
                        .retry(
                            afterSeconds: backoff.retryDelay(
                                addressKey, retryAfter: response.header("retry-after")),
                            reason: reason))
                default:
                    completion(.failed(reason: reason))
                }
            }
        }
    }

    /// `scheme://host[:port]` of an https URL: the VAPID audience.
    static func origin(_ url: String) -> String? {
        guard url.hasPrefix("https://") else { return nil }
        let rest = url.dropFirst("https://".count)
        let host = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !host.isEmpty else { return nil }
        return "https://" + host
    }

    func vapidToken(origin: String) -> String {
        let nowSeconds = clock() / 1_000_000
        return vapidTokens.withLock { cache in
            if let cached = cache[origin],
                nowSeconds < cached.expiresAtSeconds - Self.vapidRenewSecondsBefore,
                cached.expiresAtSeconds - Self.vapidLifetimeSeconds <= nowSeconds
            {
                return cached.jwt
            }
            if cache.count >= Self.originsMax { cache.removeAll() }
            let expires = nowSeconds + Self.vapidLifetimeSeconds
            let jwt = JWT.sign(
                header: ["typ": .string("JWT"), "alg": .string("ES256")],
                claims: [
                    "aud": .string(origin), "exp": .integer(expires), "sub": .string(configuration.contact),
                ],
                key: vapidKey)
            cache[origin] = (jwt, expires)
            return jwt
        }
    }
}
