import Events
import Identity
import Ingest
import JSON
import Postgres
import Projector
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The PostgreSQL a command works with: an external server (`--database-url`), or the private
/// cluster in DATA_DIR/postgres, started as this process's child if it is not running (or adopted:
/// restarted as our child when no running findmy owns it) and stopped again only by the process
/// whose child it is (so `findmy replay` next to a running server leaves the server's cluster alone).
/// The commands' form of `DatabaseService`: opened and closed in one call each.
struct Database {
    let service: DatabaseService
    var client: PostgresClient { service.client }
    var description: String { service.description }

    static let setting = (
        flag: "database-url", environment: "FINDMY_DATABASE_URL",
        help:
            "PostgreSQL conninfo or postgresql:// URL; default: a private cluster in DIR/postgres (no TCP port)"
    )

    /// One connection attempt per call: the projector retries with its own growing back-off, and
    /// reports each failure at once in /healthz instead of blocking inside the client.
    static let projectorPolicy = PostgresClient.ReconnectPolicy(reconnectAttemptsMax: 1)

    static func open(dataDirectory: String, url: String?) throws -> Database {
        let service = try DatabaseService(dataDirectory: dataDirectory, url: url)
        try service.start()
        return Database(service: service)
    }

    /// When findmy runs as root the cluster runs as an unprivileged user, who must be able to pass
    /// through the data directory to reach DIR/postgres: add search permission for others (not
    /// read: the directory cannot be listed, and DIR/log stays 0700).
    static func allowTraversal(_ directory: String) {
        guard getuid() == 0 else { return }
        var info = stat()
        guard stat(directory, &info) == 0 else { return }
        if info.st_mode & S_IXOTH == 0 { chmod(directory, (info.st_mode & 0o7777) | S_IXOTH) }
    }

    /// Closes the connection, and stops the embedded cluster if this process started it.
    func close() { service.stop(graceMicros: 0) }
}

/// The projector's PostgreSQL as a service of `findmy serve`: resolved (not started) by its
/// initialiser, so that the read pool and the projector can be built before anything runs;
/// `start` starts the private cluster (or does nothing for `--database-url`); `stop` closes the
/// connections that borrow it, then stops the cluster if this process started it. A start that
/// fails half-way stops what it started, so no PostgreSQL outlives a server that never served.
/// `supervised` (what `findmy serve` asks for): a private cluster that ends on its own is started
/// again with a back-off (`ClusterSupervisor`), and its state says `restarting` until it runs.
final class DatabaseService: Service, ServiceHealthDetails {
    let name = "postgres"
    let client: PostgresClient
    let description: String
    private let cluster: EmbeddedPostgres?
    private let supervisor: ClusterSupervisor?
    private let startedCluster = Mutex(false)
    private let current = Mutex<ServiceState>(.idle)
    /// Closed before the cluster stops (the read API's pool).
    private let borrowers = Mutex<[@Sendable () -> Void]>([])

    init(dataDirectory: String, url: String?, supervised: Bool = false) throws {
        if let url, !url.isEmpty {
            cluster = nil
            supervisor = nil
            client = PostgresClient(conninfo: url, policy: Database.projectorPolicy)
            description = "external PostgreSQL"
        } else {
            Database.allowTraversal(dataDirectory)
            let cluster = try EmbeddedPostgres(dataDirectory: dataDirectory)
            self.cluster = cluster
            supervisor = supervised ? ClusterSupervisor(cluster, onEvent: Self.logSupervisorEvent) : nil
            client = PostgresClient(conninfo: cluster.conninfo, policy: Database.projectorPolicy)
            description = "embedded PostgreSQL in \(cluster.clusterDirectory)"
        }
    }

    var state: ServiceState {
        let state = current.withLock { $0 }
        guard state == .running, let supervisor, case .down = supervisor.status.phase else { return state }
        let status = supervisor.status
        if let began = status.attemptStartedMicros {
            let seconds = max(0, supervisor.options.clockMicros() - began) / 1_000_000
            let log = supervisor.cluster.lastProblem().map { "; its log: " + $0 } ?? ""
            return .restarting("starting again for \(seconds) s (recovery)" + log)
        }
        return .restarting(status.lastAttemptError ?? status.lastExit ?? "the server ended")
    }

