/// The limits `IdentityService` enforces, each with its unit last: names, sessions and logins, and
/// how many batch ids the registry remembers per device. The report path's limits are Ingest's
/// (`IngestLimits`, which holds these as `identity`). Defaults are in docs/configuration.md.
public struct IdentityLimits: Sendable {
    /// Batch ids remembered per device for idempotent retries (also across restarts). A retry of
    /// an older batch id is appended again; clients retry within minutes, not hundreds of batches.
    /// An import's chunks are remembered beyond it, all of them (Core's ImportedBatches.swift).
    public var recentBatchesPerDeviceMax = 256
    /// Bytes of a user or device name, model, push token, topic or source.
    public var textBytesMax = 512

    // Login and sessions (docs/privacy.md, docs/configuration.md).

    /// A session unused for this long ends; the next request with its cookie gets 401.
    public var sessionIdleSecondsMax = 1_800
    /// A session ends this long after its login, however busy: a stolen cookie does not live forever.
    public var sessionAgeSecondsMax = 43_200
    /// Sessions kept in memory at most; a login past it ends the least recently used one.
    public var sessionsMax = 10_000
    /// Login attempts for one name from one client address within a minute (right or wrong); more
    /// answer 429 to that address only, so one address guessing a name cannot lock its user out
    /// elsewhere. At 5 a minute one address gets 7,200 guesses a day per name.
    public var loginAttemptsPerMinuteMax = 5
    /// Failed logins for one name within a minute from all addresses together; once that many came
    /// from at least `loginFailureAddressesPerNameMin` addresses, every attempt for the name answers
    /// 429, from anywhere, until the oldest leaves the minute. This bounds guessing spread over
    /// many addresses; one address alone never trips it.
    public var loginFailuresPerNamePerMinuteMax = 10
    /// Distinct client addresses the failures above must come from before they limit the name.
    public var loginFailureAddressesPerNameMin = 3
    /// Login attempts from one client address within a minute, whatever the names; more answer 429
    /// `too_many_attempts_from_address` before any password check, so one client flooding logins
    /// with random names cannot hold the password-check slots.
    public var loginAttemptsPerAddressPerMinuteMax = 20
    /// Requests from one client address within a minute that carried an unknown token or an ended
    /// session (401 `invalid_token`, `invalid_session`); past it every request from that address to
    /// a route that needs credentials answers 429 `too_many_auth_failures` until the minute has passed.
    public var authFailuresPerAddressPerMinuteMax = 30
    /// Client addresses each per-address limit keeps counts for at most (about 100 bytes each); a
    /// new address past it is not counted until older ones leave the window.
    public var addressesTrackedMax = 100_000
    /// Password checks running at once; each holds Argon2id's 64 MiB. More answer 503 with Retry-After.
    public var passwordChecksConcurrentMax = 4
    /// Shortest password `findmy user passwd` accepts, in bytes.
    public var passwordBytesMin = 8
    /// Always mark the session cookie Secure, also on requests that did not arrive over TLS (a proxy
    /// that terminates TLS without sending `X-Forwarded-Proto: https`).
    public var cookieSecure = false
    /// The URL browsers use to reach the server (`https://findmy.example.org`), when a proxy in
    /// front of it sends another `Host` header: a login or a cookie-authenticated API change whose
    /// `Origin` is neither this URL's origin nor the request's `Host` is refused (docs/privacy.md).
    public var publicURL: String?
    /// IP addresses of reverse proxies in front of the server: for a request from one of them, the
    /// client address (per-address limits, log lines) is the last `X-Forwarded-For` entry.
    public var trustedProxies: Set<String> = []

    public init() {}

    public var sessionIdleMicros: Int64 { Int64(sessionIdleSecondsMax) * 1_000_000 }
    public var sessionAgeMicros: Int64 { Int64(sessionAgeSecondsMax) * 1_000_000 }
}
