import Core
import Crypto
import Events
import HTTP
import JSON
import Synchronization
import Threads

/// Who may do what: sessions, passwords and roles, the gate of every route, and the account
/// routes, over the registry `store` folds from the log (Core's `RegistryStore`: the registry,
/// its locks and the one append path). Identity changes (a user created, a password set, a token
/// rotated, a share) are appended and applied through the store like every other event.
/// `IngestService` holds one and uses its registry for enrolment and the report path's device tokens.
public final class IdentityService: Sendable {
    /// The registry, its locks and the append path.
    public let store: RegistryStore
    public let limits: IdentityLimits
    package let statusSources = StatusSources()
    let sessions: SessionStore
    /// Apps' Basic headers already decoded (`appDeviceID`).
    let basicCredentials = BasicCredentialsMemo()
    let doorLimits: DoorLimits
    let passwordChecksInFlight = Atomic<Int>(0)
    /// The web panel's answer to form posts on `/login` and `/logout` (`answerLoginForms`).
    let loginForms = Mutex<(any PanelLoginForms)?>(nil)

    /// Rebuilds the registry from the log: from the newest valid snapshot of `snapshots` and the
    /// records after it, or from every durable record when there is none (docs/snapshots.md).
    /// `appendObserver` is told how long each durable append took (the ingest metrics' histogram).
    public init(
        log: LogWriter, limits: IdentityLimits = IdentityLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        appendObserver: @escaping @Sendable (_ micros: Int64) -> Void = { _ in },
        snapshots: RegistrySnapshotStore? = nil
    ) throws {
        store = try RegistryStore(
            log: log, recentBatchesPerDeviceMax: limits.recentBatchesPerDeviceMax, clockMicros: clockMicros,
            appendObserver: appendObserver, notes: Self.logNote, snapshots: snapshots)
        self.limits = limits
        sessions = SessionStore(limits: limits)
        doorLimits = DoorLimits(limits)
    }

    /// An ingest node of a shared log (`RegistryStore.init(shared:)`).
    public init(
        shared: SharedRegistry, limits: IdentityLimits = IdentityLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        appendObserver: @escaping @Sendable (_ micros: Int64) -> Void = { _ in },
        snapshots: RegistrySnapshotStore? = nil, snapshotLog: (any SnapshotSharedLog)? = nil
    ) {
        store = RegistryStore(
            shared: shared, recentBatchesPerDeviceMax: limits.recentBatchesPerDeviceMax,
            clockMicros: clockMicros, appendObserver: appendObserver, notes: Self.logNote,
            snapshots: snapshots, snapshotLog: snapshotLog)
        self.limits = limits
        sessions = SessionStore(limits: limits)
        doorLimits = DoorLimits(limits)
    }

    /// The store's notes as structured log lines.
    @Sendable static func logNote(_ note: StoreNote) {
        switch note {
        case .appendFailed(let error):
            StructuredLog.error("append_failed", ["error": .string(error)])
        case .followerBehind(let offset, let appliedEnd):
            StructuredLog.error(
                "registry_follower_behind",
                ["offset": .int(Int64(offset)), "applied_end": .int(Int64(appliedEnd))])
        case .registryConflict(let id, let offset):
            StructuredLog.info("registry_conflict", ["id": .string(id), "offset": .int(Int64(offset))])
        case .commandAnswered(let deviceID, let commandID):
            StructuredLog.info(
                "command_answered",
                ["device_id": .int(Int64(deviceID)), "command_id": .string(commandID.description)])
        }
    }

    package var clockMicros: @Sendable () -> Int64 { store.clockMicros }

    /// Adds a component's health and metrics to `/healthz` and `/metrics`.
    public func addStatusSource(_ source: any StatusSource) { statusSources.add(source) }

    /// A copy of the registry, for tests and admin listings.
    public var registrySnapshot: Registry { store.registrySnapshot }
    /// A device's push registrations now, for the push channels (Push's `PushTokenSource`).
    public func pushRegistrations(deviceID: UInt64) -> [(
        key: Registry.PushKey, registration: Registry.PushRegistration
    )] {
        store.registry.read { $0.registry.pushRegistrations(deviceID: deviceID) }
    }
    /// The registration of one push token, or nil once it is invalidated or replaced.
    public func pushRegistration(provider: String, token: String) -> Registry.PushRegistration? {
        store.registry.read { $0.registry.pushTokens[Registry.PushKey(provider: provider, token: token)] }
    }

    /// The store's `appendAndApply` for a request: a failed append is answered with its 503.
    package func appendAndApply(_ event: Event, receivedAtMicros: Int64) throws(APIError) -> UInt64 {
        do {
            return try store.appendAndApply(event, receivedAtMicros: receivedAtMicros)
        } catch {
            throw APIError(error)
        }
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
        return try store.mutations.withLock { _ throws(APIError) -> CreatedUser in
            let (existing, userID) = store.registry.read {
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
        guard let principal = store.lookUpAfterCatchUp({ $0.registry.principal(tokenHash: hash) }) else {
            throw APIError.unknownToken
        }
        var caller = GateCaller(principal: principal)
        caller.tokenHash = hash
        return caller
    }

    /// The user who enrolled `deviceID`, or nil for a device the log does not know. The registry is
    /// ahead of the projection: a device may be known here before its rows reach PostgreSQL.
    public func deviceOwner(_ deviceID: UInt64) -> UInt64? {
        store.registry.read { $0.registry.liveDevice(deviceID)?.userID }
    }

    /// Whether `reader` may read `deviceID`'s locations now, and who shared it: the registry's rule
    /// (`Registry.visibility`) at the server's clock.
    public func visibility(of deviceID: UInt64, to reader: UInt64) -> Registry.VisibleDevice? {
        let now = clockMicros()
        return store.registry.read { $0.registry.visibility(of: deviceID, to: reader, atMicros: now) }
    }

    /// Every device `reader` may read now, by id.
    public func visibleDevices(to reader: UInt64) -> [Registry.VisibleDevice] {
        let now = clockMicros()
        return store.registry.read { $0.registry.visibleDevices(to: reader, atMicros: now) }
    }

    /// The devices of `fence` whose movements its owner may be shown now: the fence's list, by the
    /// registry's rule. Every view derived from a fence (its transitions, its delivery log) asks this.
    public func visibleDevices(of fence: GeofenceDefined) -> [UInt64] {
        let now = clockMicros()
        return store.registry.read { state in
            fence.deviceIDs.filter {
                state.registry.visibility(of: $0, to: fence.ownerUserID, atMicros: now) != nil
            }
        }
    }

    public func userName(_ userID: UInt64) -> String? {
        store.registry.read { $0.registry.users[userID]?.name }
    }

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
