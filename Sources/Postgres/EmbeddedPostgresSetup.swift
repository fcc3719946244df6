import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A Unix socket path is at most 107 bytes (`sun_path` is 108, with the terminating NUL).
let socketPathBytesMax = 107

extension EmbeddedPostgres {
    func prepareDirectories() throws(EmbeddedPostgresError) {
        try makeDirectory(clusterDirectory, intermediate: true)
        try makeDirectory(socketDirectory, intermediate: socketDirectory.hasPrefix(clusterDirectory))
        guard let osUser else { return }
        // A new OS user is neither owner nor group of anything: only the "others" bits let it
        // through. Refused before the user exists, so a refused start leaves none behind.
        if LocalFiles.account(named: osUser) == nil {
            let closed = directoriesClosedToOthers(LocalFiles.parentDirectory(clusterDirectory))
            guard closed.isEmpty else { throw unreachableClusterError(osUser, closed, clusterDirectory) }
        }
        let (uid, gid) = try ensureOSUser(
            osUser, comment: "findmy PostgreSQL of " + LocalFiles.parentDirectory(clusterLink))
        try checkOwner(socketDirectory, allowed: [0, uid])
        for path in [clusterDirectory, socketDirectory] where chown(path, uid, gid) != 0 {
            throw EmbeddedPostgresError(
                "cannot give \(path) to OS user \(osUser): \(String(cString: strerror(errno)))")
        }
        let access = try runCommand(
            "/usr/bin/test", ["-w", clusterDirectory, "-a", "-x", clusterDirectory], as: osUser)
        guard access.succeeded else {
            throw EmbeddedPostgresError(
                "PostgreSQL runs as OS user \(osUser), who cannot reach \(clusterDirectory): make the data directory "
                    + "and every directory above it searchable by that user (chmod o+x), or choose another data directory"
            )
        }
    }

    func initCluster(secret: String) throws(EmbeddedPostgresError) {
        let building = pgData + ".initdb"
        try? LocalFiles.removeTree(building)
        // initdb reads the role's password from a file, as the cluster's OS user: one in the
        // cluster directory (0700, that user's), 0600, gone once initdb has read it.
        let passwordInput = clusterDirectory + "/initdb.pwfile"
        try writePrivateFile(passwordInput, secret + "\n", owner: clusterFileOwner())
        defer { unlink(passwordInput) }
        let outcome = try runCommand(
            binDirectory + "/initdb",
            [
                "-D", building, "--username=\(configuration.user)", "--pwfile=\(passwordInput)",
                "--auth-local=scram-sha-256", "--auth-host=reject",
                "--encoding=UTF8", "--locale=C", "--no-instructions",
            ], as: osUser, in: clusterDirectory)
        guard outcome.succeeded else {
            throw EmbeddedPostgresError("initdb failed for \(building): \(outcome.output)")
        }
        let include =
            "\n# findmy's own settings, rewritten at every start\ninclude_if_exists = 'findmy.conf'\n"
        guard LocalFiles.append(include, to: building + "/postgresql.conf") else {
            throw EmbeddedPostgresError(
                "cannot add to \(building)/postgresql.conf: \(String(cString: strerror(errno)))")
        }
        // Renamed only when complete, so a crash during initdb leaves nothing that looks like a cluster.
        guard rename(building, pgData) == 0 else {
            throw EmbeddedPostgresError(
                "cannot rename \(building) to \(pgData): \(String(cString: strerror(errno)))")
        }
        configuration.log(
            "created a PostgreSQL cluster in \(pgData) (OS user \(osUser ?? LocalFiles.processUserName()), no TCP port)"
        )
    }

    func checkVersion() throws(EmbeddedPostgresError) {
        let cluster =
            LocalFiles.readText(pgData + "/PG_VERSION").map(trimmed) ?? "?"
        let version = try runCommand(binDirectory + "/pg_ctl", ["--version"]).output
        let binaries = version.split(separator: " ").last { $0.first?.isNumber == true }?.split(
            separator: "."
        ).first
        guard let binaries, String(binaries) == cluster else {
            throw EmbeddedPostgresError(
                "the cluster in \(pgData) was created by PostgreSQL \(cluster) but \(binDirectory) is '\(version)': "
                    + "set FINDMY_PG_BIN=/usr/lib/postgresql/\(cluster)/bin, or upgrade the cluster with pg_upgrade"
            )
        }
    }

