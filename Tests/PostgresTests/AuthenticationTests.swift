import Foundation
import Postgres
import Testing

/// The embedded cluster lets in only a client holding the secret in `DATA_DIR/postgres.pgpass`:
/// never `trust`, and a cluster created with trust by an earlier findmy is moved over once.
extension PostgresTests {
    @Test func theEmbeddedClusterRefusesAConnectionWithoutItsSecret() throws {
        let cluster = Cluster.shared
        #expect(try Cluster.connect().execute("SELECT current_user").string(0, 0) == "findmy")
        expectRefused(cluster, passfile: nil)
        try expectOnlySecretRules(cluster)
        try expectPrivatePasswordFile(cluster)
        if geteuid() == 0 {
            let owner = try #require(ownerName(cluster.pgData + "/PG_VERSION"))
            #expect(owner != "postgres" && owner.hasPrefix("findmy-"), "PGDATA is owned by \(owner)")
            #expect(cluster.osUser == owner)
        }
    }
}

@Suite struct EmbeddedAuthenticationUpgradeTests {
    /// A cluster made the way findmy made it before it had a secret: initdb with `trust` on the
    /// socket, run as the shared `postgres` user when root.
    func makeTrustCluster(_ dataDirectory: String, binDirectory: String) throws {
        let clusterDirectory = dataDirectory + "/postgres"
        try FileManager.default.createDirectory(
            atPath: clusterDirectory, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        var prefix: [String] = []
        if geteuid() == 0, let postgres = getpwnam("postgres") {
            #expect(chown(clusterDirectory, postgres.pointee.pw_uid, postgres.pointee.pw_gid) == 0)
            prefix = ["/usr/sbin/runuser", "-u", "postgres", "--"]
        }
        let status = try runTool(
            prefix + [
                binDirectory + "/initdb", "-D", clusterDirectory + "/data", "--username=findmy",
                "--auth-local=trust", "--auth-host=reject", "--encoding=UTF8", "--locale=C",
                "--no-instructions",
            ])
        try #require(status == 0, "initdb failed")
        let conf = try #require(FileHandle(forWritingAtPath: clusterDirectory + "/data/postgresql.conf"))
        _ = try conf.seekToEnd()
        conf.write(Data("\ninclude_if_exists = 'findmy.conf'\n".utf8))
        try conf.close()
    }

    @Test func aTrustClusterOfAnEarlierVersionIsMovedToTheSecretAndThenRefusesTrust() throws {
        let data = NSTemporaryDirectory() + "findmy-pgupgrade-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: data) }
        try makeTrustCluster(data, binDirectory: try EmbeddedPostgres(dataDirectory: data).binDirectory)
        let ownerBefore = ownerName(data + "/postgres/data/PG_VERSION")
        #expect(
            try String(contentsOfFile: data + "/postgres/data/pg_hba.conf", encoding: .utf8).contains("trust")
        )

        let notes = LogLines()
        var configuration = EmbeddedPostgres.Configuration(dataDirectory: data)
        configuration.log = { notes.append($0) }
        let cluster = try EmbeddedPostgres(configuration)
        defer { try? cluster.destroy() }
        try cluster.start()
        #expect(notes.lines.contains { $0.contains("scram-sha-256") }, "\(notes.lines)")
        #expect(
            try PostgresConnection(cluster.conninfo).execute("SELECT current_user").string(0, 0) == "findmy")
        expectRefused(cluster, passfile: nil)
        try expectOnlySecretRules(cluster)
        try expectPrivatePasswordFile(cluster)
        // Upgrading does not move the files to another OS user: the cluster keeps its owner.
        #expect(ownerName(cluster.pgData + "/PG_VERSION") == ownerBefore)
        #expect(cluster.osUser == (geteuid() == 0 ? ownerBefore : nil))
        let verifier = try PostgresConnection(cluster.conninfo).execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'findmy'"
        ).string(0, 0)
        #expect(verifier?.hasPrefix("SCRAM-SHA-256$") == true)

        // A crash after the new secret was written and before PostgreSQL took it, with pg_hba.conf
        // still trusting the socket: the next start sets the secret of the file and drops trust.
        let oldSecret = try secret(of: cluster)
        try cluster.stop()
        let newSecret = String(repeating: "7e", count: 32)
        try "*:*:*:findmy:\(newSecret)\n".write(
            toFile: cluster.passwordFile, atomically: false, encoding: .utf8)
        try "local all all trust\n".write(
            toFile: cluster.pgData + "/pg_hba.conf", atomically: false, encoding: .utf8)
        try cluster.start()
        #expect(try secret(of: cluster) == newSecret)
        #expect(try PostgresConnection(cluster.conninfo).execute("SELECT 1").int64(0, 0) == 1)
        expectRefused(cluster, passfile: nil)
        let stale = NSTemporaryDirectory() + "findmy-stale-\(UUID().uuidString.prefix(8)).pgpass"
        defer { unlink(stale) }
        #expect(
            FileManager.default.createFile(
                atPath: stale, contents: Data("*:*:*:findmy:\(oldSecret)\n".utf8),
                attributes: [.posixPermissions: 0o600]))
        expectRefused(cluster, passfile: stale)
        try expectOnlySecretRules(cluster)

        // A password file others could read (libpq would ignore it, and the secret may have been
        // read): replaced by a new secret at the next start, which the server then takes.
        try cluster.stop()
        #expect(chmod(cluster.passwordFile, 0o644) == 0)
        try cluster.start()
        try expectPrivatePasswordFile(cluster)
        #expect(try secret(of: cluster) != newSecret)
        #expect(try PostgresConnection(cluster.conninfo).execute("SELECT 1").int64(0, 0) == 1)
        expectRefused(cluster, passfile: nil)
    }
}

