import CLI
import Clients
import Commands
import Compactor
import Events
import Geofences
import HTTP
import HTTPClient
import Identity
import Importer
import Ingest
import Postgres
import Presence
import Projector
import Push
import ReadAPI
import Synchronization
import Threads
import WebPanel

#if canImport(Glibc)
    import Glibc
#endif

// `findmy serve`'s options: the flag table that --help prints (each feature contributes its own
// rows), and the configuration parsed from flags and FINDMY_* variables.
extension ServeCommand {
    /// Every option: the flag, its environment variable, and what it sets. `--help` prints this.
    static let settings: [(flag: String, environment: String, help: String)] =
        [
            (
                "data-dir", "FINDMY_DATA_DIR",
                "data directory: the event log is DIR/log, the admin socket DIR/admin.sock (required)"
            ),
            (
                "listen", "FINDMY_LISTEN",
                "HOST:PORT or unix:/path to serve HTTP on (default 127.0.0.1:8080; port 0 picks one)"
            ),
            ("batch-fixes-max", "FINDMY_BATCH_FIXES_MAX", "most fixes in one report (default 10000)"),
            ("body-bytes-max", "FINDMY_BODY_BYTES_MAX", "largest request body in bytes (default 8388608)"),
            (
                "import-bytes-max", "FINDMY_IMPORT_BYTES_MAX",
                "largest history file uploaded to POST /api/find-my/devices/{id}/imports, in bytes; streamed to DATA_DIR/imports, never held in memory (default 4294967296)"
            ),
            (
                "clock-skew-tolerance-seconds", "FINDMY_CLOCK_SKEW_TOLERANCE_SECONDS",
                "recorded_at this far past received_at is flagged clock-suspect (default 300)"
            ),
            (
                "retention-days", "FINDMY_RETENTION_DAYS",
                "fixes are kept this long (from the earlier of recorded_at and received_at) unless a device or user override says otherwise; older ones are rejected at arrival and deleted by the compactor (default 30)"
            ),
            (
                "recent-batches-per-device-max", "FINDMY_RECENT_BATCHES_PER_DEVICE_MAX",
                "batch ids remembered per device for idempotent retries (default 256)"
            ),
            (
                "connections-max", "FINDMY_CONNECTIONS_MAX",
                "simultaneous HTTP connections (default 512)"
            ),
            (
                "connections-per-address-max", "FINDMY_CONNECTIONS_PER_ADDRESS_MAX",
                "simultaneous HTTP connections from one client address; 0: no limit (default 128)"
            ),
            (
                "request-timeout-seconds", "FINDMY_REQUEST_TIMEOUT_SECONDS",
                "idle seconds before a connection is closed (default 30)"
            ),
            (
                "request-head-seconds-max", "FINDMY_REQUEST_HEAD_SECONDS_MAX",
                "a connection must send a whole request head within this many seconds of opening or of its previous answer (default 30)"
            ),
            (
                "body-bytes-per-second-min", "FINDMY_BODY_BYTES_PER_SECOND_MIN",
                "a request body slower than this on average is cut off (default 512)"
            ),
            (
                "body-rate-grace-seconds", "FINDMY_BODY_RATE_GRACE_SECONDS",
                "seconds a request body may take before its minimum rate applies (default 10)"
            ),
            (
                "event-loop-threads", "FINDMY_EVENT_LOOP_THREADS",
                "HTTP event-loop threads, each serving its share of the connections (default 2)"
            ),
            (
                "blocking-threads-max", "FINDMY_BLOCKING_THREADS_MAX",
                "HTTP handlers that may block (reads, enrolment) running at once (default 64)"
            ),
            (
                "group-commit-delay-micros", "FINDMY_GROUP_COMMIT_DELAY_MICROS",
                "extra wait of a group commit for more appends (default 0: natural batching)"
            ),
            (
                "segment-bytes-max", "FINDMY_SEGMENT_BYTES_MAX",
                "a log segment is sealed and a new one started once it holds this many bytes (default 67108864)"
            ),
            (
                "segment-age-seconds-max", "FINDMY_SEGMENT_AGE_SECONDS_MAX",
                "... or once it is this old at the next append (default 3600)"
            ),
            Database.setting,
            (
                "log", "FINDMY_LOG",
                "where the event log is: local (default: DATA_DIR/log, one machine) or nats://HOST:PORT[,HOST:PORT...] (a NATS JetStream cluster; this process is then a stateless ingest node: no projector, no compactor, no local log; run `findmy projector --log nats://...` as separate processes; docs/scale.md)"
            ),
            (
                "log-partitions", "FINDMY_LOG_PARTITIONS",
                "with --log nats://: the partitions of a stream this node creates (default 8); an existing stream keeps its own count, and a different count given here is refused"
            ),
            (
                "projector", "FINDMY_PROJECTOR",
                "on: fold the log into PostgreSQL inside this process (default); off: ingest only, no database "
                    + "(run `findmy project` beside it); the read API then answers 503 reads_unavailable"
            ),
            (
                "session-idle-seconds-max", "FINDMY_SESSION_IDLE_SECONDS_MAX",
                "a login session unused this long ends (default 1800)"
            ),
            (
                "session-age-seconds-max", "FINDMY_SESSION_AGE_SECONDS_MAX",
                "a login session ends this long after the login, however busy (default 43200)"
            ),
            (
                "login-attempts-per-minute-max", "FINDMY_LOGIN_ATTEMPTS_PER_MINUTE_MAX",
                "login attempts for one user name from one client address within a minute; more answer 429 to that address (default 5)"
            ),
            (
                "login-failures-per-name-per-minute-max", "FINDMY_LOGIN_FAILURES_PER_NAME_PER_MINUTE_MAX",
                "failed logins for one user name within a minute from all addresses; once that many came from several addresses (below), the name answers 429 everywhere (default 10)"
            ),
            (
                "login-failure-addresses-per-name-min", "FINDMY_LOGIN_FAILURE_ADDRESSES_PER_NAME_MIN",
                "distinct client addresses the failed logins above must come from before they limit the name (default 3)"
            ),
            (
                "login-attempts-per-address-per-minute-max",
                "FINDMY_LOGIN_ATTEMPTS_PER_ADDRESS_PER_MINUTE_MAX",
                "login attempts from one client address within a minute, whatever the names; more answer 429 (default 20)"
            ),
            (
                "auth-failures-per-address-per-minute-max", "FINDMY_AUTH_FAILURES_PER_ADDRESS_PER_MINUTE_MAX",
                "requests with an unknown token or an ended session from one client address within a minute; past it that address gets 429 (default 30)"
            ),
            (
                "public-url", "FINDMY_PUBLIC_URL",
                "the URL browsers use to reach the server (https://findmy.example.org), needed when a proxy in front changes the Host header"
            ),
            (
                "trusted-proxy", "FINDMY_TRUSTED_PROXY",
                "comma-separated IP addresses of reverse proxies in front of the server; for their requests the client address is the last X-Forwarded-For entry"
            ),
            (
                "allow-private-targets", "FINDMY_ALLOW_PRIVATE_TARGETS",
                "comma-separated CIDR blocks (192.168.1.0/24,fd00::/8) that webhooks, ntfy topics and UnifiedPush endpoints may reach although they are not public; by default loopback, private, link-local and other non-public addresses are refused"
            ),
            (
                "cookie-secure", "FINDMY_COOKIE_SECURE",
                "on: always mark the session cookie Secure; off (default): only when X-Forwarded-Proto is https"
            ),
            (
                "read-connections-max", "FINDMY_READ_CONNECTIONS_MAX",
                "PostgreSQL connections the read API uses at most (default 8)"
            ),
            (
                "read-after-offset-wait-millis-max", "FINDMY_READ_AFTER_OFFSET_WAIT_MILLIS_MAX",
                "how long a read with after_offset waits for the projection (default 5000)"
            ),
            (
                "device-cache-mb", "FINDMY_DEVICE_CACHE_MB",
                "MiB of devices the read API keeps written as JSON between reads of the devices list; 0: none (default 16)"
            ),
            (
                "projector-window-millis", "FINDMY_PROJECTOR_WINDOW_MILLIS",
                "caught up, the projectors start a transaction at most once per this many milliseconds, so that steady traffic folds in fewer, larger ones; a report after a quiet spell, and a read with after_offset, are folded at once; 0: fold as reports come (default 100)"
            ),
            (
                "heap-trim-millis", "FINDMY_HEAP_TRIM_MILLIS",
                "every this many milliseconds, give the pages of malloc's free blocks back to the system, and free large answers' arrays kept and unused since the last time; 0: never (default 1000)"
            ),
            (
                "tile-url", "FINDMY_TILE_URL",
                "map tile URL template of the web panel ({z}/{x}/{y}, optional {s}); the browser fetches tiles from it (default https://tile.openstreetmap.org/{z}/{x}/{y}.png)"
            ),
            (
                "tile-attribution", "FINDMY_TILE_ATTRIBUTION",
                "the attribution text shown on the map for those tiles (default: © OpenStreetMap contributors)"
            ),
        ] + CommandLimits.settings + CommandStreamLimits.settings + CompactService.settings
        + OwnTracksMQTTService.settings
        + PushProviders.settings
        + HeadscaleOptions.settings
        + GeofenceNotifySetup.settings

