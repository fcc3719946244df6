import Commands
import Crypto
import HTTPClient
import JSON
import Threads

// Firebase Cloud Messaging, HTTP v1 API:
//   access token: POST {token_uri} grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT
//     JWT = RS256({"alg":"RS256","typ":"JWT","kid":private_key_id},
//                 {"iss":client_email,"scope":".../auth/firebase.messaging","aud":token_uri,"iat","exp"})
//     answer {"access_token", "expires_in", "token_type": "Bearer"}; cached until 5 minutes before it ends
//   send: POST {base}/v1/projects/{project}/messages:send, authorization: Bearer {access token}
//     {"message": {"token", "data": {string: string}, "android": {"priority": "high", "ttl": "300s"}}}
//     200 {"name": "projects/{project}/messages/{id}"}; errors {"error": {"code", "status", "details":
//     [{"@type": ".../google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"}]}}
// A data message (no `notification`) reaches the app's FirebaseMessagingService even in the
// background; high priority is what may wake a dozing phone at once.

/// What the service-account JSON file holds that we use.
public struct FCMServiceAccount: Sendable {
    public var projectID: String
    public var clientEmail: String
    public var privateKeyID: String
    public var tokenURI: String
    public var key: PrivateKey

    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        case notServiceAccount(String)
        public var description: String {
            switch self {
            case .notServiceAccount(let why):
                "not a Google service-account key file (\(why)): download one under Firebase console, Project settings, Service accounts"
            }
        }
    }

    /// Parses the file's bytes. The messages never quote the private key.
    public static func parse(_ bytes: [UInt8]) throws(Failure) -> FCMServiceAccount {
        guard case .object(let object)? = try? JSONParser.parse(bytes) else {
            throw .notServiceAccount("not JSON")
        }
        func text(_ key: String) throws(Failure) -> String {
            guard case .string(let value)? = object[key], !value.isEmpty else {
                throw .notServiceAccount("no \(key)")
            }
            return value
        }
        guard try text("type") == "service_account" else {
            throw .notServiceAccount("type is not service_account")
        }
        guard let key = PrivateKey.pem(Array(try text("private_key").utf8)), key.kind == .rsa else {
            throw .notServiceAccount("private_key is not an RSA key in PEM")
        }
        return FCMServiceAccount(
            projectID: try text("project_id"), clientEmail: try text("client_email"),
            privateKeyID: (try? text("private_key_id")) ?? "", tokenURI: try text("token_uri"), key: key)
    }
}

public struct FCMConfiguration: Sendable {
    public var account: FCMServiceAccount
    /// The project to send through; the service account's own by default.
    public var projectID: String
    public var baseURL = "https://fcm.googleapis.com"
    /// The OAuth 2.0 token endpoint; the service account's `token_uri` by default.
    public var tokenURL: String
    public var caFile: String?

    public init(account: FCMServiceAccount) {
        self.account = account
        self.projectID = account.projectID
        self.tokenURL = account.tokenURI
    }
}

public final class FCMChannel: CommandChannel {
    public let name = "fcm"
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// An access token is replaced this long before Google says it ends.
    static let accessTokenRenewSecondsBefore: Int64 = 300

    let configuration: FCMConfiguration
    let tokens: any PushTokenSource
    let clock: WallClockMicros
    let backoff = Backoff()
    /// The token endpoint and FCM are different hosts: one connection each, on one client.
    let client: HTTP2Client

    struct AccessState {
        var token: String?
        var expiresAtSeconds: Int64 = 0
        /// Sends waiting for the token being fetched: one fetch serves them all.
        var waiting: [@Sendable (Result<String, TransportFailure>) -> Void] = []
        var fetching = false
    }
    private let access = Locked(AccessState())

    public init(
        configuration: FCMConfiguration, tokens: any PushTokenSource,
        clock: @escaping WallClockMicros = systemWallClockMicros
    ) {
        self.configuration = configuration
        self.tokens = tokens
        self.clock = clock
        client = HTTP2Client(name: "fcm", options: .init(caFile: configuration.caFile))
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
        pushAddresses(registrations, providers: ["fcm"])
    }