    /// `restarts`, and once it ended `last_exit`; while it is down, `failed_attempts`, and
    /// `attempt_running_s` during an attempt or `next_attempt_in_s` between two.
    var healthMembers: [(String, JSONValue)] {
        guard let supervisor else { return [] }
        let status = supervisor.status
        var members: [(String, JSONValue)] = [("restarts", .integer(Int64(status.restarts)))]
        if let lastExit = status.lastExit { members.append(("last_exit", .string(lastExit))) }
        if case .down(_, let nextAttemptMicros) = status.phase {
            let now = supervisor.options.clockMicros()
            members.append(("failed_attempts", .integer(Int64(status.failedAttempts))))
            if let began = status.attemptStartedMicros {
                members.append(("attempt_running_s", .double(Double(max(0, now - began)) / 1_000_000)))
            } else {
                members.append(
                    ("next_attempt_in_s", .double(Double(max(0, nextAttemptMicros - now)) / 1_000_000)))
            }
        }
        return members
    }

    private static func logSupervisorEvent(_ event: ClusterSupervisor.Event) {
        switch event {
        case .ended(let why):
            StructuredLog.error("postgres_ended", ["reason": .string(why)])
        case .restarted(let restarts):
            StructuredLog.info("postgres_restarted", ["restarts": .int(Int64(restarts))])
        case .restartFailed(let why, let nextAttemptInMicros):
            StructuredLog.error(
                "postgres_restart_failed",
                ["error": .string(why), "next_attempt_in_ms": .int(nextAttemptInMicros / 1000)])
        }
    }

    /// `close` runs in `stop`, before the cluster stops.
    func addBorrower(close: @escaping @Sendable () -> Void) { borrowers.withLock { $0.append(close) } }

    func start() throws {
        guard let cluster else {
            current.withLock { $0 = .running }
            return
        }
        do {
            try cluster.start()
        } catch {
            current.withLock { $0 = .failed("\(error)") }
            if cluster.isChildOfThisProcess { try? cluster.stop() }
            throw error
        }
        startedCluster.withLock { $0 = cluster.isChildOfThisProcess }
        current.withLock { $0 = .running }
        supervisor?.start()
    }

    func stop(graceMicros: Int64) {
        // First, so that nothing starts the cluster again while it stops.
        supervisor?.stop()
        for close in borrowers.withLock({ $0 }) { close() }
        client.close()
        defer { current.withLock { $0 = .stopped } }
        // A cluster the supervisor started again is this process's child, whoever started it first.
        guard let cluster, startedCluster.withLock({ $0 }) || cluster.isChildOfThisProcess else { return }
        do {
            try cluster.stop()
        } catch {
            writeStandardError("findmy: \(error)")
        }
    }
}

/// A projector as `/healthz` and `/metrics` show it: the main one (`projector`,
/// `findmy_projector_*`), or another projection's (`geofences`, `findmy_geofences_projector_*`).
struct ProjectorStatusSource: StatusSource {
    let projector: Projector
    var name = "projector"
    var metricPrefix = "findmy_projector"

    func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let status = projector.status
        var members: [(String, JSONValue)] = [
            ("checkpoint", .integer(Int64(status.checkpoint))),
            ("lag_offsets", .integer(Int64(status.lagOffsets))),
            ("lag_seconds", .double(status.lagSeconds)),
            ("running", .bool(!status.stopped)),
        ]
        if let error = status.lastError { members.append(("error", .string(error))) }
        return (status.lastError != nil || status.stopped, members)
    }

    func metricsText() -> String {
        let status = projector.status
        return """
            # HELP \(metricPrefix)_checkpoint The next log offset the projector will fold.
            # TYPE \(metricPrefix)_checkpoint gauge
            \(metricPrefix)_checkpoint \(status.checkpoint)
            # HELP \(metricPrefix)_lag_offsets Durable records not yet folded into PostgreSQL.
            # TYPE \(metricPrefix)_lag_offsets gauge
            \(metricPrefix)_lag_offsets \(status.lagOffsets)
            # HELP \(metricPrefix)_lag_seconds Age of the oldest record not yet folded (0 when caught up).
            # TYPE \(metricPrefix)_lag_seconds gauge
            \(metricPrefix)_lag_seconds \(status.lagSeconds)
            # HELP \(metricPrefix)_records_total Records folded by this process.
            # TYPE \(metricPrefix)_records_total counter
            \(metricPrefix)_records_total \(status.recordsFolded)
            # HELP \(metricPrefix)_fixes_total Fixes written to device_locations by this process.
            # TYPE \(metricPrefix)_fixes_total counter
            \(metricPrefix)_fixes_total \(status.fixesFolded)
            # HELP \(metricPrefix)_failures_total Failed projector transactions (retried from the checkpoint).
            # TYPE \(metricPrefix)_failures_total counter
            \(metricPrefix)_failures_total \(status.reconnects)

            """
    }
}
