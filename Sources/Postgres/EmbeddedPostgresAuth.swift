import CPQ

#if canImport(Glibc)
    import Glibc
#endif

/// How findmy's role logs in to the embedded cluster: with a secret of 32 random bytes (64 hex
/// digits) in `DATA_DIR/postgres.pgpass`, a libpq password file (`*:*:*:findmy:SECRET`, mode 0600,
/// owned by findmy's user) that the conninfo names with `passfile=`, so the secret itself is in
/// no conninfo, command line or log. The server keeps only its SCRAM verifier, computed here
/// (`PQencryptPasswordConn`): the plain secret never reaches the server either.
///
/// `pg_hba.conf` is rewritten at every start to one rule, `local all "findmy" scram-sha-256`,
/// so no `trust` line survives an upgrade or an edit. findmy checks at every start that a
/// connection without the secret is refused.
///
/// Setting the secret (a cluster made with `trust` by an earlier findmy, a password file that was
/// lost or replaced): the file is written first; then for a moment the socket lets in, without a
/// password, findmy's own OS user only (`peer` authentication: the kernel says who connects, and
/// `pg_ident.conf` maps that one OS user to the role; not `trust`, which would let in the cluster's
/// OS user too); `ALTER ROLE ... PASSWORD` sets the verifier, and the rule goes back to
/// scram-sha-256. A crash at any point leaves the file's secret, which the next start sets again;
/// a rule left on disk is overwritten before the server starts.
extension EmbeddedPostgres {
    /// Bytes of randomness in the secret.
    static let secretBytes = 32
    /// How long a reload of `pg_hba.conf` may take to show (it is asynchronous: SIGHUP).
    static let reloadWaitMillisMax = 10_000

    /// The secret of `passwordFile`, which is created when missing. A file libpq would ignore (not
    /// a regular file, or readable by group or others) or not owned by this user is replaced by a
    /// new secret: the old one may have been read.
    func loadOrCreateSecret() throws(EmbeddedPostgresError) -> String {
        var info = stat()
        if lstat(passwordFile, &info) == 0 {
            if info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o077 == 0,
                let secret = readSecret()
            {
                return secret
            }
            configuration.log(
                "\(passwordFile) is not a private file of this user holding a secret (mode "
                    + String(info.st_mode & 0o7777, radix: 8)
                    + ", owner uid \(info.st_uid)); replacing it with a new secret")
        }
        var generator = SystemRandomNumberGenerator()  // getrandom(2) on Linux
        let secret = (0..<Self.secretBytes).map { _ in
            let byte = UInt8.random(in: 0...255, using: &generator)
            return String(byte >> 4, radix: 16) + String(byte & 0xf, radix: 16)
        }.joined()
        let user = configuration.user.replacing("\\", with: "\\\\").replacing(":", with: "\\:")
        try writePrivateFile(passwordFile, "*:*:*:\(user):\(secret)\n", owner: nil)
        return secret
    }

    private func readSecret() -> String? {
        guard let text = LocalFiles.readText(passwordFile),
            let line = text.split(separator: "\n").first, let secret = line.split(separator: ":").last,
            secret.count >= 2 * Self.secretBytes, secret.allSatisfy(\.isHexDigit)
        else { return nil }
        return String(secret)
    }

    /// Writes `pg_hba.conf` and `pg_ident.conf`; true when either changed (a running server then
    /// needs a reload). `peerForFindmy`: findmy's own OS user gets in without the secret.
    @discardableResult
    func writeAccessRules(peerForFindmy: Bool) throws(EmbeddedPostgresError) -> Bool {
        let role = "\"" + configuration.user.replacing("\"", with: "\"\"") + "\""
        let method = peerForFindmy ? "peer map=findmy" : "scram-sha-256"
        let rules = """
            # Written by findmy at every start; edits here are lost (docs/postgres.md). findmy's role
            # only, on the Unix socket only (no TCP port), with the secret in \(passwordFile).
            local all \(role) \(method)

            """
        let processUser = LocalFiles.processUserName()
        let identities = """
            # Written by findmy at every start: while findmy sets its role's password (peer, above),
            # only findmy's own OS user is let in as the role.
            findmy "\(processUser.replacing("\"", with: ""))" \(role)

            """
        var changed = false
        for (name, text) in [("pg_hba.conf", rules), ("pg_ident.conf", identities)] {
            let path = pgData + "/" + name
            if LocalFiles.readText(path) == text { continue }
            try writePrivateFile(path, text, owner: clusterFileOwner())
            changed = true
        }
        return changed
    }

    /// `pg_ctl reload`: the server rereads its settings and `pg_hba.conf` (asynchronously).
    func reload() throws(EmbeddedPostgresError) {
        let outcome = try pgCtl(["reload", "-D", pgData, "-s"])
        guard outcome.succeeded else {
            throw EmbeddedPostgresError("cannot reload PostgreSQL in \(pgData): \(outcome.output)")
        }
    }

