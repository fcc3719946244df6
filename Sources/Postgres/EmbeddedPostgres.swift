import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A private PostgreSQL cluster under the server's data directory, started and stopped by findmy.
///
/// Layout: `DATA_DIR/postgres/data` (PGDATA), `DATA_DIR/postgres/socket` (the Unix socket),
/// `DATA_DIR/postgres/server.log`, and `DATA_DIR/postgres.pgpass` (the secret). There is no TCP
/// port (`listen_addresses = ''`). The socket is mode 0700 in a 0700 directory owned by the
/// cluster's OS user, and even through it only a client holding the secret logs in
/// (scram-sha-256, never `trust`; see EmbeddedPostgresAuth.swift). When
/// `DATA_DIR/postgres/socket/.s.PGSQL.5432` is longer than the 107 bytes a socket path may have,
/// the socket goes to a private directory under /tmp instead, and the log says so.
///
/// PostgreSQL refuses to run as root. When findmy runs as root, a new cluster runs as an OS user
/// of its own, `findmy-<16 hex digits of a hash of DATA_DIR>` (created with useradd), through
/// `runuser -u USER --`, and owns its files: no other instance's cluster, nor Debian's `postgres`
/// user, can read them. An existing cluster keeps the OS user that owns its files (clusters made
/// before this ran as `postgres`), so that an upgrade does not break it.
///
/// The server never outlives the findmy process that started it: it is `postgres -D PGDATA` run
/// as a child of findmy under `setpriv --pdeathsig INT` (not daemonised by `pg_ctl start`), so
/// when findmy ends in any way, `kill -9` included, the kernel sends it SIGINT: a fast shutdown
/// (sessions ended, a checkpoint, a clean stop). setpriv sets that signal after switching to the
/// cluster's OS user (a change of credentials clears it), just before it executes postgres.
///
/// Recovery, on `start()`:
///
/// | postmaster.pid | process named in it | action |
/// | --- | --- | --- |
/// | absent | — | start |
/// | present | gone, a zombie, or not postgres | remove the stale file, start |
/// | present | a live postgres, this process's child | reuse it |
/// | present | a live postgres, child of another live findmy (`findmy replay` beside `findmy serve`) | use it; that process stops it |
/// | present | any other live postgres that answers (left by an earlier findmy's `pg_ctl start`, or started by hand) | adopt it: `pg_ctl stop -m fast`, start it again as our child |
/// | present | a live postgres that does not answer | `pg_ctl stop -m fast`, then start |
///
/// An adopted server is restarted rather than used as it is, because only a child of ours gets
/// the parent-death signal: used as it is, it would survive the next `kill -9` of findmy again.
public final class EmbeddedPostgres: Sendable {
    public struct Configuration: Sendable {
        public var dataDirectory: String
        /// Server binaries; default `FINDMY_PG_BIN`, else the highest `/usr/lib/postgresql/*/bin`.
        public var binDirectory: String?
        public var database = "findmy"
        public var user = "findmy"
        public var startTimeoutSeconds = 60
        /// Starts tried before giving up: after a crash, the old server's backends may hold its
        /// shared memory for a moment.
        public var startAttemptsMax = 5
        public var log: @Sendable (String) -> Void = { LocalFiles.writeStandardError("findmy: " + $0) }

        public init(dataDirectory: String) { self.dataDirectory = dataDirectory }
    }

    public let configuration: Configuration
    /// `DATA_DIR/postgres`.
    public let clusterDirectory: String
    /// PGDATA, `DATA_DIR/postgres/data`.
    public let pgData: String
    public let socketDirectory: String
    public let binDirectory: String
    /// The OS user the server runs as when findmy is root; nil when it runs as findmy's own user.
    public let osUser: String?
    /// `findmy-<hash of DATA_DIR>`: the OS user a new cluster of this data directory gets.
    let instanceOSUser: String
    /// `DATA_DIR/postgres.pgpass`: the secret findmy's role logs in with, in libpq's password-file form.
    public let passwordFile: String
    /// `DATA_DIR/postgres`, a directory or a link to where the cluster lives.
    let clusterLink: String
    /// Only the socket's name: no TCP port is opened.
    public static let port = 5432
    /// The postmaster when this process started it (its child), until it is reaped.
    private let child = Mutex<pid_t?>(nil)
    /// The size of server.log when this process last started the server: what it wrote after.
    private let logOffsetAtStart = Mutex<UInt64>(0)