    /// Settings findmy owns, rewritten at every start so a moved socket directory takes effect.
    func writeSettings() throws(EmbeddedPostgresError) {
        let socket = socketDirectory.replacing("'", with: "''")
        let text = """
            # Written by findmy at every start; edits here are lost (use ALTER SYSTEM instead).
            listen_addresses = ''
            port = \(Self.port)
            unix_socket_directories = '\(socket)'
            unix_socket_permissions = 0700
            # A WAL segment past its checkpoint is deleted, not renamed for reuse with its old
            # bytes: erased rows then leave pg_wal at the compactor's checkpoint (docs/retention.md).
            wal_recycle = off
            # A new segment is not zero-filled first: with wal_recycle off every segment is new,
            # and filling 16 MB with zeros took a quarter of the projector's backend time during a
            # drain (docs/benchmarks.md). A new file holds no old bytes either way.
            wal_init_zero = off
            # A drain of millions of fixes writes gigabytes of WAL: fewer checkpoints during it mean
            # fewer full-page images; pg_wal may grow to max_wal_size (docs/postgres.md).
            # checkpoint_timeout stays at 5 minutes: erased rows leave pg_wal by it (docs/retention.md).
            max_wal_size = 4GB
            wal_compression = lz4
            wal_buffers = 16MB

            """
        try writePrivateFile(pgData + "/findmy.conf", text, owner: clusterFileOwner())
    }
}

/// `FINDMY_PG_BIN`, else the highest-numbered `/usr/lib/postgresql/N/bin` holding pg_ctl.
func findBinDirectory() throws(EmbeddedPostgresError) -> String {
    if let configured = LocalFiles.environment("FINDMY_PG_BIN") {
        guard LocalFiles.isExecutableFile(configured + "/pg_ctl") else {
            throw EmbeddedPostgresError(
                "FINDMY_PG_BIN=\(configured) holds no pg_ctl; point it at PostgreSQL's bin directory")
        }
        return configured
    }
    let versions = (LocalFiles.entries("/usr/lib/postgresql") ?? [])
        .compactMap { Int($0) }.sorted(by: >)
    guard
        let version = versions.first(where: {
            LocalFiles.isExecutableFile("/usr/lib/postgresql/\($0)/bin/pg_ctl")
        })
    else {
        throw EmbeddedPostgresError(
            "no PostgreSQL server found under /usr/lib/postgresql/*/bin: install postgresql-15 (ops/install-deps.sh), "
                + "set FINDMY_PG_BIN to a bin directory, or give findmy an external server's URL")
    }
    return "/usr/lib/postgresql/\(version)/bin"
}

func chooseSocketDirectory(_ clusterDirectory: String, _ log: (String) -> Void) -> String {
    let preferred = clusterDirectory + "/socket"
    let socketPath = preferred + "/.s.PGSQL.\(EmbeddedPostgres.port)"
    if socketPath.utf8.count <= socketPathBytesMax { return preferred }
    // FNV-1a of the cluster path: stable across restarts, distinct per data directory.
    let fallback = "/tmp/findmy-pg-" + String(fnv1a(clusterDirectory), radix: 16)
    log(
        "the socket path \(socketPath) is \(socketPath.utf8.count) bytes, over the \(socketPathBytesMax)-byte limit; using \(fallback) instead"
    )
    return fallback
}

/// Nil when not root. Else the owner of an existing cluster's files (PG_VERSION), so that a
/// cluster made by an earlier findmy as `postgres` keeps running as it; for a new cluster, the
/// data directory's own user.
func clusterOSUser(_ dataDirectory: String, instanceUser: String) -> String? {
    guard geteuid() == 0 else { return nil }
    let link = dataDirectory + "/postgres"
    let cluster = LocalFiles.linkTarget(link) ?? link
    var info = stat()
    if stat(cluster + "/data/PG_VERSION", &info) == 0, let name = LocalFiles.accountName(uid: info.st_uid) {
        return name
    }
    return instanceUser
}