    /// Connects with the secret; when the server refuses it for its password (the role has none,
    /// or another), sets the file's secret as the role's password, letting in findmy's OS user
    /// (peer) for that moment.
    func authenticate(secret: String) throws(EmbeddedPostgresError) {
        let refusal: PostgresError
        do {
            try PostgresConnection(conninfo(database: "postgres")).close()
            return
        } catch {
            guard error.message.contains("password") else {
                throw EmbeddedPostgresError("PostgreSQL in \(pgData) started but \(error)")
            }
            refusal = error
        }
        configuration.log(
            "PostgreSQL in \(pgData) refuses the secret of \(passwordFile) (\(refusal.message)): made by an "
                + "earlier findmy with trust, or the file is new; setting it (scram-sha-256)")
        try writeAccessRules(peerForFindmy: true)
        try reload()
        let admin = try awaitConnection()
        defer { admin.close() }
        guard let handle = admin.handle,
            let encrypted = PQencryptPasswordConn(handle, secret, configuration.user, "scram-sha-256")
        else {
            throw EmbeddedPostgresError(
                "cannot compute the password verifier for PostgreSQL in \(pgData): \(admin.lastError)")
        }
        let verifier = String(cString: encrypted)
        PQfreemem(encrypted)
        do {
            // ALTER ROLE takes no parameters; the verifier is base64, '$' and ':' (quoted anyway).
            try admin.executeScript(
                "ALTER ROLE \(PostgresConnection.quoteIdentifier(configuration.user)) PASSWORD '"
                    + verifier.replacing("'", with: "''") + "'")
        } catch {
            throw EmbeddedPostgresError("cannot set the password of PostgreSQL in \(pgData): \(error)")
        }
        try writeAccessRules(peerForFindmy: false)
        try reload()
        try awaitNoTrust()
        try awaitConnection().close()
        configuration.log("PostgreSQL in \(pgData) now requires the secret of \(passwordFile)")
    }

    /// Returns once a connection without the secret is refused: a reload takes effect a moment
    /// after `pg_ctl reload` returns, and no start may end while the socket lets anyone in without
    /// the secret (a `trust` rule of an earlier findmy still loaded, or the peer rule above).
    func awaitNoTrust() throws(EmbeddedPostgresError) {
        let without =
            "host=\(PostgresConnection.conninfoValue(socketDirectory)) port=\(Self.port) dbname='postgres' "
            + "user=\(PostgresConnection.conninfoValue(configuration.user)) "
            + "passfile=\(PostgresConnection.conninfoValue(pgData + "/no-password-file"))"
        let deadline = monotonicMillis() + Int64(Self.reloadWaitMillisMax)
        while true {
            guard let connection = try? PostgresConnection(without) else { return }
            connection.close()
            guard monotonicMillis() < deadline else {
                throw EmbeddedPostgresError(
                    "PostgreSQL in \(pgData) still lets in a connection without the secret after "
                        + "\(Self.reloadWaitMillisMax) ms; check \(pgData)/pg_hba.conf and its server log")
            }
            usleep(20_000)
        }
    }

    /// A connection with the normal conninfo, retried until a reload has taken effect.
    private func awaitConnection() throws(EmbeddedPostgresError) -> PostgresConnection {
        let deadline = monotonicMillis() + Int64(Self.reloadWaitMillisMax)
        while true {
            do {
                return try PostgresConnection(conninfo(database: "postgres"))
            } catch {
                guard monotonicMillis() < deadline else {
                    throw EmbeddedPostgresError("cannot connect to PostgreSQL in \(pgData): \(error)")
                }
            }
            usleep(20_000)
        }
    }

    /// The cluster's OS user's uid and gid, for files findmy writes inside PGDATA.
    func clusterFileOwner() -> (uid_t, gid_t)? {
        guard let osUser, let account = LocalFiles.account(named: osUser) else { return nil }
        return (account.uid, account.gid)
    }
}

/// Writes `text` to `path` through a temporary file created with mode 0600 (and given to `owner`),
/// fsynced and renamed over `path`: a crash leaves the old file or the new one, never a secret
/// readable by others for a moment.
func writePrivateFile(_ path: String, _ text: String, owner: (uid_t, gid_t)?) throws(EmbeddedPostgresError) {
    let temporary = path + ".new"
    unlink(temporary)
    let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else {
        throw EmbeddedPostgresError("cannot create \(temporary): \(String(cString: strerror(errno)))")
    }
    var failure: String?
    if fchmod(descriptor, 0o600) != 0 { failure = "chmod" }
    if failure == nil, let (uid, gid) = owner, fchown(descriptor, uid, gid) != 0 { failure = "chown" }
    let bytes = Array(text.utf8)
    if failure == nil, bytes.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) != bytes.count {
        failure = "write"
    }
    if failure == nil, fsync(descriptor) != 0 { failure = "fsync" }
    if failure == nil, rename(temporary, path) != 0 { failure = "rename to \(path)" }
    let error = errno
    close(descriptor)
    if let failure {
        unlink(temporary)
        throw EmbeddedPostgresError("cannot \(failure) \(temporary): \(String(cString: strerror(error)))")
    }
    let directory = open(LocalFiles.parentDirectory(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if directory >= 0 {
        fsync(directory)
        close(directory)
    }
}

func monotonicMillis() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

/// `PQping`: whether a server answers on `conninfo`'s socket, without logging in (so it says yes
/// even when the credentials would be refused).
func serverAnswers(_ conninfo: String) -> Bool {
    PQping(conninfo) == PQPING_OK
}