    /// Resolves paths and the binaries; starts nothing.
    public init(_ configuration: Configuration) throws(EmbeddedPostgresError) {
        self.configuration = configuration
        let dataDirectory = LocalFiles.absolutePath(configuration.dataDirectory)
        passwordFile = dataDirectory + "/postgres.pgpass"
        clusterLink = dataDirectory + "/postgres"
        instanceOSUser = instanceOSUserName(dataDirectory)
        osUser = clusterOSUser(dataDirectory, instanceUser: instanceOSUser)
        clusterDirectory = try resolveClusterDirectory(dataDirectory, osUser: osUser, configuration.log)
        pgData = clusterDirectory + "/data"
        if let configured = configuration.binDirectory {
            binDirectory = configured
        } else {
            binDirectory = try findBinDirectory()
        }
        socketDirectory = chooseSocketDirectory(clusterDirectory, configuration.log)
    }

    public convenience init(dataDirectory: String) throws(EmbeddedPostgresError) {
        try self.init(Configuration(dataDirectory: dataDirectory))
    }

    /// `host=<socket directory> port=5432 dbname=findmy user=findmy passfile=DATA_DIR/postgres.pgpass`:
    /// the secret is read from the file at each connection, and is never part of the conninfo.
    public var conninfo: String { conninfo(database: configuration.database) }

    /// The conninfo of another database of this cluster.
    public func conninfo(database: String) -> String {
        "host=\(PostgresConnection.conninfoValue(socketDirectory)) port=\(Self.port) "
            + "dbname=\(PostgresConnection.conninfoValue(database)) user=\(PostgresConnection.conninfoValue(configuration.user)) "
            + "passfile=\(PostgresConnection.conninfoValue(passwordFile))"
    }

    /// Creates the cluster on first start, recovers from a crash, starts the server and makes sure
    /// the database exists. Returns once it accepts connections.
    public func start() throws(EmbeddedPostgresError) {
        try start(attemptsMax: configuration.startAttemptsMax, abandon: { false })
    }

    /// `start()` as the supervisor tries it after the server ended: one attempt (the supervisor
    /// keeps its own back-off between attempts), abandoned, and the half-started server stopped,
    /// as soon as `abandon` says so (findmy is stopping). No time limit while the server lives: a
    /// recovery through gigabytes of WAL takes what it takes, and a server that keeps crashing in
    /// recovery (a checkpoint on a full disk) reinitialises by itself and comes up once there is
    /// space; cut short, either would start over.
    public func restart(abandon: @escaping () -> Bool) throws(EmbeddedPostgresError) {
        try start(attemptsMax: 1, timeLimited: false, abandon: abandon)
    }

    private func start(attemptsMax: Int, timeLimited: Bool = true, abandon: () -> Bool)
        throws(EmbeddedPostgresError)
    {
        try prepareDirectories()
        let secret = try loadOrCreateSecret()
        if !LocalFiles.exists(pgData + "/PG_VERSION") { try initCluster(secret: secret) }
        try checkVersion()
        try writeSettings()
        let rulesChanged = try writeAccessRules(peerForFindmy: false)
        if try reuseRunningServer() {
            if rulesChanged { try reload() }
        } else {
            try startServer(attemptsMax: attemptsMax, timeLimited: timeLimited, abandon: abandon)
        }
        try awaitNoTrust()
        try authenticate(secret: secret)
        try ensureDatabase()
    }

    /// `pg_ctl stop -m fast`: disconnects clients, rolls back open transactions, shuts down cleanly.
    /// Reaps the server when it is this process's child.
    public func stop() throws(EmbeddedPostgresError) {
        defer { reapEndedChild() }
        guard postmasterPID() != nil else { return }
        let outcome = try pgCtl([
            "stop", "-D", pgData, "-m", "fast", "-w", "-t", "\(configuration.startTimeoutSeconds)",
        ])
        guard outcome.succeeded || postmasterPID() == nil else {
            throw EmbeddedPostgresError("cannot stop PostgreSQL in \(pgData): \(outcome.output)")
        }
        // pg_ctl returns once postmaster.pid is gone, a moment before the process ends.
        if let pid = child.withLock({ $0.take() }) { reapChild(pid) }
    }

