import Crypto
import Events
import HTTP
import JSON
import Synchronization
import Threads

/// Who may do what: the registry folded from the log (users, devices, tokens, shares, and what the
/// report path keeps beside them), sessions, passwords and roles, the gate of every route, and the
/// account routes. It holds the log writer so that identity changes (a user created, a password
/// set, a token rotated, a share) are appended and applied like every other event. `IngestService`
/// holds one and uses its registry for enrolment and the report path's device tokens.
///
/// Locking: `registry` is read and updated under its lock, never while appending. Mutations whose
/// append must be decided together with the registry (a new device id, a token, a push token move)
/// hold `mutations` across check, append and apply, so they are applied in log order. Reports do
/// not take `mutations`: decoding, validation and encoding run in parallel on the HTTP event-loop
/// threads, the append does not block them (the group commit answers), and a batch id in flight is
/// marked so that a concurrent retry cannot append it twice.
public final class IdentityService: Sendable {
    /// The local log's writer; nil on a node of a shared log (`init(shared:)`), where every append
    /// goes through `shared` and nothing may ask for a local writer.
    public let localLog: LogWriter?
    /// Set on an ingest node of a shared log (SharedRegistry.swift); nil on the local log.
    public let shared: SharedRegistry?
    public let limits: IdentityLimits
    package let statusSources = StatusSources()
    package let registry: ReadWriteLocked<RegistryState>
    package let mutations: MutationLock
    package let clockMicros: @Sendable () -> Int64
    /// Set when the last append failed, cleared by the next success; `/healthz` reports it.
    package let logFailing = Atomic<Bool>(false)
    let sessions: SessionStore
    let doorLimits: DoorLimits
    let passwordChecksInFlight = Atomic<Int>(0)
    /// The web panel's answer to form posts on `/login` and `/logout` (`answerLoginForms`).
    let loginForms = Mutex<(any PanelLoginForms)?>(nil)
    /// Told how long each durable append took (the ingest metrics' histogram).
    let appendObserver: @Sendable (_ micros: Int64) -> Void

    package struct RegistryState: Sendable {
        package var registry: Registry
        package var batchesInFlight: Set<BatchKey> = []
        /// Commands whose hand-out through a report answer is being appended (CommandAnswers.swift).
        package var commandsHandedOut: Set<HandOutKey> = []
    }

    package struct BatchKey: Hashable, Sendable {
        package var deviceID: UInt64
        package var batchID: UUID128

        package init(deviceID: UInt64, batchID: UUID128) {
            self.deviceID = deviceID
            self.batchID = batchID
        }
    }

    /// Rebuilds the registry from the log: from the newest valid snapshot of `snapshots` and the
    /// records after it, or from every durable record when there is none (docs/snapshots.md).
    public init(
        log: LogWriter, limits: IdentityLimits = IdentityLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        appendObserver: @escaping @Sendable (_ micros: Int64) -> Void = { _ in },
        snapshots: RegistrySnapshotStore? = nil
    ) throws {
        self.localLog = log
        shared = nil
        mutations = MutationLock(shared: nil, freeIDs: { FreeIDs(user: 1, device: 1, geofence: 1) })
        self.appendObserver = appendObserver
        self.limits = limits
        self.clockMicros = clockMicros
        sessions = SessionStore(limits: limits)
        doorLimits = DoorLimits(limits)
        // Registry snapshots (RegistrySnapshotter.swift): the fold is kept for the snapshotter.
        let (fold, report) = try Registry.rebuild(
            reader: LogReader(directory: log.directory, writer: log), store: snapshots,
            recentBatchesPerDeviceMax: limits.recentBatchesPerDeviceMax)
        startReport = report
        // Kept only for a snapshotter: once the live registry changes, the copy costs its memory.
        startFold = Mutex(snapshots == nil ? nil : fold)
        self.registry = ReadWriteLocked(RegistryState(registry: fold.registry))
    }