    static var help: String {
        var lines = [
            "usage: findmy serve --data-dir DIR [--listen HOST:PORT] [options]",
            "",
            "Runs the server. Prints the URL it listens on as the first line of standard output; logs go to",
            "standard error, one JSON object per line (never coordinates or tokens). SIGTERM or SIGINT: stop",
            "accepting, finish requests in flight, close the log, exit 0.",
            "",
            "options (each also from its environment variable; a flag wins):",
        ]
        for setting in settings {
            lines.append("  --" + setting.flag.padding(32) + setting.environment)
            lines.append("      " + setting.help)
        }
        lines += [
            "",
            "With --log nats://... this process is a stateless ingest node of a JetStream log: it runs no projector",
            "and no compactor; projectors run as separate processes (findmy projector --log nats://...). Given",
            "--database-url too, it serves the read API and the panel from the projection those projectors write there",
            "(or a streaming replica of it); without, reads answer 503 reads_unavailable. See docs/scale.md.",
            "See docs/configuration.md.",
        ]
        return lines.joined(separator: "\n")
    }

    struct Configuration {
        var dataDirectory: String
        var listen: String
        var limits = IngestLimits()
        var http = HTTPServer.Limits()
        var log = LogOptions()
        var databaseURL: String?
        var projector = true
        var readConnectionsMax = 8
        /// How often the heap's free pages go back to the kernel (`HeapTrimmer`); 0: never.
        var heapTrimMillis = 1000
        /// `Projector.Options.coalesceWindowMicros` of both projectors, in milliseconds.
        var projectorWindowMillis = 100
        var read = ReadLimits()
        var compactor = CompactService.Configuration()
        var panel = PanelService.Configuration()
        var mqtt: OwnTracksMQTTService.Configuration?
        var push: PushProviders.Configuration?
        var commands = CommandLimits()
        var commandStreams = CommandStreamLimits()
        var headscale: HeadscaleConfiguration?
        var geofenceNotify = GeofenceNotifySetup.Configuration()
        /// The largest history file an upload may bring (`--import-bytes-max`).
        var importBytesMax = ImportJobs.uploadBytesMaxDefault
        /// Set by `--log nats://`: this process is an ingest node of a JetStream log.
        var nats: IngestNodeConfiguration?
    }

