import Crypto
import HTTP
import Synchronization

/// Login sessions of the web panel: ephemeral server state, not events. Only the SHA-256 of a
/// session cookie is kept, in memory; a restart ends every session (docs/privacy.md).
///
/// A session ends when unused for `sessionIdleSecondsMax`, `sessionAgeSecondsMax` after its login,
/// at logout, and when its user's password changes.
final class SessionStore: Sendable {
    struct Session: Sendable {
        var userID: UInt64
        var createdAtMicros: Int64
        var lastUsedAtMicros: Int64
        /// The web panel's CSRF token of this session: every panel form carries it, and a form post
        /// without the session's own token is refused. Random, so it tells nothing about the cookie.
        var csrfToken: String
    }

    let idleMicros: Int64
    let ageMicros: Int64
    let sessionsMax: Int
    private let sessions = Mutex<[[UInt8]: Session]>([:])
    /// Every lookup of a credential, bearer tokens' included (`IdentityService.principal`).
    let lookups = CredentialLookups()

    init(limits: IdentityLimits) {
        idleMicros = limits.sessionIdleMicros
        ageMicros = limits.sessionAgeMicros
        sessionsMax = limits.sessionsMax
        precondition(idleMicros > 0 && ageMicros > 0 && sessionsMax > 0)
    }

    /// A new session for `userID`; returns the cookie value (256 random bits), shown only to the client.
    func create(userID: UInt64, nowMicros: Int64) -> String {
        let token = Token.generate()
        sessions.withLock { sessions in
            if sessions.count >= sessionsMax {
                sessions = sessions.filter { isLive($0.value, nowMicros) }
            }
            if sessions.count >= sessionsMax,
                let oldest = sessions.min(by: { $0.value.lastUsedAtMicros < $1.value.lastUsedAtMicros })
            {
                sessions[oldest.key] = nil
            }
            sessions[SHA256.hash(Array(token.utf8))] = Session(
                userID: userID, createdAtMicros: nowMicros, lastUsedAtMicros: nowMicros,
                csrfToken: Token.generate())
        }
        return token
    }

    /// The user of a live session and its CSRF token, marking it used; nil (and forgotten) when it
    /// expired or is unknown.
    func user(token: String, nowMicros: Int64) -> (userID: UInt64, csrfToken: String)? {
        let hash = lookups.hash(token)
        return sessions.withLock { sessions in
            guard var session = sessions[hash] else { return nil }
            guard isLive(session, nowMicros) else {
                sessions[hash] = nil
                return nil
            }
            session.lastUsedAtMicros = nowMicros
            sessions[hash] = session
            return (session.userID, session.csrfToken)
        }
    }

    /// The CSRF token of a live session, without marking it used; nil when it expired or is unknown.
    func csrfToken(token: String, nowMicros: Int64) -> String? {
        csrfToken(hash: lookups.hash(token), nowMicros: nowMicros)
    }

    /// `csrfToken(token:nowMicros:)` for a session cookie already hashed (`lookups.hash`).
    func csrfToken(hash: [UInt8], nowMicros: Int64) -> String? {
        sessions.withLock { sessions in
            guard let session = sessions[hash], isLive(session, nowMicros) else { return nil }
            return session.csrfToken
        }
    }

    func end(token: String) {
        end(hash: SHA256.hash(Array(token.utf8)))
    }

    /// Ends the session whose cookie hashed to `hash` (`lookups.hash`).
    func end(hash: [UInt8]) {
        sessions.withLock { _ = $0.removeValue(forKey: hash) }
    }

    /// Ends every session of `userID` but the one whose cookie is `kept`.
    func endAll(userID: UInt64, except kept: String? = nil) {
        let keptHash = kept.map { SHA256.hash(Array($0.utf8)) }
        sessions.withLock { sessions in
            sessions = sessions.filter { $0.value.userID != userID || $0.key == keptHash }
        }
    }

    private func isLive(_ session: Session, _ nowMicros: Int64) -> Bool {
        nowMicros - session.lastUsedAtMicros < idleMicros && nowMicros - session.createdAtMicros < ageMicros
    }
}