    /// Whether the running server is this process's child: started (or adopted) by this process,
    /// stopped by it, and killed by the kernel when it dies.
    public var isChildOfThisProcess: Bool {
        guard let pid = postmasterPID() else { return false }
        return child.withLock { $0 } == pid
    }

    /// Nil while the server runs; once it has ended on its own (a crash, `kill -9`, a full disk, a
    /// `pg_ctl stop` from outside), how it ended and the last problem its log names. A child of
    /// this process is reaped here; another's is watched through `postmaster.pid`.
    public func serverEnded() -> String? {
        let how: String
        if let pid = child.withLock({ $0 }) {
            guard let status = childExitStatus(pid) else { return nil }
            child.withLock { if $0 == pid { $0 = nil } }
            how =
                status > 128
                ? "the server (pid \(pid)) was killed by signal \(status - 128)"
                : status >= 0
                    ? "the server (pid \(pid)) exited with status \(status)" : "the server (pid \(pid)) ended"
        } else {
            guard postmasterPID() == nil else { return nil }
            how = "the server is gone"
        }
        return lastProblem().map { how + "; its log: " + $0 } ?? how
    }

    /// What server.log says went wrong since the server last started: its first PANIC (the cause:
    /// "could not write to file pg_wal/...: No space left on device"), else its last FATAL, else
    /// its last ERROR. Nil for a server killed without a word (`kill -9`).
    public func lastProblem() -> String? {
        let offset = logOffsetAtStart.withLock { $0 }
        guard let text = LocalFiles.readText(clusterDirectory + "/server.log", from: offset) else {
            return nil
        }
        let lines = text.split(separator: "\n")
        let problem =
            lines.first { $0.contains("PANIC:") } ?? lines.last { $0.contains("FATAL:") }
            ?? lines.last { $0.contains("ERROR:") }
        return problem.map(String.init)
    }

    /// Forgets a child that has ended (killed, crashed), so that it leaves no zombie behind.
    private func reapEndedChild() {
        child.withLock {
            if let pid = $0, childEnded(pid) { $0 = nil }
        }
    }

    /// Stops the cluster and deletes it: its files (where a link points, too), its password file,
    /// a socket directory under /tmp, and the OS user made for this instance. What a data directory
    /// being deleted for good needs; the event log is left alone.
    public func destroy() throws(EmbeddedPostgresError) {
        try stop()
        for path in [clusterDirectory, clusterLink, passwordFile, socketDirectory] {
            if LocalFiles.exists(path) || LocalFiles.linkTarget(path) != nil {
                do {
                    try LocalFiles.removeTree(path)
                } catch {
                    throw EmbeddedPostgresError("cannot delete \(path): \(error)")
                }
            }
        }
        // Only the user made for this data directory; never `postgres` nor one findmy did not make.
        if let osUser, osUser == instanceOSUser { try removeOSUser(osUser) }
    }

    /// The postmaster's PID from `postmaster.pid` when that process is alive; nil otherwise.
    public func postmasterPID() -> Int32? {
        guard let text = LocalFiles.readText(pgData + "/postmaster.pid"),
            let first = text.split(separator: "\n").first, let pid = Int32(first), isLivePostgres(pid)
        else { return nil }
        return pid
    }

    func pgCtl(_ arguments: [String]) throws(EmbeddedPostgresError) -> ChildOutcome {
        try runCommand(binDirectory + "/pg_ctl", arguments, as: osUser, in: clusterDirectory)
    }

    private func reuseRunningServer() throws(EmbeddedPostgresError) -> Bool {
        reapEndedChild()
        guard let pid = postmasterPID() else {
            if LocalFiles.exists(pgData + "/postmaster.pid") {
                configuration.log("removing stale \(pgData)/postmaster.pid: its server is gone (a crash)")
                unlink(pgData + "/postmaster.pid")
            }
            return false
        }
        if serverAnswers(conninfo(database: "postgres")) {
            if child.withLock({ $0 }) == pid { return true }
            let parent = parentProcess(of: pid)
            if let parent, parent != getpid(), processName(parent) == "findmy" {
                configuration.log(
                    "using PostgreSQL (pid \(pid)) in \(pgData), run by findmy process \(parent), which stops it"
                )
                return true
            }
            configuration.log(
                "adopting PostgreSQL (pid \(pid)) found running in \(pgData), not started by a running findmy "
                    + "(an earlier findmy's pg_ctl, or by hand): restarting it as findmy's child, so that it stops "
                    + "when findmy does")
            try stop()
            return false
        }
        configuration.log(
            "PostgreSQL (pid \(pid)) in \(pgData) does not answer on \(socketDirectory); restarting it")
        try stop()
        return false
    }