/// `findmy-` and 16 hex digits of FNV-1a of the data directory's path (23 characters; a user name
/// may have 32): one OS user per data directory, the same across restarts.
public func instanceOSUserName(_ dataDirectory: String) -> String {
    let hash = String(fnv1a(dataDirectory), radix: 16)
    return "findmy-" + String(repeating: "0", count: 16 - hash.count) + hash
}

func fnv1a(_ text: String) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
    return hash
}

/// Runs `executable` to its end through Threads' `runChild`, as `user` when given (through
/// `runuser -u USER --`, which needs root); the output trimmed.
func runCommand(
    _ executable: String, _ arguments: [String], as user: String? = nil, in directory: String? = nil
) throws(EmbeddedPostgresError) -> ChildOutcome {
    let argv = user.map { [runuserPath, "-u", $0, "--", executable] + arguments } ?? [executable] + arguments
    do {
        let outcome = try runChild(argv, in: directory)
        return ChildOutcome(status: outcome.status, output: trimmed(outcome.output))
    } catch {
        throw EmbeddedPostgresError(error.description)
    }
}

private var runuserPath: String {
    ["/usr/sbin/runuser", "/sbin/runuser"].first { access($0, X_OK) == 0 } ?? "runuser"
}

/// Attempts of useradd and userdel: they fail at once when another one holds /etc/passwd's lock
/// (tests start clusters in parallel).
let accountCommandAttemptsMax = 10

func ensureOSUser(_ name: String, comment: String) throws(EmbeddedPostgresError) -> (uid_t, gid_t) {
    var outcome = ChildOutcome(status: 0, output: "")
    for attempt in 1...accountCommandAttemptsMax where LocalFiles.account(named: name) == nil {
        outcome = try runCommand(
            "/usr/sbin/useradd",
            [
                "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                "--shell", "/usr/sbin/nologin",
                "--comment", String(comment.map { $0 == ":" || $0.isNewline ? "_" : $0 }.prefix(200)), name,
            ])
        if !outcome.succeeded { usleep(UInt32(attempt) * 100_000) }
    }
    guard let account = LocalFiles.account(named: name) else {
        throw EmbeddedPostgresError("cannot create OS user \(name): \(outcome.output)")
    }
    return (account.uid, account.gid)
}

public func removeOSUser(_ name: String) throws(EmbeddedPostgresError) {
    var outcome = ChildOutcome(status: 0, output: "")
    for attempt in 1...accountCommandAttemptsMax where LocalFiles.account(named: name) != nil {
        outcome = try runCommand("/usr/sbin/userdel", [name])
        if !outcome.succeeded { usleep(UInt32(attempt) * 100_000) }
    }
    guard LocalFiles.account(named: name) == nil else {
        throw EmbeddedPostgresError("cannot delete OS user \(name): \(outcome.output)")
    }
}

func makeDirectory(_ path: String, intermediate: Bool) throws(EmbeddedPostgresError) {
    do {
        try LocalFiles.makeDirectory(path, mode: 0o700, intermediate: intermediate)
    } catch {
        throw EmbeddedPostgresError("cannot create directory \(path): \(error)")
    }
}

/// A directory under /tmp could have been made by anyone: it must be a real directory owned by us.
func checkOwner(_ path: String, allowed: [uid_t]) throws(EmbeddedPostgresError) {
    var status = stat()
    guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR, allowed.contains(status.st_uid)
    else {
        throw EmbeddedPostgresError(
            "\(path) is not a directory owned by root or the PostgreSQL user; remove it")
    }
}

/// Alive, not a zombie, and a postgres: after `kill -9`, an unreaped postmaster stays a zombie and
/// its PID can be reused by anything, and either would block the next start.
func isLivePostgres(_ pid: Int32) -> Bool {
    guard let stat = LocalFiles.readText("/proc/\(pid)/stat") else {
        return kill(pid, 0) == 0 && !LocalFiles.exists("/proc/self")
    }
    guard let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { return false }
    let name = stat[stat.index(after: open)..<close]
    let state = stat[stat.index(after: close)...].dropFirst().first
    return (name == "postgres" || name == "postmaster") && state != "Z" && state != "X"
}