    static func configuration(_ arguments: [String]) throws -> Configuration? {
        let options = try Options(arguments, valued: Set(settings.map(\.flag)), flags: [])
        if options.flag("help") { return nil }
        guard options.positional.isEmpty else {
            throw UsageError("unexpected argument '\(options.positional[0])'")
        }
        var configuration = Configuration(
            // Absolute from here on: the admin socket's address and the embedded cluster's paths
            // are built from it, and a unix socket address must be absolute.
            dataDirectory: LocalFiles.absolutePath(
                try options.required("data-dir", environment: "FINDMY_DATA_DIR")),
            listen: options.value("listen", environment: "FINDMY_LISTEN") ?? "127.0.0.1:8080")
        try readStorage(options, into: &configuration)
        try readAccess(options, into: &configuration.limits)
        try readFeatures(options, into: &configuration)
        return configuration
    }

    /// The ingest limits, the HTTP server's, the log's and the compactor's, and the projection's
    /// database.
    private static func readStorage(_ options: Options, into configuration: inout Configuration)
        throws
    {
        try options.limit(&configuration.limits, \.batchFixesMax, "batch-fixes-max", min: 1)
        try options.limit(&configuration.limits, \.bodyBytesMax, "body-bytes-max", min: 1024)
        try options.limit(&configuration.limits, \.clockSkewToleranceSeconds, "clock-skew-tolerance-seconds")
        try options.limit(&configuration.limits, \.retentionDays, "retention-days", min: 1)
        try options.limit(
            &configuration.limits, \.recentBatchesPerDeviceMax, "recent-batches-per-device-max", min: 1)
        configuration.http = HTTPServer.Limits(
            bodyBytesMax: configuration.limits.bodyBytesMax,
            connectionsMax: try options.wholeNumber("connections-max", 512, min: 1),
            requestTimeoutSeconds: try options.wholeNumber("request-timeout-seconds", 30, min: 1),
            eventLoopThreads: try options.wholeNumber("event-loop-threads", 2, min: 1),
            blockingThreadsMax: try options.wholeNumber("blocking-threads-max", 64, min: 1),
            connectionsPerAddressMax: try options.wholeNumber("connections-per-address-max", 128),
            bodyBytesPerSecondMin: try options.wholeNumber("body-bytes-per-second-min", 512, min: 1),
            bodyRateGraceSeconds: try options.wholeNumber("body-rate-grace-seconds", 10),
            requestHeadSecondsMax: try options.wholeNumber("request-head-seconds-max", 30, min: 1))
        configuration.log.groupCommitDelayMicros = try options.wholeNumber("group-commit-delay-micros", 0)
        try options.limit(&configuration.log, \.segmentBytesMax, "segment-bytes-max", min: 4096)
        try options.limit(&configuration.log, \.segmentAgeSecondsMax, "segment-age-seconds-max", min: 1)
        configuration.compactor = try CompactService.configuration(
            retentionDays: configuration.limits.retentionDays, { try options.wholeNumber($0, $1, min: $2) })
        configuration.importBytesMax = Int64(
            try options.wholeNumber("import-bytes-max", Int(ImportJobs.uploadBytesMaxDefault), min: 1024))
        configuration.databaseURL = options.value(
            Database.setting.flag, environment: Database.setting.environment)
        configuration.projector = try options.onOff("projector", environment: "FINDMY_PROJECTOR", "on")
    }