    /// An ingest node of a shared log: the registry of the newest valid snapshot of `snapshots` on
    /// `snapshotLog` (docs/snapshots.md, "Ingest nodes"), or an empty one, which `shared`'s follower
    /// continues (the caller starts it from `shared.appliedEnd` and waits for it to reach the log's
    /// end before serving).
    public init(
        shared: SharedRegistry, limits: IdentityLimits = IdentityLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        appendObserver: @escaping @Sendable (_ micros: Int64) -> Void = { _ in },
        snapshots: RegistrySnapshotStore? = nil, snapshotLog: (any SnapshotSharedLog)? = nil
    ) {
        localLog = nil
        self.shared = shared
        var start = RegistryFold(
            registry: Registry(recentBatchesPerDeviceMax: limits.recentBatchesPerDeviceMax), offset: 0,
            segments: [])
        var report = RegistryStartReport(snapshotOffset: nil, recordsReplayed: 0, skipped: [])
        if let snapshots, let snapshotLog {
            (start, report) = Registry.sharedStart(
                log: snapshotLog, store: snapshots,
                recentBatchesPerDeviceMax: limits.recentBatchesPerDeviceMax)
            shared.startApplied(at: start.offset)
        }
        let registry = ReadWriteLocked(RegistryState(registry: start.registry))
        self.registry = registry
        mutations = MutationLock(shared: shared) {
            registry.read {
                FreeIDs(
                    user: $0.registry.nextUserID, device: $0.registry.nextDeviceID,
                    geofence: $0.registry.geofences.nextID)
            }
        }
        self.appendObserver = appendObserver
        self.limits = limits
        self.clockMicros = clockMicros
        sessions = SessionStore(limits: limits)
        doorLimits = DoorLimits(limits)
        startReport = report
        startFold = Mutex(snapshots == nil || snapshotLog == nil ? nil : start)
    }

    /// Under `mutations`: whether the decision in progress sees the whole log. Always on the local
    /// log; on a shared log, whether its catch-up reached the log's end (SharedRegistry's rule 3:
    /// an end such as a command's expiry is decided only then).
    package var decisionSeesWholeLog: Bool { shared?.decisionCaughtUp ?? true }

    /// The local log's writer. Only the local-log paths (snapshots, compaction, offline commands,
    /// tests) ask for it; a shared-log node never starts them.
    public var log: LogWriter {
        guard let localLog else {
            preconditionFailure("a node of a shared log has no local log writer; use durableEnd or append")
        }
        return localLog
    }

    /// Every offset below this is durable: the local log's durable end, or the shared log's (its
    /// end as this node last folded it when the log cannot be asked).
    public var durableEnd: UInt64 {
        guard let shared else { return log.durableEnd }
        return (try? shared.log.durableEndOffset()) ?? shared.appliedEnd
    }

    /// How the registry was rebuilt at start (which snapshot, how many records after it).
    public let startReport: RegistryStartReport
    private let startFold: Mutex<RegistryFold?>

    /// The fold the registry was rebuilt with, once: the snapshotter continues from it.
    package func takeStartFold() -> RegistryFold? { startFold.withLock { $0.take() } }

    /// Adds a component's health and metrics to `/healthz` and `/metrics`.
    public func addStatusSource(_ source: any StatusSource) { statusSources.add(source) }

    /// A copy of the registry, for tests and admin listings.
    public var registrySnapshot: Registry { registry.read { $0.registry } }
    /// A device's push registrations now, for the push channels (Push's `PushTokenSource`).
    public func pushRegistrations(deviceID: UInt64) -> [(
        key: Registry.PushKey, registration: Registry.PushRegistration
    )] {
        registry.read { $0.registry.pushRegistrations(deviceID: deviceID) }
    }
    /// The registration of one push token, or nil once it is invalidated or replaced.
    public func pushRegistration(provider: String, token: String) -> Registry.PushRegistration? {
        registry.read { $0.registry.pushTokens[Registry.PushKey(provider: provider, token: token)] }
    }

    // MARK: appending

    /// Appends and, once durable, applies the event: the one way the server changes its registry.
    package func appendAndApply(_ event: Event, receivedAtMicros: Int64) throws(APIError) -> UInt64 {
        let encoded = EventCodec.encode(event, receivedAtMicros: receivedAtMicros)
        if let shared { return try appendShared(event, encoded, shared) }
        let offset = try append(encoded)
        registry.write { $0.registry.apply(event, offset: offset) }
        return offset
    }

    package func append(_ encoded: EncodedEvent) throws(APIError) -> UInt64 {
        let start = monotonicMicros()
        do {
            if let shared {
                let messageID =
                    Self.batchMessageID(encoded.header)
                    ?? SharedRegistry.messageID(encoded, decidedAt: shared.appliedEnd)
                let offset = try shared.log.appendShared(encoded, messageID: messageID).offset
                appendSucceeded(startMicros: start)
                return offset
            }
            let offset = try log.append(encoded)
            appendSucceeded(startMicros: start)
            return offset
        } catch {
            throw appendFailed(error)
        }
    }

