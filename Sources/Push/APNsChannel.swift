import Commands
import Crypto
import HTTPClient
import JSON
import Threads

// Apple Push Notification service, provider API with token-based authentication:
//   POST {base}/3/device/{device token}, HTTP/2, one connection per team and environment
//   authorization: bearer {JWT}   JWT = ES256({"alg":"ES256","kid":key id}, {"iss":team id,"iat":now})
//   apns-push-type, apns-topic, apns-priority, apns-expiration; body: the JSON payload
//   200 + apns-id header: accepted. Otherwise a JSON body {"reason": "..."}.
// Apple refuses a provider token older than an hour (403 ExpiredProviderToken) and one renewed more
// often than every 20 minutes (429 TooManyProviderTokenUpdates); we renew at 40 minutes, and at once
// when Apple says the token expired (its clock, not ours, decides).

public struct APNsConfiguration: Sendable {
    /// The 10-character team id (`iss`) and the key id of the `.p8` key (`kid`).
    public var teamID: String
    public var keyID: String
    /// The app's bundle id: the `apns-topic` of its pushes, and `<bundle>.location-query` the
    /// topic of location pushes. A registration's own topic wins when it has one.
    public var bundleID: String
    public var productionURL = "https://api.push.apple.com"
    public var sandboxURL = "https://api.sandbox.push.apple.com"
    /// Trust only this CA file (tests); nil for the system's.
    public var caFile: String?
    /// Sound with a critical alert (rings through silent mode and Focus), which needs Apple's
    /// critical-alerts entitlement for the app; off by default.
    public var criticalSound = false
    /// A locate without a location-push token goes as a background push; the alert asking to open
    /// the app follows only if the command is still unanswered this long after it
    /// (`--apns-alert-after-seconds`).
    public var alertAfterSeconds = 30

    public init(teamID: String, keyID: String, bundleID: String) {
        self.teamID = teamID
        self.keyID = keyID
        self.bundleID = bundleID
    }
}

public final class APNsChannel: CommandChannel {
    public let name = "apns"
    /// A provider token is used this long, then a new one is signed (Apple: 20 to 60 minutes).
    public static let providerTokenSecondsMax: Int64 = 40 * 60

    let configuration: APNsConfiguration
    let key: PrivateKey
    let tokens: any PushTokenSource
    let clock: WallClockMicros
    let backoff = Backoff()
    private let providerToken = Locked<(jwt: String, issuedAtSeconds: Int64)?>(nil)
    /// One client per environment: sandbox and production are different hosts, and Apple binds a
    /// connection to one team (ours).
    let production: HTTP2Client
    let sandbox: HTTP2Client

    public init(
        configuration: APNsConfiguration, key: PrivateKey, tokens: any PushTokenSource,
        clock: @escaping WallClockMicros = systemWallClockMicros
    ) {
        precondition(key.kind == .p256, "an APNs key is a P-256 key")
        self.configuration = configuration
        self.key = key
        self.tokens = tokens
        self.clock = clock
        production = HTTP2Client(name: "apns-production", options: .init(caFile: configuration.caFile))
        sandbox = HTTP2Client(name: "apns-sandbox", options: .init(caFile: configuration.caFile))
    }

    public func close() {
        production.close()
        sandbox.close()
    }

    /// New connections opened so far, both environments together.
    public var connectionsOpened: Int { production.connectionsOpened + sandbox.connectionsOpened }

    public func addresses(forDevice deviceID: UInt64) -> [ChannelAddress] {
        addresses(
            forDevice: deviceID, kind: .locate, registrations: tokens.pushRegistrations(deviceID: deviceID))
    }

    public func addresses(forDevice deviceID: UInt64, kind: CommandKind) -> [ChannelAddress] {
        addresses(
            forDevice: deviceID, kind: kind, registrations: tokens.pushRegistrations(deviceID: deviceID))
    }