    /// Sessions and logins, who the proxies in front are, and which private addresses the server
    /// may call out to.
    private static func readAccess(_ options: Options, into limits: inout IngestLimits) throws {
        try options.limit(&limits, \.sessionIdleSecondsMax, "session-idle-seconds-max", min: 1)
        try options.limit(&limits, \.sessionAgeSecondsMax, "session-age-seconds-max", min: 1)
        try options.limit(&limits, \.loginAttemptsPerMinuteMax, "login-attempts-per-minute-max", min: 1)
        try options.limit(
            &limits, \.loginFailuresPerNamePerMinuteMax, "login-failures-per-name-per-minute-max", min: 1)
        try options.limit(
            &limits, \.loginFailureAddressesPerNameMin, "login-failure-addresses-per-name-min", min: 1)
        try options.limit(
            &limits, \.loginAttemptsPerAddressPerMinuteMax, "login-attempts-per-address-per-minute-max",
            min: 1)
        try options.limit(
            &limits, \.authFailuresPerAddressPerMinuteMax, "auth-failures-per-address-per-minute-max", min: 1)
        if let url = options.value("public-url", environment: "FINDMY_PUBLIC_URL"), !url.isEmpty {
            guard IdentityLimits.isPublicURL(url) else {
                throw UsageError(
                    "--public-url (FINDMY_PUBLIC_URL) must be an http or https URL such as https://findmy.example.org, got '\(url)'"
                )
            }
            limits.publicURL = url
        }
        if let proxies = options.value("trusted-proxy", environment: "FINDMY_TRUSTED_PROXY") {
            limits.trustedProxies = Set(
                proxies.split(separator: ",").map { String($0.filter { $0 != " " }) }.filter { !$0.isEmpty })
        }
        if let list = options.value("allow-private-targets", environment: "FINDMY_ALLOW_PRIVATE_TARGETS") {
            guard let policy = AddressPolicy.parse(list) else {
                throw UsageError(
                    "--allow-private-targets (FINDMY_ALLOW_PRIVATE_TARGETS) is a comma-separated list of CIDR blocks"
                        + " such as 192.168.1.0/24,fd00::/8, got '\(list)'")
            }
            limits.outgoingTargets = policy
        }
        limits.cookieSecure = try options.onOff("cookie-secure", environment: "FINDMY_COOKIE_SECURE", "off")
    }

