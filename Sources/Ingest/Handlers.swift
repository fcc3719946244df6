import Core
import Crypto
import Events
import HTTP
import HTTPClient
import Identity
import JSON

extension IngestService {
    /// The public routes. `/metrics` and `/healthz` are unauthenticated: bind the server to a
    /// trusted network or put a proxy in front (docs/configuration.md).
    public func addRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/api/find-my/devices") { [self] request, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                try enrol(request, userID: caller.userID)
            }
        }
        router.add("POST", "/api/find-my/push-tokens") { [self] request, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                try registerPushToken(request, deviceID: caller.tokenDeviceID)
            }
        }
        router.add("POST", "/api/find-my/reporting") { [self] request, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                try changeReporting(request, deviceID: caller.tokenDeviceID)
            }
        }
        // Deferred: the event-loop thread decodes and queues the append, and the group commit
        // that makes the batch durable sends the answer; no thread waits for the fdatasync.
        router.addDeferred("POST", "/api/find-my/report") { [self] request, caller, reply in
            report(request, deviceID: caller.tokenDeviceID, reply: reply)
        }
        addRetentionRoutes(to: &router)
        addDeviceNtfyRoutes(to: &router)
        router.add("GET", "/healthz") { [self] _, _ in healthz() }
        router.add("GET", "/metrics") { [self] _, _ in
            var text = metrics.render(log: identity.store.log.localWriter?.statistics)
            for source in statusSources.all { text += source.metricsText() }
            var response = HTTPResponse.text(text)
            response.headers.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            return response
        }
    }

    /// The admin routes, served only on the owner-only unix socket DATA_DIR/admin.sock.
    public func addAdminRoutes(to router: inout GuardedRouter) {
        addRetentionAdminRoutes(to: &router)
    }

    func healthz() -> HTTPResponse {
        if identity.store.logFailing.load(ordering: .relaxed) {
            return .error(
                status: 503, code: .logUnavailable,
                message:
                    "the last append to the event log failed (disk full or I/O error); see the server log")
        }
        var degraded = false
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("log")
        writer.string(identity.store.log.healthName)
        writer.key("durable_end")
        writer.int64(Int64(identity.store.durableEnd))
        for source in statusSources.all {
            let (sourceDegraded, members) = source.health()
            degraded = degraded || sourceDegraded
            writer.key(source.name)
            writer.value(.object(JSONObject(members.map { JSONObject.Member(key: $0.0, value: $0.1) })))
        }
        writer.key("status")
        writer.string(degraded ? "degraded" : "ok")
        writer.endObject()
        return .json(writer.bytes)
    }

    // MARK: enrolment

    static let platformBytesMax = 32

    /// `userID`: the caller, as the gate resolved it.
    func enrol(_ request: HTTPRequest, userID: UInt64) throws(APIError) -> HTTPResponse {
        let object = try parseObject(request.body, allowed: ["device_uuid", "name", "platform", "model"])
        let uuidText = try field { () throws(JSONAccessError) in try object.string("device_uuid") }
        guard let uuid = UUID128(uuidText) else {
            throw .badRequest(
                .invalidField,
                "device_uuid: '\(uuidText.prefix(64))' is not a UUID; generate one once on the device and keep it"
            )
        }
        let name = try field { () throws(JSONAccessError) in try object.string("name") }
        let platform = try field { () throws(JSONAccessError) in try object.string("platform") }
        let model = try field { () throws(JSONAccessError) in try object.stringIfPresent("model") } ?? ""
        let enrolled = try enrolDevice(
            userID: userID, uuid: uuid, name: name, platform: platform, model: model)
        var writer = JSONWriter(capacity: 160)
        writer.beginObject()
        writer.key("device_id")
        writer.int64(Int64(enrolled.deviceID))
        writer.key("device_token")
        writer.string(enrolled.token)
        writer.key("offset")
        writer.int64(Int64(enrolled.offset))
        writer.endObject()
        return .json(writer.bytes, status: enrolled.created ? 201 : 200)
    }

    public struct EnrolledDevice: Sendable {
        public var deviceID: UInt64
        /// Shown once: only its SHA-256 is kept.
        public var token: String
        public var offset: UInt64
        /// False when the user had a device with this UUID: it got a new token, the old one ended.
        public var created: Bool
    }

    /// Enrols device `uuid` of user `userID` (or renames it and issues it a new token when the user
    /// has it already): the path of `POST /api/find-my/devices` and the panel's "Add a device".
    public func enrolDevice(userID: UInt64, uuid: UUID128, name: String, platform: String, model: String)
        throws(APIError) -> EnrolledDevice
    {
        try identity.checkText(name, field: "name", allowEmpty: false)
        try identity.checkText(model, field: "model", allowEmpty: true)
        try NameRules.check(name, field: "name")
        try NameRules.checkTrimmed(name, field: "name")
        try NameRules.check(model, field: "model")
        guard !platform.isEmpty, platform.utf8.count <= Self.platformBytesMax,
            platform.utf8.allSatisfy({
                ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D
            })
        else {
            throw .badRequest(
                .invalidField,
                "platform must be 1 to \(Self.platformBytesMax) characters of a-z, 0-9, '_', '-' (ios, android, macos, linux, ...)"
            )
        }
        let token = Token.generate()
        let (deviceID, offset, created) = try identity.store.mutations.withLock {
            _ throws(APIError) -> (UInt64, UInt64, Bool) in
            let (existing, nextID) = registry.read {
                ($0.registry.device(userID: userID, uuid: uuid), $0.registry.nextDeviceID)
            }
            let deviceID = existing?.id ?? nextID
            let received = clockMicros()
            if existing == nil || existing?.name != name || existing?.platform != platform
                || existing?.model != model
            {
                _ = try appendAndApply(
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: deviceID, userID: userID, deviceUUID: uuid, name: name,
                            platform: platform, model: model)),
                    receivedAtMicros: received)
            }
            // Issuing the token revokes the device's earlier one: a reinstalled app gets a fresh token.
            let offset = try appendAndApply(
                .deviceTokenIssued(
                    DeviceTokenIssued(deviceID: deviceID, tokenHash: SHA256.hash(Array(token.utf8)))),
                receivedAtMicros: received)
            return (deviceID, offset, existing == nil)
        }
        StructuredLog.info(
            created ? "device_enrolled" : "device_reenrolled",
            [
                "user_id": .int(Int64(userID)), "device_id": .int(Int64(deviceID)),
                "platform": .string(platform),
            ])
        return EnrolledDevice(deviceID: deviceID, token: token, offset: offset, created: created)
    }

    // MARK: push tokens

    /// `apns-location` is the token of an iOS app's location-push service extension (topic
    /// `<bundle>.location-query`): a provider of its own, so a device keeps it beside its `apns` token.
    static let pushProviders: Set<String> = ["apns", "apns-location", "fcm", "unifiedpush"]

    func registerPushToken(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let object = try parseObject(
            request.body, allowed: ["provider", "token", "topic", "environment", "p256dh", "auth"])
        let provider = try field { () throws(JSONAccessError) in try object.string("provider") }
        let token = try field { () throws(JSONAccessError) in try object.string("token") }
        let topic = try field { () throws(JSONAccessError) in try object.stringIfPresent("topic") } ?? ""
        let environment =
            try field { () throws(JSONAccessError) in try object.stringIfPresent("environment") } ?? ""
        guard Self.pushProviders.contains(provider) else {
            throw .badRequest(
                .invalidField,
                "provider must be one of \(Self.pushProviders.sorted().joined(separator: ", "))")
        }
        guard !token.isEmpty, token.utf8.count <= limits.pushTokenBytesMax,
            !token.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F })
        else {
            throw .badRequest(
                .invalidField,
                "token must be 1 to \(limits.pushTokenBytesMax) bytes without spaces or control characters")
        }
        try identity.checkText(topic, field: "topic", allowEmpty: true)
        try identity.checkText(environment, field: "environment", allowEmpty: true)
        let (publicKey, authSecret) = try webPushKeys(object, provider: provider, endpoint: token)
        let event = Event.pushTokenRegistered(
            PushTokenRegistered(
                deviceID: deviceID, provider: provider, token: token, topic: topic, environment: environment,
                webPushPublicKey: publicKey, webPushAuthSecret: authSecret))
        let offset = try identity.store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(event, receivedAtMicros: clockMicros())
        }
        StructuredLog.info(
            "push_token_registered", ["device_id": .int(Int64(deviceID)), "provider": .string(provider)])
        return .json("{\"offset\": \(offset)}")
    }

    /// A UnifiedPush registration carries the subscription's keys (RFC 8291: `p256dh`, the
    /// device's P-256 public key, and `auth`, 16 random bytes; both base64url, as the Push API's
    /// `PushSubscription.toJSON()` gives them) and its endpoint is an https URL. No other provider
    /// takes keys.
    func webPushKeys(_ object: JSONObject, provider: String, endpoint: String) throws(APIError)
        -> (publicKey: [UInt8], authSecret: [UInt8])
    {
        let p256dh = try field { () throws(JSONAccessError) in try object.stringIfPresent("p256dh") }
        let auth = try field { () throws(JSONAccessError) in try object.stringIfPresent("auth") }
        guard provider == "unifiedpush" else {
            guard p256dh == nil, auth == nil else {
                throw .badRequest(.invalidField, "p256dh and auth are for provider unifiedpush only")
            }
            return ([], [])
        }
        guard endpoint.hasPrefix("https://") else {
            throw .badRequest(.invalidField, "a unifiedpush token is the endpoint's https:// URL")
        }
        if let host = AddressPolicy.host(ofURL: endpoint),
            let kind = limits.outgoingTargets.refusal(host: host)
        {
            throw .badRequest(
                .invalidField,
                "the unifiedpush endpoint points at a \(kind) address (\(host)); the server sends only to public"
                    + " addresses unless its operator allows others (--allow-private-targets)")
        }
        guard let p256dh, let auth else {
            throw .badRequest(
                .invalidField,
                "unifiedpush needs the subscription's keys: p256dh and auth, base64url as the distributor gives them"
            )
        }
        guard let publicKey = Base64URL.decode(p256dh), WebPushEncryption.isPublicPoint(publicKey) else {
            throw .badRequest(
                .invalidField,
                "p256dh must be a base64url P-256 public key (65 bytes, uncompressed, on the curve)")
        }
        guard let authSecret = Base64URL.decode(auth), authSecret.count == WebPushEncryption.authSecretBytes
        else {
            throw .badRequest(.invalidField, "auth must be 16 bytes in base64url (22 characters)")
        }
        return (publicKey, authSecret)
    }

    // MARK: pause

    func changeReporting(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let object = try parseObject(request.body, allowed: ["paused"])
        let paused = try field { () throws(JSONAccessError) in try object.bool("paused") }
        let offset = try identity.store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(
                .reportingChanged(ReportingChanged(deviceID: deviceID, paused: paused)),
                receivedAtMicros: clockMicros())
        }
        StructuredLog.info(
            "reporting_changed", ["device_id": .int(Int64(deviceID)), "paused": .bool(paused)])
        return .json("{\"paused\": \(paused), \"offset\": \(offset)}")
    }

    // MARK: report

    enum Admission {
        case duplicate(Registry.BatchResult)
        case append
    }

    /// A report ready to append: decoded, admitted (its batch id marked in flight), encoded.
    struct AdmittedReport: Sendable {
        var key: RegistryStore.BatchKey
        var event: Event
        var inReplyTo: UUID128?
        var encoded: EncodedEvent
        var acceptedCount: Int
        var rejections: [Rejection]
        var rejectionCounts: [FixRejection.Code: Int]
    }

    enum ReportAdmission {
        /// Answered without appending: a duplicate's original result.
        case answered(HTTPResponse)
        case admitted(AdmittedReport)
    }

    /// Answers a report once it is durable, without blocking the calling thread: `reply` runs on
    /// the thread that led the group commit (or at once, for an answer that needs no append).
    func report(_ request: HTTPRequest, deviceID: UInt64, reply: HTTPReply) {
        let admitted: AdmittedReport
        do {
            switch try admitReport(request, deviceID: deviceID) {
            case .answered(let response): return reply(response)
            case .admitted(let report): admitted = report
            }
        } catch {
            return reply(respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in throw error })
        }
        identity.store.appendReportingDuplicates(admitted.encoded) { [self] result in
            reply(
                respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                    if case .success(let appended) = result, appended.duplicate {
                        return finishDuplicateReport(admitted, appended)
                    }
                    return try finishReport(admitted, offset: try result.mapError(APIError.init).get().offset)
                })
        }
    }

    /// A batch the log held already (on a shared log: stored through another node, or by this
    /// one's earlier attempt, within JetStream's duplicate window): answered as a duplicate with
    /// its first result, once this node has folded it (docs/scale.md, "Ingest nodes").
    func finishDuplicateReport(_ admitted: AdmittedReport, _ appended: SharedAppend) -> HTTPResponse {
        let key = admitted.key
        identity.store.log.awaitFolded(appended.offset)
        let first = registry.write { state in
            state.batchesInFlight.remove(key)
            return state.registry.batchResult(deviceID: key.deviceID, batchID: key.batchID)
        }
        metrics.recordDuplicate()
        return reportAnswer(
            first
                ?? Registry.BatchResult(
                    offset: appended.offset, accepted: admitted.acceptedCount, rejections: admitted.rejections
                ),
            duplicate: true, deviceID: key.deviceID)
    }

    /// `deviceID`: the caller, as the token in `request` resolved.
    func admitReport(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> ReportAdmission {
        let received = clockMicros()
        let decoded = try ReportDecoder.decode(
            request.body, receivedAtMicros: received, limits: arrivalLimits(deviceID))
        let key = RegistryStore.BatchKey(deviceID: deviceID, batchID: decoded.batchID)
        let admission = try registry.write { state throws(APIError) -> Admission in
            if let result = state.registry.batchResult(deviceID: deviceID, batchID: decoded.batchID) {
                return .duplicate(result)
            }
            if state.registry.devices[deviceID]?.paused == true {
                throw APIError(
                    status: 409, code: .reportingPaused,
                    message:
                        "reporting is paused for this device; nothing was stored. Resume with POST /api/find-my/reporting {\"paused\": false}"
                )
            }
            guard state.batchesInFlight.insert(key).inserted else {
                throw APIError(
                    status: 409, code: .batchInProgress,
                    message:
                        "this batch_id is being stored by another request right now; retry in a second for its result"
                )
            }
            return .append
        }
        if case .duplicate(let result) = admission {
            metrics.recordDuplicate()
            return .answered(reportAnswer(result, duplicate: true, deviceID: deviceID))
        }
        let event = Event.fixBatch(
            FixBatch(
                deviceID: deviceID, batchID: decoded.batchID, fixes: decoded.fixes,
                rejections: decoded.rejections))
        // Encoding compresses with LZ4; it runs here, in parallel, not under any lock.
        return .admitted(
            AdmittedReport(
                key: key, event: event, inReplyTo: decoded.inReplyTo,
                encoded: EventCodec.encode(event, receivedAtMicros: received),
                acceptedCount: decoded.fixes.count, rejections: decoded.rejections,
                rejectionCounts: decoded.rejectionCounts))
    }

    /// After the append: the batch leaves the in-flight set, and its result is what a retry gets.
    /// `offset` throws the append's failure, after which the batch may be sent again.
    func finishReport(_ admitted: AdmittedReport, offset: @autoclosure () throws(APIError) -> UInt64)
        throws(APIError) -> HTTPResponse
    {
        let key = admitted.key
        let durableOffset: UInt64
        do {
            durableOffset = try offset()
        } catch {
            registry.write { _ = $0.batchesInFlight.remove(key) }
            throw error
        }
        let appenderFolds = identity.store.appenderFolds
        let result = registry.write { state -> Registry.BatchResult? in
            state.batchesInFlight.remove(key)
            // Otherwise the node's follower folds it, in the log's order, and the answer is made of
            // what was appended.
            guard appenderFolds else { return nil }
            state.registry.apply(admitted.event, offset: durableOffset)
            return state.registry.batchResult(deviceID: key.deviceID, batchID: key.batchID)
        }
        metrics.recordReport(accepted: admitted.acceptedCount, rejected: admitted.rejectionCounts)
        if let answered = admitted.inReplyTo, case .fixBatch(let batch) = admitted.event {
            identity.store.answerCommand(
                .command(answered), deviceID: key.deviceID, batchOffset: durableOffset, fixes: batch.fixes,
                clientProtocol: .native)
        }
        return reportAnswer(
            result
                ?? Registry.BatchResult(
                    offset: durableOffset, accepted: admitted.acceptedCount, rejections: admitted.rejections),
            duplicate: false, deviceID: key.deviceID, answered: admitted.inReplyTo)
    }

    /// The answer to a report: what was stored, and the device's open commands (docs/api.md),
    /// less the one this batch answered.
    func reportAnswer(
        _ result: Registry.BatchResult, duplicate: Bool, deviceID: UInt64, answered: UUID128? = nil
    ) -> HTTPResponse {
        var writer = JSONWriter(capacity: 96 + result.rejections.count * 80)
        writer.beginObject()
        writer.key("accepted")
        writer.int64(Int64(result.accepted))
        writer.key("rejected")
        writer.rejectedFixes(result.rejections.lazy.map { ($0.index, $0.reason) })
        writer.key("duplicate")
        writer.bool(duplicate)
        writer.key("offset")
        writer.int64(Int64(result.offset))
        IdentityService.writeCommands(
            identity.store.commandsForAnswer(
                deviceID: deviceID, channel: "report-answer", excluding: answered),
            to: &writer)
        writer.endObject()
        return .json(writer.bytes)
    }
}
