import CLI
import Events
import HTTPClient
import Identity
import Postgres
import Threads

/// `findmy serve`'s geofence notifier (docs/geofences.md, "Notifications"): its options and its
/// assembly. It runs whenever the projector does; a fence without settings sends nothing.
public enum GeofenceNotifySetup {
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "geofence-retry-base-seconds", "FINDMY_GEOFENCE_RETRY_BASE_SECONDS",
            "a failed geofence notification is retried after this many seconds, then twice as long each time "
                + "(default 10; 0 retries at once, for tests)"
        ),
        (
            "geofence-notify-attempts", "FINDMY_GEOFENCE_NOTIFY_ATTEMPTS",
            "sends of one geofence notification before it is marked failed (default 8)"
        ),
        (
            "geofence-notify-poll-seconds", "FINDMY_GEOFENCE_NOTIFY_POLL_SECONDS",
            "the geofence notifier looks for new transitions this often when the geofence projector has not "
                + "woken it (it does at each commit; default 30)"
        ),
        (
            "geofence-notify-ca-file", "FINDMY_GEOFENCE_NOTIFY_CA_FILE",
            "trust this CA file for https webhooks and ntfy servers (geofence alerts and the ntfy command channel) "
                + "instead of the system's"
        ),
    ]

    public struct Configuration: Sendable {
        public var options = GeofenceNotifier.Options()
        public var caFile: String?
        /// Where webhooks and ntfy topics may be (`--allow-private-targets`, set by `serve`).
        public var addressPolicy = AddressPolicy()

        public init() {}
    }

    public static func configuration(_ value: (String, String) -> String?) throws -> Configuration {
        var configuration = Configuration()
        func text(_ flag: String) -> (String, String)? {
            let environment = settings.first { $0.flag == flag }!.environment
            guard let text = value(flag, environment), !text.isEmpty else { return nil }
            return (text, environment)
        }
        func number(_ flag: String, min: Int, max: Int) throws -> Int? {
            guard let (text, environment) = text(flag) else { return nil }
            guard let number = Int(text), number >= min, number <= max else {
                throw UsageError(
                    "--\(flag) (\(environment)) must be a whole number from \(min) to \(max), got '\(text)'")
            }
            return number
        }
        if let seconds = try number("geofence-retry-base-seconds", min: 0, max: 86_400) {
            configuration.options.retryBaseMicros = Int64(seconds) * 1_000_000
        }
        if let attempts = try number("geofence-notify-attempts", min: 1, max: 100) {
            configuration.options.attemptsMax = attempts
        }
        if let seconds = try number("geofence-notify-poll-seconds", min: 1, max: 86_400) {
            configuration.options.pollMicros = Int64(seconds) * 1_000_000
        }
        configuration.caFile = text("geofence-notify-ca-file")?.0
        return configuration
    }

    /// The notifier over its own PostgreSQL connection, the server key of `dataDirectory`, and an
    /// HTTP client of its own (one connection per receiver host). One connection attempt per call:
    /// while PostgreSQL is down a round fails at once and the next comes after `pollMicros`, where
    /// the client's own back-off would sleep for seconds inside a round that a shutdown waits for.
    public static func notifier(
        _ configuration: Configuration, conninfo: String, identity: IdentityService, signing: WebhookSigning,
        wake: Doorbells?, registryEnd: (@Sendable () -> UInt64)? = nil,
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros
    ) -> GeofenceNotifier {
        GeofenceNotifier(
            client: PostgresClient(conninfo: conninfo, policy: .init(reconnectAttemptsMax: 1)),
            identity: identity,
            http: HTTP2Client(
                name: "geofence-notifier",
                options: .init(caFile: configuration.caFile, addressPolicy: configuration.addressPolicy)),
            signing: signing, options: configuration.options, clockMicros: clockMicros, wake: wake,
            registryEnd: registryEnd)
    }

    /// Starts the notifier after the projections whose transitions it follows, so that it stops
    /// before them and before the database; it reports in /healthz and /metrics.
    public static func start(
        _ configuration: Configuration, conninfo: String, identity: IdentityService, signing: WebhookSigning,
        wake: Doorbells?, registryEnd: (@Sendable () -> UInt64)? = nil,
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros, group: ServiceGroup
    ) throws {
        let notifier = notifier(
            configuration, conninfo: conninfo, identity: identity, signing: signing, wake: wake,
            registryEnd: registryEnd, clockMicros: clockMicros)
        identity.addStatusSource(notifier)
        try group.start(notifier)
    }
}