    /// The read API, the panel's map, and each feature's own settings.
    private static func readFeatures(_ options: Options, into configuration: inout Configuration)
        throws
    {
        configuration.readConnectionsMax = try options.wholeNumber("read-connections-max", 8, min: 1)
        configuration.heapTrimMillis = try options.wholeNumber("heap-trim-millis", 1000, max: 3_600_000)
        configuration.projectorWindowMillis = try options.wholeNumber(
            "projector-window-millis", 100, max: 10_000)
        try options.limit(
            &configuration.read, \.readAfterOffsetWaitMillisMax, "read-after-offset-wait-millis-max")
        configuration.read.deviceCardCacheBytesMax =
            try options.wholeNumber(
                "device-cache-mb", configuration.read.deviceCardCacheBytesMax >> 20, max: 1 << 20)
            << 20
        if let tiles = options.value("tile-url", environment: "FINDMY_TILE_URL"), !tiles.isEmpty {
            guard tiles.hasPrefix("https://") || tiles.hasPrefix("http://"), tiles.contains("{z}") else {
                throw UsageError(
                    "--tile-url (FINDMY_TILE_URL) must be an http(s) URL template with {z}, {x} and {y}, got '\(tiles)'"
                )
            }
            configuration.panel.tileURL = tiles
        }
        if let text = options.value("tile-attribution", environment: "FINDMY_TILE_ATTRIBUTION"), !text.isEmpty
        {
            configuration.panel.tileAttribution = text
        }
        configuration.mqtt = try OwnTracksMQTTService.configuration { options.value($0, environment: $1) }
        configuration.push = try PushProviders.configuration { options.value($0, environment: $1) }
        configuration.push?.addressPolicy = configuration.limits.outgoingTargets
        configuration.headscale = try HeadscaleOptions.configuration { options.value($0, environment: $1) }
        configuration.geofenceNotify = try GeofenceNotifySetup.configuration {
            options.value($0, environment: $1)
        }
        configuration.geofenceNotify.addressPolicy = configuration.limits.outgoingTargets
        configuration.commands = try CommandLimits.configuration { try options.wholeNumber($0, $1, min: $2) }
        configuration.commandStreams = try CommandStreamLimits.configuration(
            { try options.wholeNumber($0, $1, min: $2) }, connectionsMax: configuration.http.connectionsMax)
        configuration.nats = try IngestNodeConfiguration.parse(
            log: options.value("log", environment: "FINDMY_LOG"),
            partitions: options.value("log-partitions", environment: "FINDMY_LOG_PARTITIONS"),
            projector: options.value("projector", environment: "FINDMY_PROJECTOR"))
    }
}

/// How `findmy serve` reads its options: each from its flag, or else its `FINDMY_*` variable.
extension Options {
    /// A whole number from `min` to `max`; `fallback` when neither the flag nor its variable is set.
    fileprivate func wholeNumber(_ flag: String, _ fallback: Int, min: Int = 0, max: Int = .max) throws -> Int
    {
        let environment = ServeCommand.settings.first { $0.flag == flag }!.environment
        guard let text = value(flag, environment: environment), !text.isEmpty else { return fallback }
        guard let number = Int(text), number >= min, number <= max else {
            throw UsageError(
                "--\(flag) (\(environment)) must be a whole number of at least \(min)"
                    + (max == .max ? "" : " and at most \(max)") + ", got '\(text)'")
        }
        return number
    }

    /// Sets a limit from its flag; the limit's default when the flag is not given.
    fileprivate func limit<L>(
        _ limits: inout L, _ path: WritableKeyPath<L, Int>, _ flag: String, min: Int = 0
    ) throws {
        limits[keyPath: path] = try wholeNumber(flag, limits[keyPath: path], min: min)
    }

    /// `on` or `off`; `fallback` when neither the flag nor its variable is set.
    fileprivate func onOff(_ flag: String, environment: String, _ fallback: String) throws -> Bool {
        switch value(flag, environment: environment) ?? fallback {
        case "on": return true
        case "off": return false
        case let other: throw UsageError("--\(flag) (\(environment)) is on or off, got '\(other)'")
        }
    }
}