    /// Appends without blocking; `completion` runs once the record is durable (or failed), on the
    /// thread that led its group commit. `messageID`: on a shared log, the record's idempotency
    /// key when it has one of its own (`SharedRegistry.endMessageID`, `placeMessageID`); the local log
    /// has no use for it.
    package func append(
        _ encoded: EncodedEvent, messageID: String? = nil,
        completion: @escaping @Sendable (Result<UInt64, APIError>) -> Void
    ) {
        if shared != nil {
            return appendReportingDuplicates(encoded, messageID: messageID) { completion($0.map(\.offset)) }
        }
        let start = monotonicMicros()
        log.append(encoded) { [self] result in
            switch result {
            case .success(let offset):
                appendSucceeded(startMicros: start)
                completion(.success(offset))
            case .failure(let error):
                completion(.failure(appendFailed(error)))
            }
        }
    }

    /// `append(_:completion:)` that also says whether the log already held the record: on a
    /// shared log, a batch another node stored within JetStream's duplicate window (its Msg-Id is
    /// the batch's); on the local log, never (the registry's recent batches answer those).
    package func appendReportingDuplicates(
        _ encoded: EncodedEvent, messageID: String? = nil,
        completion: @escaping @Sendable (Result<SharedAppend, APIError>) -> Void
    ) {
        let start = monotonicMicros()
        guard let shared else {
            return append(encoded) { completion($0.map { SharedAppend(offset: $0, duplicate: false) }) }
        }
        let messageID =
            Self.batchMessageID(encoded.header) ?? messageID
            ?? SharedRegistry.messageID(encoded, decidedAt: shared.appliedEnd)
        shared.log.appendSharedLater(encoded, messageID: messageID) { [self] result in
            switch result {
            case .success(let appended):
                appendSucceeded(startMicros: start)
                completion(.success(appended))
            case .failure(let error):
                completion(.failure(appendFailed(error)))
            }
        }
    }

    /// A registry change on a shared log (SharedRegistry.swift): appended with its Msg-Id (the id
    /// it takes, for a new user or device), then folded by the follower, which this waits for so
    /// that the caller's next request here sees it. A new id another node took first is a
    /// `registryConflict`, which `mutations` answers by deciding again.
    private func appendShared(_ event: Event, _ encoded: EncodedEvent, _ shared: SharedRegistry)
        throws(APIError) -> UInt64
    {
        let start = monotonicMicros()
        let claim = newID(event, shared)
        let appended: SharedAppend
        do {
            appended = try shared.log.appendShared(
                encoded,
                messageID: claim ?? SharedRegistry.endMessageID(event)
                    ?? SharedRegistry.messageID(encoded, decidedAt: shared.appliedEnd))
        } catch {
            throw appendFailed(error)
        }
        appendSucceeded(startMicros: start)
        if !shared.waitApplied(appended.offset + 1, waitMillisMax: shared.limits.ownChangeWaitMillisMax) {
            StructuredLog.error(
                "registry_follower_behind",
                ["offset": .int(Int64(appended.offset)), "applied_end": .int(Int64(shared.appliedEnd))])
        }
        if let claim, appended.duplicate, !holds(event) {
            StructuredLog.info(
                "registry_conflict", ["id": .string(claim), "offset": .int(Int64(appended.offset))])
            throw APIError(
                status: 503, code: .registryConflict,
                message:
                    "other servers took the new id at the same moment, again and again; nothing was stored, send the request again"
            )
        }
        return appended.offset
    }

    /// The Msg-Id of a change that takes a new id (rule 2 of SharedRegistry.swift), nil for
    /// others. "New" by the ids free when the decision began, never by the live registry: the
    /// follower may already hold another node's record with the same id.
    private func newID(_ event: Event, _ shared: SharedRegistry) -> String? {
        switch event {
        case .userCreated(let created) where created.userID >= shared.decisionFreeIDs.user:
            "id-user-\(created.userID)"
        case .deviceEnrolled(let enrolled) where enrolled.deviceID >= shared.decisionFreeIDs.device:
            "id-device-\(enrolled.deviceID)"
        case .geofenceDefined(let defined) where defined.geofenceID >= shared.decisionFreeIDs.geofence:
            "id-geofence-\(defined.geofenceID)"
        default: nil
        }
    }