/// At most `eventsMax` events per key (a user name, a client address) in any `windowMicros`: a
/// sliding window of event times per key, on the caller's clock.
///
/// Memory: at most `keysMax` keys. Keys whose window has passed are dropped when the table is full
/// (at most once a second, so a full table of live keys does not cost a sweep per call); a new key
/// that still finds it full is not counted. That lets a client with more than `keysMax` addresses
/// past a per-address limit, never past the bound on concurrent password checks.
final class SlidingWindowLimit: Sendable {
    let eventsMax: Int
    let windowMicros: Int64
    let keysMax: Int
    static let pruneIntervalMicros: Int64 = 1_000_000

    private struct Entry {
        /// Oldest first; at most `eventsMax`, all within the window when last trimmed.
        var times: [Int64]
        /// When the last refusal was reported as the first of its window (for a log line a window).
        var refusalReportedAtMicros: Int64?
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var prunedAtMicros: Int64 = 0
    }

    private let state = Mutex(State())
    /// Keys held, readable without the lock: a check on a key-less table (the usual case of the
    /// failed-authentication limit, consulted on every authenticated request) costs one load.
    private let keyCount = Atomic<Int>(0)

    enum Decision: Equatable {
        case allowed
        /// `firstInWindow`: the first refusal for this key since its window last reset, for a
        /// log line once a window rather than once a request.
        case refused(retryAfterSeconds: Int, firstInWindow: Bool)
    }

    init(eventsMax: Int, windowMicros: Int64 = 60_000_000, keysMax: Int) {
        precondition(eventsMax > 0 && windowMicros > 0 && keysMax > 0)
        self.eventsMax = eventsMax
        self.windowMicros = windowMicros
        self.keysMax = keysMax
    }

    /// True when no key has an event (it may have lately, for a caller that read this just
    /// before a `record`: a check racing the first failure may let one request through).
    var isEmpty: Bool { keyCount.load(ordering: .relaxed) == 0 }

    /// Whether `key` is under its limit now, recording nothing.
    func check(_ key: String, nowMicros: Int64) -> Decision {
        guard !isEmpty else { return .allowed }
        return state.withLock { state in decide(key, nowMicros, &state) }
    }

    /// Records an event for `key` if it is under its limit; an event over it is not recorded.
    func admit(_ key: String, nowMicros: Int64) -> Decision {
        state.withLock { state in
            let decision = decide(key, nowMicros, &state)
            if decision == .allowed { add(key, nowMicros, &state) }
            return decision
        }
    }

    /// Records an event for `key` whatever its count.
    func record(_ key: String, nowMicros: Int64) {
        state.withLock { state in add(key, nowMicros, &state) }
    }

    private func decide(_ key: String, _ nowMicros: Int64, _ state: inout State) -> Decision {
        sweep(nowMicros, everyMicros: windowMicros, &state)
        guard var entry = state.entries[key] else { return .allowed }
        let since = nowMicros - windowMicros
        entry.times.removeAll { $0 <= since }
        defer { state.entries[key] = entry }
        guard entry.times.count >= eventsMax else { return .allowed }
        // Rounded up: answering 0 would invite a retry that is still refused.
        let retryAfterSeconds = Int((entry.times[0] - since + 999_999) / 1_000_000)
        let first = entry.refusalReportedAtMicros.map { $0 <= since } ?? true
        if first { entry.refusalReportedAtMicros = nowMicros }
        return .refused(retryAfterSeconds: max(1, retryAfterSeconds), firstInWindow: first)
    }

    private func add(_ key: String, _ nowMicros: Int64, _ state: inout State) {
        if state.entries[key] == nil {
            if state.entries.count >= keysMax {
                sweep(nowMicros, everyMicros: Self.pruneIntervalMicros, &state)
            }
            guard state.entries.count < keysMax else { return }
            state.entries[key] = Entry(times: [])
        }
        state.entries[key]!.times.append(nowMicros)
        if state.entries[key]!.times.count > eventsMax { state.entries[key]!.times.removeFirst() }
        keyCount.store(state.entries.count, ordering: .relaxed)
    }