    public func addresses(
        forDevice deviceID: UInt64, kind: CommandKind, registrations: [DevicePushRegistration]
    ) -> [ChannelAddress] {
        // The location-push token first: it alone can wake the app's extension to report at once.
        // It reaches only the location extension, which cannot ring or show a message.
        pushAddresses(registrations, providers: kind == .locate ? ["apns-location", "apns"] : ["apns"])
    }

    public func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        let pushes = plan(delivery, to: address)
        guard let first = pushes.first else {
            completion(
                .failed(
                    reason:
                        "an apns-location token takes locate only; \(delivery.kind.rawValue) goes to the app's apns token"
                ))
            return
        }
        // Without a location-push token: the silent push may wake the app (iOS throttles them, and
        // never delivers one to an app the user swiped away); only if the command is still
        // unanswered `alertAfterSeconds` later does the alert ask the person holding the phone to
        // open the app, which makes it report. The dispatcher keeps the wait (its clock, its
        // knowledge of answers) and delivers again with `followUp` set.
        if delivery.followUp {
            send(pushes[pushes.count - 1], to: address, renewed: false, completion: completion)
            return
        }
        send(first, to: address, renewed: false) { [configuration] outcome in
            guard case .sent(let providerID) = outcome, pushes.count > 1 else {
                completion(outcome)
                return
            }
            completion(
                .sentWithFollowUp(providerID: providerID, afterSeconds: configuration.alertAfterSeconds))
        }
    }

    struct Push {
        var type: String
        var priority: Int
        var topic: String
        var payload: [UInt8]
        var timeToLiveSeconds: Int
    }

    func plan(_ delivery: CommandDelivery, to address: ChannelAddress) -> [Push] {
        let appTopic =
            address.provider == "apns" && !address.topic.isEmpty ? address.topic : configuration.bundleID
        let command = commandMembers(delivery)
        let ttl = timeToLiveSeconds(delivery.kind)
        func json(_ aps: JSONObject) -> [UInt8] {
            JSONWriter.encode(.object(JSONObject([.init(key: "aps", value: .object(aps))] + command)))
        }
        func alert(_ title: String, _ body: String) -> JSONValue {
            .object(["title": .string(title), "body": .string(body)])
        }
        if address.provider == "apns-location" {
            guard delivery.kind == .locate else { return [] }
            let topic = address.topic.isEmpty ? configuration.bundleID + ".location-query" : address.topic
            return [
                Push(type: "location", priority: 10, topic: topic, payload: json([:]), timeToLiveSeconds: ttl)
            ]
        }
        switch delivery.kind {
        case .locate:
            return [
                Push(
                    type: "background", priority: 5, topic: appTopic,
                    payload: json(["content-available": .integer(1)]), timeToLiveSeconds: ttl),
                Push(
                    type: "alert", priority: 10, topic: appTopic,
                    payload: json([
                        "alert": alert("Where is this device?", "Open the app so it can report its position.")
                    ]), timeToLiveSeconds: ttl),
            ]
        case .sound:
            let sound: JSONValue =
                configuration.criticalSound
                ? .object(["critical": .integer(1), "name": .string("default"), "volume": .double(1.0)])
                : .string("default")
            return [
                Push(
                    type: "alert", priority: 10, topic: appTopic,
                    payload: json([
                        "alert": alert("Find my device", "Playing a sound to help find this device."),
                        "sound": sound,
                    ]), timeToLiveSeconds: ttl)
            ]
        case .lost:
            var text = delivery.message ?? "This device is lost."
            if let phone = delivery.phone, !phone.isEmpty { text += " Call \(phone)." }
            return [
                Push(
                    type: "alert", priority: 10, topic: appTopic,
                    payload: json(["alert": alert("This device is lost", text), "sound": .string("default")]),
                    timeToLiveSeconds: ttl)
            ]
        case .found:
            return [
                Push(
                    type: "alert", priority: 10, topic: appTopic,
                    payload: json(["alert": alert("Found", "This device is no longer marked as lost.")]),
                    timeToLiveSeconds: ttl)
            ]
        }
    }

    func send(
        _ push: Push, to address: ChannelAddress, renewed: Bool,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        let client = address.environment == "sandbox" ? sandbox : production
        let base = address.environment == "sandbox" ? configuration.sandboxURL : configuration.productionURL
        let jwt = currentProviderToken()
        let nowSeconds = clock() / 1_000_000
        let request = OutgoingRequest(
            url: base + "/3/device/" + address.token,
            headers: [
                "authorization: bearer \(jwt)", "apns-push-type: \(push.type)", "apns-topic: \(push.topic)",
                "apns-priority: \(push.priority)",
                "apns-expiration: \(nowSeconds + Int64(push.timeToLiveSeconds))",
                "content-type: application/json",
            ],
            body: push.payload)
        let backoff = self.backoff
        let addressKey = address.provider + " " + address.token
        client.send(request) { [self] result in
            switch result {
            case .failure(let failure):
                completion(
                    .retry(
                        afterSeconds: backoff.failed(addressKey),
                        reason: "APNs unreachable: \(failure.message)"))
            case .success(let response):
                let reason = errorField(response.body, "reason") ?? "status \(response.status)"
                switch (response.status, reason) {
                case (200, _):
                    backoff.succeeded(addressKey)
                    completion(.sent(providerID: response.header("apns-id")))
                case (403, "ExpiredProviderToken") where !renewed:
                    renewProviderToken(refused: jwt)
                    send(push, to: address, renewed: true, completion: completion)
                case (410, _), (400, "BadDeviceToken"):
                    backoff.succeeded(addressKey)
                    completion(.addressDead(reason: "APNs \(response.status) \(reason)"))
                case (400, "DeviceTokenNotForTopic"):
                    // Apple: do not retry. The token is not at fault but our topic (the bundle id
                    // configured, or the one the app registered with): ending the token would end
                    // every device's at one misconfiguration, so it is kept.
                    backoff.succeeded(addressKey)
                    completion(
                        .failed(
                            reason:
                                "APNs 400 DeviceTokenNotForTopic: the token belongs to another app than the topic \(push.topic): check --apns-bundle-id, or the topic the app registered the token with"
                        ))
                case (429, _), (500...599, _):
                    completion(
                        .retry(
                            afterSeconds: backoff.retryDelay(
                                addressKey, retryAfter: response.header("retry-after")),
                            reason: "APNs \(response.status) \(reason)"))
                case (403, _):
                    completion(
                        .failed(
                            reason:
                                "APNs refused the provider token (\(reason)): check the key file, key id and team id"
                        ))
                default:
                    completion(.failed(reason: "APNs \(response.status) \(reason)"))
                }
            }
        }
    }

    /// The provider token in use, signed anew once it is `providerTokenSecondsMax` old.
    func currentProviderToken() -> String {
        let nowSeconds = clock() / 1_000_000
        return providerToken.withLock { cached in
            if let cached, nowSeconds - cached.issuedAtSeconds < Self.providerTokenSecondsMax,
                nowSeconds >= cached.issuedAtSeconds
            {
                return cached.jwt
            }
            let jwt = signProviderToken(issuedAtSeconds: nowSeconds)
            cached = (jwt, nowSeconds)
            return jwt
        }
    }

    /// After 403 ExpiredProviderToken: a new token, unless another request already replaced the
    /// refused one (many streams get the same 403 at once; one renewal serves them all).
    func renewProviderToken(refused: String) {
        let nowSeconds = clock() / 1_000_000
        providerToken.withLock { cached in
            guard cached?.jwt == refused || cached == nil else { return }
            cached = (signProviderToken(issuedAtSeconds: nowSeconds), nowSeconds)
        }
    }

    private func signProviderToken(issuedAtSeconds: Int64) -> String {
        JWT.sign(
            header: ["alg": .string("ES256"), "kid": .string(configuration.keyID)],
            claims: ["iss": .string(configuration.teamID), "iat": .integer(issuedAtSeconds)], key: key)
    }
}
