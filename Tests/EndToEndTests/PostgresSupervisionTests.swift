import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The embedded PostgreSQL ends under a running `findmy serve` (a `kill -9`, a disk that fills):
/// findmy notices, says so in `/healthz`, starts it again with a back-off until it runs, and the
/// projector and the reads resume by themselves, every acknowledged fix projected, without a
/// restart of findmy (docs/postgres.md, "Supervision").
@Suite(.serialized) struct PostgresSupervisionTests {
    @Test func aKilledPostmasterIsRestartedAndReadsResume() throws {
        let data = ScratchDirectory("findmy-pgsup")
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let site = try Site(server: server, data: data.path)
        try site.report(10)
        #expect(site.waitUntilReadsSeeEveryFix())

        let first = try #require(site.cluster.postmasterPID())
        kill(first, SIGKILL)
        #expect(
            try waitUntil { try site.postgresHealth()?["restarts"] == .integer(1) },
            "findmy did not restart the killed PostgreSQL: \(site.postgresHealthText)")
        let health = try #require(try site.postgresHealth())
        #expect(health["state"] == .string("running"))
        #expect(try health["last_exit"]?.stringValue.contains("killed by signal 9") == true, "\(health)")
        #expect(site.cluster.postmasterPID() != first)

        try site.report(10)
        #expect(site.waitUntilReadsSeeEveryFix(), "reads or the projector did not resume")
        #expect(
            try waitUntil { try site.everyServiceRunsAndTheProjectorsAreWell() },
            "\((try? site.health()).map { "\($0)" } ?? "")")
    }

    /// PostgreSQL dies of a full disk and cannot start while the disk stays full: findmy keeps
    /// trying with its back-off and says `restarting` (reads answer 503); once the space is freed
    /// the next attempt brings it back and reads answer 200 with every acknowledged fix.
    @Test(.enabled(if: getuid() == 0, "mounts a tmpfs"))
    func aClusterThatDiedOfAFullDiskComesBackOnceSpaceIsFreed() throws {
        let disk = try TmpfsMount(megabytes: 96)
        defer { disk.remove() }
        let server = try ServerProcess(data: disk.dataDirectory, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let site = try Site(server: server, data: disk.dataDirectory)
        try site.report(20)
        #expect(site.waitUntilReadsSeeEveryFix())
        let first = try #require(site.cluster.postmasterPID())

        try disk.fill()
        // WAL that needs a new segment on the full disk: the WAL writer panics, and the recovery
        // after it fails its end-of-recovery checkpoint the same way, so the postmaster shuts down
        // ("shutting down due to startup process failure"), as a long drain would make it do.
        // `pg_switch_wal` only brings the segment's end forward.
        if let connection = try? PostgresConnection(site.cluster.conninfo) {
            for sql in [
                "CREATE TABLE public.disk_full_probe_1 (n int)", "SELECT pg_switch_wal()",
                "CREATE TABLE public.disk_full_probe_2 (n int)",
            ] {
                _ = try? connection.execute(sql)
            }
            connection.close()
        }
        #expect(
            try waitUntil { try site.postgresHealth()?["last_exit"] != nil },
            "PostgreSQL did not end of the full disk: \(site.postgresHealthText)")
        #expect(
            (try? site.postgresHealth()?["last_exit"]?.stringValue.contains("No space left on device"))
                == true,
            "\(site.postgresHealthText)")
        // While the disk stays full, each start either fails (a file findmy writes first) or
        // becomes a server whose recovery keeps crashing and reinitialising: "restarting" either
        // way, and never "running".
        func stillRestarting() throws -> Bool {
            let health = try site.postgresHealth()
            return health?["state"] == .string("restarting") && health?["error"] != nil
                && (health?["failed_attempts"] != nil)
                && (health?["attempt_running_s"] != nil || health?["next_attempt_in_s"] != nil)
        }
        #expect(
            try waitUntil { try stillRestarting() },
            "findmy did not say that PostgreSQL is down and being restarted: \(site.postgresHealthText)")
        #expect(try site.status() == "degraded")
        #expect(try site.readStatus() == 503)
        #expect(try stillRestarting(), "\(site.postgresHealthText)")

        disk.free()
        #expect(
            try waitUntil { try site.postgresHealth()?["state"] == .string("running") },
            "PostgreSQL did not come back after the space was freed: \(site.postgresHealthText)")
        let health = try #require(try site.postgresHealth())
        #expect(health["restarts"] == .integer(1))
        #expect(site.cluster.postmasterPID() != first)
        #expect(site.waitUntilReadsSeeEveryFix(), "reads or the projector did not resume")
        try site.report(10)
        #expect(site.waitUntilReadsSeeEveryFix())
        #expect(
            try waitUntil { try site.everyServiceRunsAndTheProjectorsAreWell() },
            "\((try? site.health()).map { "\($0)" } ?? "")")
    }
}

