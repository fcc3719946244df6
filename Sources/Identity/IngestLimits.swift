/// Every limit ingest enforces, each with its unit last. Defaults and what happens over each limit
/// are in docs/api.md and docs/configuration.md.
public struct IngestLimits: Sendable {
    /// A report with more fixes answers 413 `too_many_fixes`. A phone off-grid for a day at one fix
    /// a minute queues 1,440; the headroom covers a week at that rate.
    public var batchFixesMax = 10_000
    /// A larger request body answers 413 `body_too_large` (enforced by the HTTP server). A fix is
    /// about 250 bytes of JSON, so a full batch is about 2.5 MB.
    public var bodyBytesMax = 8 << 20
    /// A `recorded_at` later than `received_at` by more than this is accepted and flagged
    /// clock-suspect (DESIGN.md, "Time").
    public var clockSkewToleranceSeconds = 300
    /// A fix older than this, counted from the earlier of `recorded_at` and `received_at`, is
    /// rejected as expired: it would be deleted by the retention job anyway.
    public var retentionDays = 30
    /// Batch ids remembered per device for idempotent retries (also across restarts). A retry of
    /// an older batch id is appended again; clients retry within minutes, not hundreds of batches.
    public var recentBatchesPerDeviceMax = 256
    /// Bytes of a device name, model, push token, topic or source.
    public var textBytesMax = 512
    /// Bytes of a push token (an UnifiedPush endpoint is a URL).
    public var pushTokenBytesMax = 4096

    // The fields of a fix (docs/api.md, "Fix rules"). Physical bounds rather than settings, so
    // they are constants: a fix outside them is rejected on its own (`out_of_range`) and the rest of
    // its batch is kept. Every value inside them can be stored, projected and drawn; values from
    // logs written before they existed are drawn without trapping all the same
    // (docs/architecture.md, "Failure containment").

    public static let latitudeDegreesMin = -90.0
    public static let latitudeDegreesMax = 90.0
    public static let longitudeDegreesMin = -180.0
    public static let longitudeDegreesMax = 180.0
    /// Accuracy must be greater than 0 (a radius of 0 claims a certainty no receiver has) and at most
    /// this: 1,000 km covers the coarsest fix anyone sends (a country-sized cell or IP lookup);
    /// beyond it a fix says nothing about where the device is.
    public static let accuracyMetersMax = 1_000_000.0
    /// Below the deepest ocean floor (the Challenger Deep is about -10,935 m).
    public static let altitudeMetersMin = -12_000.0
    /// The Kármán line: higher is space, not a device someone lost.
    public static let altitudeMetersMax = 100_000.0
    public static let speedMetersPerSecondMin = 0.0
    /// About Mach 6: above every aircraft a phone travels in. iOS's -1 ("unknown") is sent as absent.
    public static let speedMetersPerSecondMax = 2_000.0
    public static let headingDegreesMin = 0.0
    /// Exclusive: 360 is 0 and must be sent as 0, so that one direction has one value.
    public static let headingDegreesMax = 360.0
    /// Battery is kept as a whole percentage (a fractional value is rounded).
    public static let batteryPercentMin = 0.0
    public static let batteryPercentMax = 100.0

    // Login and sessions (docs/privacy.md, docs/configuration.md).

    /// A session unused for this long ends; the next request with its cookie gets 401.
    public var sessionIdleSecondsMax = 1_800
    /// A session ends this long after its login, however busy: a stolen cookie does not live forever.
    public var sessionAgeSecondsMax = 43_200
    /// Sessions kept in memory at most; a login past it ends the least recently used one.
    public var sessionsMax = 10_000
    /// Login attempts for one name within a minute (right or wrong); more answer 429. At 5 a
    /// minute an online guesser gets 7,200 guesses a day per name.
    public var loginAttemptsPerMinuteMax = 5
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

    public var retentionMicros: Int64 { Int64(retentionDays) * 86_400 * 1_000_000 }
    public var clockSkewToleranceMicros: Int64 { Int64(clockSkewToleranceSeconds) * 1_000_000 }
}
