import Foundation
import HTTPClient
import Postgres
import Testing

/// Two findmy instances on one machine: neither the other instance's cluster nor the shared
/// `postgres` OS user can read the first one's locations (docs/postgres.md, "Who can read what").
@Suite struct ClusterIsolationTests {
    static let latitude = "47.123457"

    /// `argv` as `user` through runuser; its exit status and everything it printed.
    func run(as user: String, _ argv: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
        process.arguments = ["-u", user, "--"] + argv
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }

    @Test func anotherInstanceAndThePostgresUserCannotReadTheFirstInstancesLocations() throws {
        let a = ScratchDirectory("findmy-isolation-a")
        let b = ScratchDirectory("findmy-isolation-b")
        // Runs last: the directories (and their clusters) go only after both servers stopped.
        defer { withExtendedLifetime((a, b)) {} }
        let serverA = try ServerProcess(data: a.path, extraArguments: ["--projector", "on"])
        defer { serverA.stop() }
        let serverB = try ServerProcess(data: b.path, extraArguments: ["--projector", "on"])
        defer { serverB.stop() }
        let connection = HTTPConnection(address: serverA.address)
        let token = try addUser("alice", data: a.path)
        let device = try enrol(connection, userToken: token, uuid: UUID().uuidString)
        let report = try post(
            connection, "/api/find-my/report", token: device.string("device_token")!,
            body: reportBody(
                batchID: UUID().uuidString, fixes: [fixJSON(latitude: Double(Self.latitude)!)]))
        #expect(report.status == 200, "\(report.body)")
        try waitForProjector(a.path)
        _ = try addUser("bob", data: b.path)
        try waitForProjector(b.path)

        let clusterA = try EmbeddedPostgres(dataDirectory: a.path)
        let clusterB = try EmbeddedPostgres(dataDirectory: b.path)
        let select = "SELECT latitude FROM findmy.device_locations"
        // With A's own secret, A's location is there: the refusals below are not an empty table.
        let own = try PostgresConnection(clusterA.conninfo).execute(select)
        #expect(own.rowCount == 1 && own.string(0, 0) == Self.latitude)
        // B's secret, or none, on A's socket (as root, who can reach the socket): refused.
        expectRefused(clusterA, passfile: clusterB.passwordFile)
        expectRefused(clusterA, passfile: nil)

        guard geteuid() == 0 else { return }
        // Each cluster runs as an OS user of its own: not postgres, not the other instance's.
        let ownerA = try #require(ownerName(clusterA.pgData + "/PG_VERSION"))
        let ownerB = try #require(ownerName(clusterB.pgData + "/PG_VERSION"))
        #expect(ownerA != "postgres" && ownerB != "postgres" && ownerA != ownerB, "\(ownerA) \(ownerB)")
        #expect(clusterA.osUser == ownerA && clusterB.osUser == ownerB)
        // B's cluster user (what B's superuser reads files as, pg_read_binary_file) cannot open
        // A's files.
        let readByB = try run(as: ownerB, ["/bin/cat", clusterA.pgData + "/PG_VERSION"])
        #expect(readByB.status != 0, "\(readByB.output)")

        guard getpwnam("postgres") != nil else { return }
        let readByPostgres = try run(as: "postgres", ["/bin/cat", clusterA.pgData + "/PG_VERSION"])
        #expect(readByPostgres.status != 0, "\(readByPostgres.output)")
        let psql = try run(
            as: "postgres",
            [
                clusterA.binDirectory + "/psql", "-w", "-h", clusterA.socketDirectory, "-p", "5432", "-U",
                "findmy",
                "-d", "findmy", "-Atc", select,
            ])
        #expect(psql.status != 0 && !psql.output.contains(Self.latitude), "\(psql.output)")
    }
}

/// A connection to `cluster`'s socket as findmy's role with another password file (nil: none) is
/// refused.
func expectRefused(
    _ cluster: EmbeddedPostgres, passfile: String?, sourceLocation: SourceLocation = #_sourceLocation
) {
    let file = passfile ?? "/nonexistent/findmy.pgpass"
    let conninfo = "host='\(cluster.socketDirectory)' port=5432 dbname=findmy user=findmy passfile='\(file)'"
    #expect(throws: PostgresError.self, sourceLocation: sourceLocation) {
        _ = try PostgresConnection(conninfo)
    }
}

func ownerName(_ path: String) -> String? {
    var info = stat()
    guard stat(path, &info) == 0, let entry = getpwuid(info.st_uid) else { return nil }
    return String(cString: entry.pointee.pw_name)
}