    /// Drops the keys without an event in the window, at most once per `everyMicros`: once a
    /// window on the way of every check (so a table that only held old failures becomes empty,
    /// and `isEmpty` spares the callers the lock again), once a second when the table is full.
    private func sweep(_ nowMicros: Int64, everyMicros: Int64, _ state: inout State) {
        guard nowMicros - state.prunedAtMicros >= everyMicros else { return }
        let since = nowMicros - windowMicros
        state.entries = state.entries.filter { $0.value.times.last.map { $0 > since } ?? false }
        state.prunedAtMicros = nowMicros
        keyCount.store(state.entries.count, ordering: .relaxed)
    }
}

/// Failed logins per name, each with the client address it came from: a name is refused once
/// its last `failuresMax` failures within the window came from at least `addressesMin` distinct
/// addresses. One address alone never trips it, so it cannot lock the real user out from
/// elsewhere; that address is held by the limit per name and address instead.
///
/// Memory: at most `keysMax` names of at most `failuresMax` failures, kept as `SlidingWindowLimit`
/// keeps its keys.
final class NameFailureLimit: Sendable {
    let failuresMax: Int
    let addressesMin: Int
    let windowMicros: Int64
    let keysMax: Int

    private struct Failure {
        var atMicros: Int64
        var address: String
    }

    private struct Entry {
        /// Oldest first; at most `failuresMax`.
        var failures: [Failure] = []
        var refusalReportedAtMicros: Int64?
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var prunedAtMicros: Int64 = 0
    }

    private let state = Mutex(State())

    init(failuresMax: Int, addressesMin: Int, windowMicros: Int64 = 60_000_000, keysMax: Int) {
        precondition(failuresMax > 0 && addressesMin > 0 && windowMicros > 0 && keysMax > 0)
        self.failuresMax = failuresMax
        self.addressesMin = addressesMin
        self.windowMicros = windowMicros
        self.keysMax = keysMax
    }

    /// Whether `name` may be tried now, recording nothing.
    func check(_ name: String, nowMicros: Int64) -> SlidingWindowLimit.Decision {
        state.withLock { state in
            sweep(nowMicros, everyMicros: windowMicros, &state)
            guard var entry = state.entries[name] else { return .allowed }
            let since = nowMicros - windowMicros
            entry.failures.removeAll { $0.atMicros <= since }
            defer { state.entries[name] = entry }
            guard entry.failures.count >= failuresMax,
                Set(entry.failures.map(\.address)).count >= addressesMin
            else { return .allowed }
            // The refusal ends when the oldest failure leaves the window: then fewer than
            // `failuresMax` remain. Rounded up, as `SlidingWindowLimit` does.
            let retryAfterSeconds = Int((entry.failures[0].atMicros - since + 999_999) / 1_000_000)
            let first = entry.refusalReportedAtMicros.map { $0 <= since } ?? true
            if first { entry.refusalReportedAtMicros = nowMicros }
            return .refused(retryAfterSeconds: max(1, retryAfterSeconds), firstInWindow: first)
        }
    }

    /// Records a failed login for `name` from `address`.
    func record(_ name: String, address: String, nowMicros: Int64) {
        state.withLock { state in
            if state.entries[name] == nil {
                if state.entries.count >= keysMax {
                    sweep(nowMicros, everyMicros: SlidingWindowLimit.pruneIntervalMicros, &state)
                }
                guard state.entries.count < keysMax else { return }
                state.entries[name] = Entry()
            }
            state.entries[name]!.failures.append(Failure(atMicros: nowMicros, address: address))
            if state.entries[name]!.failures.count > failuresMax {
                state.entries[name]!.failures.removeFirst()
            }
        }
    }

    private func sweep(_ nowMicros: Int64, everyMicros: Int64, _ state: inout State) {
        guard nowMicros - state.prunedAtMicros >= everyMicros else { return }
        let since = nowMicros - windowMicros
        state.entries = state.entries.filter { $0.value.failures.last.map { $0.atMicros > since } ?? false }
        state.prunedAtMicros = nowMicros
    }
}

