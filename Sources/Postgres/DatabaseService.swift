import JSON
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
package struct Database {
    package let service: DatabaseService
    package var client: PostgresClient { service.client }
    package var description: String { service.description }

    package static let setting = (
        flag: "database-url", environment: "FINDMY_DATABASE_URL",
        help:
            "PostgreSQL conninfo or postgresql:// URL; default: a private cluster in DIR/postgres (no TCP port)"
    )

    /// One connection attempt per call: the projector retries with its own growing back-off, and
    /// reports each failure at once in /healthz instead of blocking inside the client.
    package static let projectorPolicy = PostgresClient.ReconnectPolicy(reconnectAttemptsMax: 1)

    package static func open(dataDirectory: String, url: String?) throws -> Database {
        let service = try DatabaseService(dataDirectory: dataDirectory, url: url)
        try service.start()
        return Database(service: service)
    }

    /// When findmy runs as root the cluster runs as an unprivileged user, who must be able to pass
    /// through the data directory to reach DIR/postgres: add search permission for others (not
    /// read: the directory cannot be listed, and DIR/log stays 0700).
    package static func allowTraversal(_ directory: String) {
        guard getuid() == 0 else { return }
        var info = stat()
        guard stat(directory, &info) == 0 else { return }
        if info.st_mode & S_IXOTH == 0 { chmod(directory, (info.st_mode & 0o7777) | S_IXOTH) }
    }

    /// Closes the connection, and stops the embedded cluster if this process started it.
    package func close() { service.stop(graceMicros: 0) }
}

/// The projector's PostgreSQL as a service of `findmy serve`: resolved (not started) by its
/// initialiser, so that the read pool and the projector can be built before anything runs;
/// `start` starts the private cluster (or does nothing for `--database-url`); `stop` closes the
/// connections that borrow it, then stops the cluster if this process started it. A start that
/// fails half-way stops what it started, so no PostgreSQL outlives a server that never served.
/// `supervised` (what `findmy serve` asks for): a private cluster that ends on its own is started
/// again with a back-off (`ClusterSupervisor`), and its state says `restarting` until it runs;
/// `onSupervisorEvent` hears each end, restart and failed attempt (the server's structured log).
package final class DatabaseService: Service {
    package let name = "postgres"
    package let client: PostgresClient
    package let description: String
    private let cluster: EmbeddedPostgres?
    private let supervisor: ClusterSupervisor?
    private let startedCluster = Mutex(false)
    private let current = Mutex<ServiceState>(.idle)
    /// Closed before the cluster stops (the read API's pool).
    private let borrowers = Mutex<[@Sendable () -> Void]>([])

    package init(
        dataDirectory: String, url: String?, supervised: Bool = false,
        onSupervisorEvent: @escaping @Sendable (ClusterSupervisor.Event) -> Void = { _ in }
    ) throws {
        if let url, !url.isEmpty {
            cluster = nil
            supervisor = nil
            client = PostgresClient(conninfo: url, policy: Database.projectorPolicy)
            description = "external PostgreSQL"
        } else {
            Database.allowTraversal(dataDirectory)
            let cluster = try EmbeddedPostgres(dataDirectory: dataDirectory)
            self.cluster = cluster
            supervisor = supervised ? ClusterSupervisor(cluster, onEvent: onSupervisorEvent) : nil
            client = PostgresClient(conninfo: cluster.conninfo, policy: Database.projectorPolicy)
            description = "embedded PostgreSQL in \(cluster.clusterDirectory)"
        }
    }

    package var state: ServiceState {
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
    package var healthMembers: [(String, JSONValue)] {
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

    /// `close` runs in `stop`, before the cluster stops.
    package func addBorrower(close: @escaping @Sendable () -> Void) {
        borrowers.withLock { $0.append(close) }
    }

    package func start() throws {
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

    package func stop(graceMicros: Int64) {
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
            cluster.configuration.log("\(error)")
        }
    }
}