/// `host=... user=findmy` on the cluster's socket with another password file (nil: none).
func expectRefused(
    _ cluster: EmbeddedPostgres, passfile: String?, sourceLocation: SourceLocation = #_sourceLocation
) {
    let file = passfile ?? "/nonexistent/findmy.pgpass"
    let conninfo = "host='\(cluster.socketDirectory)' port=5432 dbname=findmy user=findmy passfile='\(file)'"
    _ = expectPostgresError(
        kind: .connect, { _ = try PostgresConnection(conninfo) }, sourceLocation: sourceLocation)
}

/// pg_hba.conf holds only scram-sha-256 lines on the socket: no `trust`, no TCP.
func expectOnlySecretRules(_ cluster: EmbeddedPostgres, sourceLocation: SourceLocation = #_sourceLocation)
    throws
{
    let rules = try String(contentsOfFile: cluster.pgData + "/pg_hba.conf", encoding: .utf8)
        .split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.allSatisfy(\.isWhitespace) }
    #expect(!rules.isEmpty, sourceLocation: sourceLocation)
    for rule in rules {
        let fields = rule.split(whereSeparator: \.isWhitespace)
        #expect(
            fields.first == "local" && fields.last == "scram-sha-256", "\(rule)",
            sourceLocation: sourceLocation)
    }
}

/// The secret sits in a 0600 file of findmy's user, and never in the conninfo.
func expectPrivatePasswordFile(_ cluster: EmbeddedPostgres, sourceLocation: SourceLocation = #_sourceLocation)
    throws
{
    var info = stat()
    #expect(lstat(cluster.passwordFile, &info) == 0, sourceLocation: sourceLocation)
    #expect(info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o777 == 0o600, sourceLocation: sourceLocation)
    #expect(info.st_uid == geteuid(), sourceLocation: sourceLocation)
    let secret = try secret(of: cluster)
    #expect(secret.count >= 32, sourceLocation: sourceLocation)
    #expect(!cluster.conninfo.contains(secret), sourceLocation: sourceLocation)
    #expect(cluster.conninfo.contains(cluster.passwordFile), sourceLocation: sourceLocation)
}

func secret(of cluster: EmbeddedPostgres) throws -> String {
    let line = try String(contentsOfFile: cluster.passwordFile, encoding: .utf8).split(separator: "\n")[0]
    return String(line.split(separator: ":").last ?? "")
}

func ownerName(_ path: String) -> String? {
    var info = stat()
    guard stat(path, &info) == 0, let entry = getpwuid(info.st_uid) else { return nil }
    return String(cString: entry.pointee.pw_name)
}

/// Runs a tool that exits by itself (not a server) and returns its exit status.
func runTool(_ argv: [String]) throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: argv[0])
    process.arguments = Array(argv.dropFirst())
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    return process.terminationStatus
}