/// The limits at the door, each on the service's clock: login attempts per name and client
/// address (right or wrong), failed logins per name from several addresses, login attempts per
/// client address, and failed authentications (an unknown token or an ended session) per client
/// address. docs/privacy.md, "Logins and sessions", says what each is for.
final class DoorLimits: Sendable {
    let loginsPerNameAndAddress: SlidingWindowLimit
    let loginFailuresPerName: NameFailureLimit
    let loginsPerAddress: SlidingWindowLimit
    let authFailuresPerAddress: SlidingWindowLimit

    init(_ limits: IdentityLimits) {
        // A name and address pair is a key too: bounded like addresses.
        loginsPerNameAndAddress = SlidingWindowLimit(
            eventsMax: limits.loginAttemptsPerMinuteMax, keysMax: limits.addressesTrackedMax)
        loginFailuresPerName = NameFailureLimit(
            failuresMax: limits.loginFailuresPerNamePerMinuteMax,
            addressesMin: limits.loginFailureAddressesPerNameMin, keysMax: limits.addressesTrackedMax)
        loginsPerAddress = SlidingWindowLimit(
            eventsMax: limits.loginAttemptsPerAddressPerMinuteMax, keysMax: limits.addressesTrackedMax)
        authFailuresPerAddress = SlidingWindowLimit(
            eventsMax: limits.authFailuresPerAddressPerMinuteMax, keysMax: limits.addressesTrackedMax)
    }
}

/// The IP address of `"ip:port"` or `"[ipv6]:port"` (a client opens connections from many
/// ports), `unix` for the admin socket.
func peerAddress(_ remoteAddress: String) -> String {
    if remoteAddress.hasPrefix("["), let close = remoteAddress.firstIndex(of: "]") {
        return String(remoteAddress[remoteAddress.index(after: remoteAddress.startIndex)..<close])
    }
    guard let colon = remoteAddress.lastIndex(of: ":") else { return remoteAddress }
    return String(remoteAddress[..<colon])
}

extension IdentityService {
    /// The client address the per-address limits count under and the log names: the peer's IP
    /// address, or, when the peer is one of `trustedProxies`, the last `X-Forwarded-For` entry,
    /// the one that proxy appended (a client can write the ones before it). Without this, behind
    /// a proxy every client would share the proxy's address, and one of them could exhaust the
    /// limits for all.
    func clientAddress(_ request: HTTPRequest) -> String {
        let peer = peerAddress(request.remoteAddress)
        guard limits.trustedProxies.contains(peer),
            let forwarded = request.headers.values("X-Forwarded-For").last,
            let last = forwarded.split(separator: ",").last?.trimmingSpaces, !last.isEmpty
        else { return peer }
        // An address is at most 45 characters; a longer entry must not cost memory in the limits.
        return String(last.prefix(64))
    }
}

extension IdentityService {
    static func throttled(_ code: APIError.Code, _ message: String, retryAfterSeconds: Int) -> HTTPResponse {
        var response = APIError(status: 429, code: code, message: message).response
        response.headers.set("Retry-After", "\(retryAfterSeconds)")
        return response
    }

    /// The name as a per-name limit counts it: no user name is longer than `textBytesMax`, and a
    /// longer one must not cost memory in proportion to the body.
    func throttleKey(_ name: String) -> String {
        name.utf8.count <= limits.textBytesMax
            ? name : String(decoding: name.utf8.prefix(limits.textBytesMax), as: UTF8.self)
    }

    /// One of the `passwordChecksConcurrentMax` slots for an Argon2id check (each holds 64 MiB);
    /// nil when all are taken.
    struct PasswordCheckSlot {
        let service: IdentityService
        init?(_ service: IdentityService) {
            guard
                service.passwordChecksInFlight.add(1, ordering: .relaxed).newValue
                    <= service.limits.passwordChecksConcurrentMax
            else {
                service.passwordChecksInFlight.subtract(1, ordering: .relaxed)
                return nil
            }
            self.service = service
        }
        func release() { service.passwordChecksInFlight.subtract(1, ordering: .relaxed) }
    }
}