    /// `setpriv --pdeathsig INT [--reuid --regid --init-groups --inh-caps=-all] -- postgres -D PGDATA`,
    /// then waits until it accepts connections. The signal is applied by setpriv after the
    /// credentials change (which would clear it) and survives the exec of postgres.
    private func startServer(attemptsMax: Int, timeLimited: Bool, abandon: () -> Bool)
        throws(EmbeddedPostgresError)
    {
        var user: [String] = []
        if osUser != nil {
            guard let (uid, gid) = clusterFileOwner() else {
                throw EmbeddedPostgresError("the cluster's OS user \(osUser ?? "") does not exist")
            }
            user = ["--reuid=\(uid)", "--regid=\(gid)", "--init-groups", "--inh-caps=-all"]
        }
        let argv =
            [setprivPath, "--pdeathsig", "INT"] + user + ["--", binDirectory + "/postgres", "-D", pgData]
        var failure = ""
        for attempt in 1...attemptsMax {
            let logSize = LocalFiles.size(clusterDirectory + "/server.log")
            logOffsetAtStart.withLock { $0 = logSize ?? 0 }
            let pid: pid_t
            do {
                pid = try spawnChild(argv, outputPath: clusterDirectory + "/server.log", in: clusterDirectory)
            } catch {
                throw EmbeddedPostgresError(error.description)
            }
            child.withLock { $0 = pid }
            switch awaitReady(pid, timeLimited: timeLimited, abandon: abandon) {
            case .ready: return
            case .ended:
                child.withLock { $0 = nil }
                failure = "the server exited while starting"
            case .abandoned:
                // SIGINT: a fast shutdown, which a server still in recovery obeys at once.
                kill(pid, SIGINT)
                reapChild(pid)
                child.withLock { $0 = nil }
                throw EmbeddedPostgresError(
                    "the start of PostgreSQL in \(pgData) was abandoned: findmy is stopping")
            case .timedOut:
                kill(pid, SIGQUIT)
                reapChild(pid)
                child.withLock { $0 = nil }
                failure =
                    "the server did not accept connections within \(configuration.startTimeoutSeconds) s"
            }
            if attempt < attemptsMax { usleep(UInt32(attempt) * 500_000) }
        }
        throw EmbeddedPostgresError(
            "cannot start PostgreSQL in \(pgData): \(failure)\nlast lines of \(clusterDirectory)/server.log:\n"
                + logTail())
    }

    private enum Readiness { case ready, ended, abandoned, timedOut }

    private func awaitReady(_ pid: pid_t, timeLimited: Bool, abandon: () -> Bool) -> Readiness {
        let deadline = monotonicMillis() + Int64(configuration.startTimeoutSeconds) * 1000
        let target = conninfo(database: "postgres")
        while !timeLimited || monotonicMillis() < deadline {
            if childEnded(pid) { return .ended }
            if abandon() { return .abandoned }
            if serverAnswers(target), postmasterPID() == pid { return .ready }
            usleep(20_000)
        }
        return .timedOut
    }

    private func ensureDatabase() throws(EmbeddedPostgresError) {
        do {
            let admin = try PostgresConnection(conninfo(database: "postgres"))
            let existing = try admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = $1", [.text(configuration.database)])
            if existing.rowCount == 0 {
                // CREATE DATABASE takes no parameters; the name is our configuration, quoted.
                try admin.executeScript(
                    "CREATE DATABASE \(PostgresConnection.quoteIdentifier(configuration.database))")
            }
        } catch {
            throw EmbeddedPostgresError("PostgreSQL in \(pgData) started but \(error)")
        }
    }

    func logTail() -> String {
        let log = LocalFiles.readText(clusterDirectory + "/server.log") ?? ""
        return log.split(separator: "\n").suffix(10).joined(separator: "\n")
    }
}

public struct EmbeddedPostgresError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