/// Where an earlier findmy put the cluster of `dataDirectory` when its OS user could not pass
/// through the directories above it: `/var/lib/findmy/postgres-<FNV-1a of DATA_DIR in hex>`.
/// findmy no longer puts one there; `findmy purge` looks there.
public func outsideClusterDirectory(_ dataDirectory: String) -> String {
    let path = LocalFiles.absolutePath(dataDirectory)
    return "/var/lib/findmy/postgres-" + String(fnv1a(path), radix: 16)
}

/// The directories from `/` down to `path` that others cannot pass through (no `o+x`).
func directoriesClosedToOthers(_ path: String) -> [String] {
    var prefix = ""
    var closed: [String] = []
    for component in path.split(separator: "/") {
        prefix += "/" + component
        var info = stat()
        if stat(prefix, &info) == 0, info.st_mode & S_IXOTH == 0 { closed.append(prefix) }
    }
    return closed
}

/// Where the cluster lives: always `DATA_DIR/postgres`, so that everything findmy stores for a data
/// directory is under it and goes with it. When findmy is root the cluster runs as an OS user of
/// its own, who must pass through every directory above DATA_DIR: when one is closed to others (a
/// data directory under /root, or under a private `mktemp -d`), findmy refuses to start and names
/// the directories and the command that opens them, rather than keep movement history elsewhere.
/// A cluster an earlier findmy put in /var/lib/findmy (`DATA_DIR/postgres` a link to it) is still
/// used, and every start says where it is and how to move or delete it.
func resolveClusterDirectory(_ dataDirectory: String, osUser: String?, _ log: @Sendable (String) -> Void)
    throws(EmbeddedPostgresError) -> String
{
    let inside = dataDirectory + "/postgres"
    if let target = LocalFiles.linkTarget(inside) {
        log(
            "the PostgreSQL cluster of \(dataDirectory) lives outside it, in \(target) (made by an earlier findmy), "
                + "and deleting \(dataDirectory) would leave it behind. To move it inside: stop findmy, make every "
                + "directory above \(dataDirectory) passable (chmod o+x), then `rm \(inside) && mv \(target) \(inside)`; "
                + "or delete it (it is rebuilt from the log): `rm -r \(target) \(inside)`. "
                + "`findmy purge --data-dir \(dataDirectory)` removes it with everything else.")
        return target
    }
    guard let osUser, LocalFiles.exists(dataDirectory) else { return inside }
    // DATA_DIR itself is findmy's and opened for the cluster's user (Database.allowTraversal); the
    // directories above belong to the operator.
    let closed = directoriesClosedToOthers(LocalFiles.parentDirectory(dataDirectory))
    if !LocalFiles.exists(inside + "/data/PG_VERSION"), !closed.isEmpty {
        throw unreachableClusterError(osUser, closed, inside)
    }
    return inside
}

func unreachableClusterError(_ osUser: String, _ closed: [String], _ cluster: String) -> EmbeddedPostgresError
{
    EmbeddedPostgresError(
        "PostgreSQL runs as OS user \(osUser) (findmy runs as root), who cannot pass through "
            + closed.joined(separator: ", ")
            + " to reach its cluster in \(cluster). findmy keeps the cluster "
            + "inside the data directory, never elsewhere. Either allow passing through (not listing): "
            + "`chmod o+x " + closed.joined(separator: " ") + "`, or choose a data directory under "
            + "directories others can pass through (for example /var/lib/findmy/NAME), or run findmy as an "
            + "unprivileged user, or give findmy an external server with --database-url.")
}

/// The parent process of `pid` (field 4 of /proc/PID/stat), nil when it cannot be read.
func parentProcess(of pid: pid_t) -> pid_t? {
    guard let stat = LocalFiles.readText("/proc/\(pid)/stat"),
        let close = stat.lastIndex(of: ")")
    else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    return fields.count > 1 ? pid_t(fields[1]) : nil
}

/// The command name of `pid` (/proc/PID/comm), nil when it cannot be read.
func processName(_ pid: pid_t) -> String? {
    LocalFiles.readText("/proc/\(pid)/comm").map(trimmed)
}
