import Foundation

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
/// Recovery, on `start()`:
///
/// | postmaster.pid | process named in it | action |
/// | --- | --- | --- |
/// | absent | — | start |
/// | present | gone, a zombie, or not postgres | remove the stale file, start |
/// | present | a live postgres that answers on our socket | reuse it (findmy crashed, PostgreSQL did not) |
/// | present | a live postgres that does not answer | `pg_ctl stop -m fast`, then start |
///
/// Reuse rather than restart because a restart would cut any other connection for nothing; the
/// settings we own live in `findmy.conf` and do not change while the server runs. Two findmy
/// processes must not share a DATA_DIR: the event log's lock, taken before this, prevents it.
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
        public var log: @Sendable (String) -> Void = {
            FileHandle.standardError.write(Data(("findmy: " + $0 + "\n").utf8))
        }

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

    /// Resolves paths and the binaries; starts nothing.
    public init(_ configuration: Configuration) throws(EmbeddedPostgresError) {
        self.configuration = configuration
        let dataDirectory = URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL.path
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

    func conninfo(database: String) -> String {
        "host=\(PostgresConnection.conninfoValue(socketDirectory)) port=\(Self.port) "
            + "dbname=\(PostgresConnection.conninfoValue(database)) user=\(PostgresConnection.conninfoValue(configuration.user)) "
            + "passfile=\(PostgresConnection.conninfoValue(passwordFile))"
    }

    /// Creates the cluster on first start, recovers from a crash, starts the server and makes sure
    /// the database exists. Returns once it accepts connections.
    public func start() throws(EmbeddedPostgresError) {
        try prepareDirectories()
        let secret = try loadOrCreateSecret()
        if !FileManager.default.fileExists(atPath: pgData + "/PG_VERSION") { try initCluster(secret: secret) }
        try checkVersion()
        try writeSettings()
        let rulesChanged = try writeAccessRules(peerForFindmy: false)
        if try reuseRunningServer() {
            if rulesChanged { try reload() }
        } else {
            try startServer()
        }
        try awaitNoTrust()
        try authenticate(secret: secret)
        try ensureDatabase()
    }

    /// `pg_ctl stop -m fast`: disconnects clients, rolls back open transactions, shuts down cleanly.
    public func stop() throws(EmbeddedPostgresError) {
        guard postmasterPID() != nil else { return }
        let outcome = try pgCtl([
            "stop", "-D", pgData, "-m", "fast", "-w", "-t", "\(configuration.startTimeoutSeconds)",
        ])
        guard outcome.succeeded || postmasterPID() == nil else {
            throw EmbeddedPostgresError("cannot stop PostgreSQL in \(pgData): \(outcome.output)")
        }
    }

    /// Stops the cluster and deletes it: its files (where a link points, too), its password file,
    /// a socket directory under /tmp, and the OS user made for this instance. What a data directory
    /// being deleted for good needs; the event log is left alone.
    public func destroy() throws(EmbeddedPostgresError) {
        try stop()
        for path in [clusterDirectory, clusterLink, passwordFile, socketDirectory] {
            if FileManager.default.fileExists(atPath: path)
                || (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) != nil
            {
                do {
                    try FileManager.default.removeItem(atPath: path)
                } catch {
                    throw EmbeddedPostgresError("cannot delete \(path): \(error.localizedDescription)")
                }
            }
        }
        // Only the user made for this data directory; never `postgres` nor one findmy did not make.
        if let osUser, osUser == instanceOSUser { try removeOSUser(osUser) }
    }

    /// The postmaster's PID from `postmaster.pid` when that process is alive; nil otherwise.
    public func postmasterPID() -> Int32? {
        guard let text = try? String(contentsOfFile: pgData + "/postmaster.pid", encoding: .utf8),
            let first = text.split(separator: "\n").first, let pid = Int32(first), isLivePostgres(pid)
        else { return nil }
        return pid
    }

    func pgCtl(_ arguments: [String]) throws(EmbeddedPostgresError) -> CommandOutcome {
        try runCommand(binDirectory + "/pg_ctl", arguments, as: osUser, in: clusterDirectory)
    }

    private func reuseRunningServer() throws(EmbeddedPostgresError) -> Bool {
        guard let pid = postmasterPID() else {
            if FileManager.default.fileExists(atPath: pgData + "/postmaster.pid") {
                configuration.log("removing stale \(pgData)/postmaster.pid: its server is gone (a crash)")
                try? FileManager.default.removeItem(atPath: pgData + "/postmaster.pid")
            }
            return false
        }
        if serverAnswers(conninfo(database: "postgres")) {
            configuration.log("reusing PostgreSQL (pid \(pid)) left running in \(pgData)")
            return true
        }
        configuration.log(
            "PostgreSQL (pid \(pid)) in \(pgData) does not answer on \(socketDirectory); restarting it")
        try stop()
        return false
    }

    private func startServer() throws(EmbeddedPostgresError) {
        var outcome = CommandOutcome(status: 0, output: "")
        for attempt in 1...configuration.startAttemptsMax {
            outcome = try pgCtl([
                "start", "-D", pgData, "-l", clusterDirectory + "/server.log", "-w", "-t",
                "\(configuration.startTimeoutSeconds)", "-s",
            ])
            if outcome.succeeded { return }
            if attempt < configuration.startAttemptsMax { usleep(UInt32(attempt) * 500_000) }
        }
        throw EmbeddedPostgresError(
            "cannot start PostgreSQL in \(pgData): \(outcome.output)\nlast lines of \(clusterDirectory)/server.log:\n"
                + logTail())
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
        let log = (try? String(contentsOfFile: clusterDirectory + "/server.log", encoding: .utf8)) ?? ""
        return log.split(separator: "\n").suffix(10).joined(separator: "\n")
    }
}

public struct EmbeddedPostgresError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
