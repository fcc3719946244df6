import Crypto
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

    init(limits: IngestLimits) {
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

    /// The user of a live session, marking it used; nil (and forgotten) when it expired or is unknown.
    func user(token: String, nowMicros: Int64) -> UInt64? {
        let hash = SHA256.hash(Array(token.utf8))
        return sessions.withLock { sessions in
            guard var session = sessions[hash] else { return nil }
            guard isLive(session, nowMicros) else {
                sessions[hash] = nil
                return nil
            }
            session.lastUsedAtMicros = nowMicros
            sessions[hash] = session
            return session.userID
        }
    }

    /// The CSRF token of a live session, without marking it used; nil when it expired or is unknown.
    func csrfToken(token: String, nowMicros: Int64) -> String? {
        let hash = SHA256.hash(Array(token.utf8))
        return sessions.withLock { sessions in
            guard let session = sessions[hash], isLive(session, nowMicros) else { return nil }
            return session.csrfToken
        }
    }

    func end(token: String) {
        let hash = SHA256.hash(Array(token.utf8))
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

/// At most `loginAttemptsPerMinuteMax` login attempts per name in any 60 s: a sliding window of
/// attempt times. Names unseen for a minute are dropped, so memory follows the recent request rate.
final class LoginThrottle: Sendable {
    let attemptsPerMinuteMax: Int
    static let windowMicros: Int64 = 60_000_000
    private let attempts = Mutex<[String: [Int64]]>([:])

    init(attemptsPerMinuteMax: Int) {
        precondition(attemptsPerMinuteMax > 0)
        self.attemptsPerMinuteMax = attemptsPerMinuteMax
    }

    /// Records an attempt for `name`; nil when allowed, otherwise the seconds until one is.
    func admit(_ name: String, nowMicros: Int64) -> Int? {
        attempts.withLock { attempts in
            let since = nowMicros - Self.windowMicros
            if attempts.count > 1_000 {
                attempts = attempts.filter { $0.value.last.map { $0 > since } ?? false }
            }
            var times = (attempts[name] ?? []).filter { $0 > since }
            guard times.count < attemptsPerMinuteMax else {
                attempts[name] = times
                return Int((times[0] - since) / 1_000_000) + 1
            }
            times.append(nowMicros)
            attempts[name] = times
            return nil
        }
    }
}