    /// Whether the registry holds `event`'s user, device or geofence as this change made it: after
    /// a duplicate, whether the record with its id is this change (a retry of this node's own
    /// append) or another node's. Two identical definitions of one owner's fence, decided at the
    /// same moment through two nodes, are one fence: nothing tells them apart, as for a retry.
    private func holds(_ event: Event) -> Bool {
        registry.read { state in
            switch event {
            case .userCreated(let created):
                state.registry.users[created.userID]?.name == created.name
                    && state.registry.principal(tokenHash: created.tokenHash) == .user(created.userID)
            case .deviceEnrolled(let enrolled):
                state.registry.devices[enrolled.deviceID].map {
                    $0.userID == enrolled.userID && $0.uuid == enrolled.deviceUUID
                } ?? false
            case .geofenceDefined(let defined):
                state.registry.geofences.fences[defined.geofenceID] == defined
            default: true
            }
        }
    }

    /// The Msg-Id of a record with a batch id: the one JetStream's `append(batch:)` gives it too.
    static func batchMessageID(_ header: RecordHeader) -> String? {
        header.idempotencyKey == .zero ? nil : "d\(header.deviceKey)-\(header.idempotencyKey)"
    }

    /// The Msg-Id of the `index`th place (region transition, waypoints) of a request whose fix
    /// batch is `batchID`: derived from the request as the batch id is, so the same request
    /// appended through two nodes (an OwnTracks MQTT message every subscribed node receives, a
    /// retry through another node) stores its places once, as its batch.
    package static func placeMessageID(deviceID: UInt64, batchID: UUID128, index: Int) -> String {
        "d\(deviceID)-\(batchID)-p\(index)"
    }

    private func appendSucceeded(startMicros: Int64) {
        appendObserver(monotonicMicros() - startMicros)
        logFailing.store(false, ordering: .relaxed)
    }

    private func appendFailed(_ error: any Error) -> APIError {
        logFailing.store(true, ordering: .relaxed)
        StructuredLog.error("append_failed", ["error": .string("\(error)")])
        return APIError(
            status: 503, code: .logUnavailable,
            message:
                "the server could not store the request durably (\(error)); nothing was stored, send it again later"
        )
    }

    // MARK: users (admin)

    public struct CreatedUser: Sendable {
        public var userID: UInt64
        public var token: String
        public var offset: UInt64
    }

    /// Creates a user and returns its API token; only the token's SHA-256 is stored.
    public func createUser(name: String, role: Role) throws(APIError) -> CreatedUser {
        try checkText(name, field: "name", allowEmpty: false)
        try NameRules.check(name, field: "name")
        try NameRules.checkTrimmed(name, field: "name")
        return try mutations.withLock { _ throws(APIError) -> CreatedUser in
            let (existing, userID) = registry.read {
                ($0.registry.user(named: name), $0.registry.nextUserID)
            }
            guard existing == nil else {
                throw APIError(
                    status: 409, code: .userExists,
                    message: "a user named '\(name)' exists already; choose another name")
            }
            let token = Token.generate()
            let offset = try appendAndApply(
                .userCreated(
                    UserCreated(
                        userID: userID, name: name, role: role, tokenHash: SHA256.hash(Array(token.utf8)))),
                receivedAtMicros: clockMicros())
            StructuredLog.info(
                "user_created", ["user_id": .int(Int64(userID)), "admin": .bool(role == .admin)])
            return CreatedUser(userID: userID, token: token, offset: offset)
        }
    }

    // MARK: authentication

    /// Who sent `request`: a bearer token (user or device) or, without an Authorization header, the
    /// `findmy_session` cookie of a login, which stands for its user exactly like a user token and
    /// brings its session's CSRF token along. The gate calls this once per request and hands the
    /// result to the handler (`GateCaller`): the one SHA-256 of the request's credential.
    package func resolveCaller(_ request: HTTPRequest) throws(APIError) -> GateCaller {
        guard let header = request.headers["Authorization"] else {
            if let session = sessionCookie(request) {
                guard let found = sessions.user(token: session, nowMicros: clockMicros()) else {
                    throw APIError.sessionEnded
                }
                return GateCaller(principal: .user(found.userID), sessionCSRFToken: found.csrfToken)
            }
            throw APIError(
                status: 401, code: .missingToken,
                message: "send Authorization: Bearer <token>, or log in with POST /login for a session cookie"
            )
        }
        guard header.count > 7, header.prefix(7).lowercased() == "bearer " else {
            throw APIError(
                status: 401, code: .missingToken,
                message: "the Authorization header must be 'Bearer <token>'")
        }
        let token = header.dropFirst(7).trimmingSpaces
        let hash = sessions.lookups.hash(token)
        guard let principal = lookUpAfterCatchUp({ $0.registry.principal(tokenHash: hash) }) else {
            throw APIError.unknownToken
        }
        return GateCaller(principal: principal)
    }