    public func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        send(delivery, to: address, refetched: false, completion: completion)
    }

    func send(
        _ delivery: CommandDelivery, to address: ChannelAddress, refetched: Bool,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        let addressKey = "fcm " + address.token
        let backoff = self.backoff
        withAccessToken { [self] result in
            let accessToken: String
            switch result {
            case .failure(let failure) where failure.permanent:
                completion(.failed(reason: failure.message))
                return
            case .failure(let failure):
                completion(.retry(afterSeconds: backoff.failed(addressKey), reason: failure.message))
                return
            case .success(let token): accessToken = token
            }
            var data: [JSONObject.Member] = []
            for member in commandMembers(delivery) { data.append(member) }
            let message: JSONValue = .object([
                "message": .object([
                    "token": .string(address.token),
                    "data": .object(JSONObject(data)),
                    "android": .object([
                        "priority": .string("high"), "ttl": .string("\(timeToLiveSeconds(delivery.kind))s"),
                    ]),
                ])
            ])
            let request = OutgoingRequest(
                url: configuration.baseURL + "/v1/projects/\(configuration.projectID)/messages:send",
                headers: ["authorization: Bearer \(accessToken)", "content-type: application/json"],
                body: JSONWriter.encode(message))
            client.send(request) { [self] result in
                switch result {
                case .failure(let failure):
                    completion(
                        .retry(
                            afterSeconds: backoff.failed(addressKey),
                            reason: "FCM unreachable: \(failure.message)"))
                case .success(let response):
                    let error = Self.error(response.body)
                    let reason = "FCM \(response.status) \(error.errorCode ?? error.status ?? "")"
                    switch response.status {
                    case 200:
                        backoff.succeeded(addressKey)
                        completion(.sent(providerID: errorField(response.body, "name")))
                    case _ where response.status == 404 || error.errorCode == "UNREGISTERED":
                        backoff.succeeded(addressKey)
                        completion(.addressDead(reason: reason))
                    case 400
                    where error.errorCode == "INVALID_ARGUMENT" || error.status == "INVALID_ARGUMENT":
                        backoff.succeeded(addressKey)
                        completion(Self.invalidArgument(error, reason: reason))
                    case 401 where !refetched:
                        forgetAccessToken(accessToken)
                        send(delivery, to: address, refetched: true, completion: completion)
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
    }

    /// What an error answer says: `error.status`, `error.message`, the first `details[].errorCode`
    /// (a `google.firebase.fcm.v1.FcmError`) and the first field violation of a
    /// `google.rpc.BadRequest` detail.
    struct ErrorAnswer {
        var status: String?
        var message: String?
        var errorCode: String?
        var fieldViolation: (field: String, description: String)?
    }

    static func error(_ body: [UInt8]) -> ErrorAnswer {
        guard case .object(let object)? = try? JSONParser.parse(body),
            case .object(let error)? = object["error"]
        else { return ErrorAnswer() }
        var answer = ErrorAnswer()
        if case .string(let value)? = error["status"] { answer.status = value }
        if case .string(let value)? = error["message"] { answer.message = value }
        if case .array(let details)? = error["details"] {
            for detail in details {
                if answer.errorCode == nil, case .string(let code)? = detail["errorCode"] {
                    answer.errorCode = code
                }
                if answer.fieldViolation == nil, case .array(let violations)? = detail["fieldViolations"],
                    case .object(let first)? = violations.first
                {
                    var field = ""
                    var description = ""
                    if case .string(let value)? = first["field"] { field = value }
                    if case .string(let value)? = first["description"] { description = value }
                    answer.fieldViolation = (field, description)
                }
            }
        }
        return answer
    }

    /// 400 INVALID_ARGUMENT is two different things (firebase.google.com/docs/cloud-messaging/error-codes):
    /// with a `google.rpc.BadRequest` field violation, FCM refused something in our message (a
    /// findmy bug: the token is fine, and the same message would be refused again); with only an
    /// `FcmError`, the registration token is not a valid FCM token, which Google's token guide
    /// says never becomes valid again (manage-tokens, "Detect invalid token responses"): dead.
    /// Without either detail nothing says the token is at fault: failed, the token kept.
    static func invalidArgument(_ error: ErrorAnswer, reason: String) -> DeliveryOutcome {
        if let violation = error.fieldViolation {
            return .failed(
                reason:
                    "\(reason): FCM refused the message (\(violation.field): \(violation.description)); the token is kept. This is a findmy bug: please report it"
            )
        }
        guard error.errorCode == "INVALID_ARGUMENT" else {
            return .failed(reason: "\(reason): \(error.message ?? "no message") (the token is kept)")
        }
        return .addressDead(
            reason:
                "\(reason): not a valid FCM registration token (\(error.message ?? "no message")); the app registers a new one when it next runs, or check that it uses this Firebase project"
        )
    }

    // MARK: the access token

    func withAccessToken(_ use: @escaping @Sendable (Result<String, TransportFailure>) -> Void) {
        let nowSeconds = clock() / 1_000_000
        let (ready, startFetch) = access.withLock { state -> (String?, Bool) in
            if let token = state.token,
                nowSeconds < state.expiresAtSeconds - Self.accessTokenRenewSecondsBefore
            {
                return (token, false)
            }
            state.waiting.append(use)
            defer { state.fetching = true }
            return (nil, !state.fetching)
        }
        if let ready {
            use(.success(ready))
            return
        }
        if startFetch { fetchAccessToken(issuedAtSeconds: nowSeconds) }
    }

    func forgetAccessToken(_ refused: String) {
        access.withLock { state in
            if state.token == refused { state.token = nil }
        }
    }

    private func fetchAccessToken(issuedAtSeconds: Int64) {
        let account = configuration.account
        let assertion = JWT.sign(
            header: ["alg": .string("RS256"), "typ": .string("JWT"), "kid": .string(account.privateKeyID)],
            claims: [
                "iss": .string(account.clientEmail), "scope": .string(Self.scope),
                "aud": .string(configuration.tokenURL), "iat": .integer(issuedAtSeconds),
                "exp": .integer(issuedAtSeconds + 3600),
            ],
            key: account.key)
        let body = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        let request = OutgoingRequest(
            url: configuration.tokenURL, headers: ["content-type: application/x-www-form-urlencoded"],
            body: Array(body.utf8))
        client.send(request) { [self] result in
            let outcome: Result<(String, Int64), TransportFailure>
            switch result {
            case .failure(let failure):
                outcome = .failure(
                    TransportFailure(message: "OAuth token endpoint unreachable: \(failure.message)"))
            case .success(let response):
                if response.status == 200, case .object(let object)? = try? JSONParser.parse(response.body),
                    case .string(let token)? = object["access_token"],
                    case .integer(let expiresIn)? = object["expires_in"]
                {
                    outcome = .success((token, issuedAtSeconds + expiresIn))
                } else {
                    let why = errorField(response.body, "error") ?? "status \(response.status)"
                    // 5xx and 429 are the endpoint's trouble (try again); anything else is our key's.
                    outcome = .failure(
                        TransportFailure(
                            message: "the OAuth token endpoint answered \(response.status) (\(why))"
                                + (response.status >= 500 || response.status == 429
                                    ? "" : ": check the service-account file"),
                            permanent: response.status < 500 && response.status != 429))
                }
            }
            let waiting = access.withLock { state in
                state.fetching = false
                if case .success(let (token, expiresAt)) = outcome {
                    state.token = token
                    state.expiresAtSeconds = expiresAt
                }
                defer { state.waiting.removeAll() }
                return state.waiting
            }
            for use in waiting { use(outcome.map(\.0)) }
        }
    }
}