/// One user with one device on a running server, its acknowledged fixes counted (also
/// ProjectorOutageTests').
final class Site {
    let server: ServerProcess
    let connection: HTTPConnection
    let cluster: EmbeddedPostgres
    let userToken: String
    let deviceToken: String
    private(set) var acknowledged = 0

    init(server: ServerProcess, data: String) throws {
        self.server = server
        connection = HTTPConnection(address: server.address)
        cluster = try EmbeddedPostgres(dataDirectory: data)
        userToken = try addUser("ada", data: data)
        let device = try enrol(connection, userToken: userToken, uuid: UUID().uuidString)
        deviceToken = try #require(device.string("device_token"))
    }

    /// `count` reports of two fixes each, every fix at a place of its own.
    func report(_ count: Int) throws {
        for _ in 0..<count {
            let latitude = 52.0 + Double(acknowledged) / 10_000
            let answer = try post(
                connection, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString,
                    fixes: [fixJSON(latitude: latitude), fixJSON(latitude: latitude, secondsAgo: 30)]))
            #expect(answer.status == 200, "\(answer.body)")
            if answer.status == 200 { acknowledged += 2 }
        }
    }

    func health() throws -> JSONValue { try JSONParser.parse(try connection.send("GET", "/healthz").body) }
    func postgresHealth() throws -> JSONValue? { try health()["services"]?["postgres"] }
    /// For a failure's message.
    var postgresHealthText: String { (try? postgresHealth()).map { "\($0)" } ?? "no answer" }
    func status() throws -> String? { try health()["status"]?.stringValue }

    /// Not `status`: a compaction run that fell in the outage keeps its error until its next
    /// interval (docs/postgres.md, "Supervision"), which is the compactor's to say.
    func everyServiceRunsAndTheProjectorsAreWell() throws -> Bool {
        let health = try health()
        let services = try health["services"]?.objectValue.members ?? []
        return !services.isEmpty && services.allSatisfy { $0.value["state"] == .string("running") }
            && health["projector"]?["error"] == nil && health["geofences"]?["error"] == nil
            && health["projector"]?["lag_offsets"] == .integer(0)
    }
    func readStatus() throws -> Int { try get(connection, "/api/find-my/devices", token: userToken).status }

    /// Reads answer 200 and the projection holds every acknowledged fix once.
    func waitUntilReadsSeeEveryFix() -> Bool {
        waitUntil {
            guard (try? readStatus()) == 200,
                let pg = try? PostgresConnection(cluster.conninfo)
            else { return false }
            defer { pg.close() }
            return
                (try? pg.execute(
                    "SELECT count(DISTINCT (log_offset, fix_index)) FROM findmy.device_locations"
                )
                .int64(0, 0)) == Int64(acknowledged)
        }
    }
}

/// A small tmpfs (root only) holding a data directory, for a disk that fills; `remove` deletes the
/// cluster made for it (with its OS user), unmounts and removes the mount point.
private final class TmpfsMount {
    let path: String
    var dataDirectory: String { path + "/data" }
    var fillerPath: String { path + "/filler" }

    init(megabytes: Int) throws {
        var template = Array((NSTemporaryDirectory() + "findmy-tmpfs-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw TestFailure("mkdtemp: \(String(cString: strerror(errno)))")
        }
        path = String(cString: made)
        // 0755: the cluster's OS user passes through it to DATA_DIR/postgres.
        let mounted = try Self.run(
            "/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0755", "tmpfs", path])
        guard mounted == 0 else {
            rmdir(path)
            throw TestFailure("cannot mount a tmpfs on \(path)")
        }
    }

    /// Writes a file until the disk has no byte left.
    func fill() throws {
        let descriptor = open(fillerPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw TestFailure("cannot create \(fillerPath)") }
        defer { close(descriptor) }
        let block = [UInt8](repeating: 0x55, count: 1 << 16)
        while true {
            let written = block.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                guard errno == ENOSPC else { throw TestFailure("write: \(String(cString: strerror(errno)))") }
                break
            }
            if written == 0 { break }
        }
        // The last block may have fitted in part: a byte at a time takes what is left.
        var byte: UInt8 = 0x55
        while write(descriptor, &byte, 1) == 1 {}
    }

    func free() { unlink(fillerPath) }

    func remove() {
        free()
        if FileManager.default.fileExists(atPath: dataDirectory + "/postgres"),
            let cluster = try? EmbeddedPostgres(dataDirectory: dataDirectory)
        {
            try? cluster.destroy()
        }
        // A lazy unmount when something still holds a file in it (a server that did not stop).
        if (try? Self.run("/bin/umount", [path])) != 0 { _ = try? Self.run("/bin/umount", ["-l", path]) }
        rmdir(path)
    }

    private static func run(_ executable: String, _ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}