    /// `find` on the registry; on a shared log, when it finds nothing, once more after this node
    /// has caught up with the log (a token made through another node a moment ago).
    package func lookUpAfterCatchUp<T>(_ find: (RegistryState) -> T?) -> T? {
        if let found = registry.read(find) { return found }
        guard let shared, shared.catchUp() else { return nil }
        return registry.read(find)
    }

    /// The user who enrolled `deviceID`, or nil for a device the log does not know. The registry is
    /// ahead of the projection: a device may be known here before its rows reach PostgreSQL.
    public func deviceOwner(_ deviceID: UInt64) -> UInt64? {
        registry.read { $0.registry.liveDevice(deviceID)?.userID }
    }

    /// Whether `reader` may read `deviceID`'s locations now, and who shared it: the registry's rule
    /// (`Registry.visibility`) at the server's clock.
    public func visibility(of deviceID: UInt64, to reader: UInt64) -> Registry.VisibleDevice? {
        let now = clockMicros()
        return registry.read { $0.registry.visibility(of: deviceID, to: reader, atMicros: now) }
    }

    /// Every device `reader` may read now, by id.
    public func visibleDevices(to reader: UInt64) -> [Registry.VisibleDevice] {
        let now = clockMicros()
        return registry.read { $0.registry.visibleDevices(to: reader, atMicros: now) }
    }

    /// The devices of `fence` whose movements its owner may be shown now: the fence's list, by the
    /// registry's rule. Every view derived from a fence (its transitions, its delivery log) asks this.
    public func visibleDevices(of fence: GeofenceDefined) -> [UInt64] {
        let now = clockMicros()
        return registry.read { state in
            fence.deviceIDs.filter {
                state.registry.visibility(of: $0, to: fence.ownerUserID, atMicros: now) != nil
            }
        }
    }

    public func userName(_ userID: UInt64) -> String? { registry.read { $0.registry.users[userID]?.name } }

    package func checkText(_ text: String, field: String, allowEmpty: Bool) throws(APIError) {
        guard allowEmpty || !text.isEmpty else {
            throw .badRequest(.invalidField, "\(field) must not be empty")
        }
        guard text.utf8.count <= limits.textBytesMax else {
            throw .badRequest(.invalidField, "\(field) is longer than \(limits.textBytesMax) bytes")
        }
        guard !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .badRequest(.invalidField, "\(field) must not contain control characters")
        }
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs. On the UTF-8 view: this runs on every request,
    /// and a Character-based version was 15 % of the server's CPU in a profile.
    package var trimmingSpaces: String {
        let bytes = utf8
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }) else { return "" }
        let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 })!
        return String(self[first...last])
    }
}

/// Parses a request body that must be a JSON object with only `allowed` members.
package func parseObject(_ body: [UInt8], allowed: Set<String>) throws(APIError) -> JSONObject {
    let document: JSONValue
    do {
        document = try JSONParser.parse(body)
    } catch {
        throw .badRequest(.malformedJson, "the body is not valid JSON: \(error.description)")
    }
    guard case .object(let object) = document else {
        throw .badRequest(.wrongType, "the body must be a JSON object, found \(document.typeName)")
    }
    do {
        try object.checkKeys(allowed: allowed)
    } catch {
        throw .badRequest(.unknownField, "\(error.pathDescription): \(error.message)")
    }
    return object
}

/// Reads a member with a typed getter, turning its error into a 400 that names the member.
package func field<T>(_ read: () throws(JSONAccessError) -> T) throws(APIError) -> T {
    do {
        return try read()
    } catch {
        let code: APIError.Code = error.code == .missingKey ? .missingField : .wrongType
        throw .badRequest(code, "\(error.pathDescription): \(error.message)")
    }
}
