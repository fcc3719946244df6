import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// The embedded PostgreSQL as an operator meets it: it never outlives `findmy serve` (not even a
/// `kill -9`), a cluster found running is adopted and stopped, `findmy compact` before any
/// projection exists.
@Suite(.serialized) struct EmbeddedClusterTests {
    /// Alive and not a zombie: a killed process may stay a zombie until its new parent reaps it.
    static func alive(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: close)...].dropFirst().first
        return state != "Z" && state != "X"
    }

    /// The postmaster and every process it started (its backends and auxiliary processes).
    static func clusterProcesses(_ postmaster: Int32) -> [Int32] {
        let all = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap {
            Int32($0)
        }
        return [postmaster]
            + all.filter { pid in
                guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                    let close = stat.lastIndex(of: ")")
                else { return false }
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                return fields.count > 1 && Int32(fields[1]) == postmaster
            }
    }

    /// A table written straight into the cluster, to tell after restarts that its data survived.
    static func writeCanary(_ cluster: EmbeddedPostgres) throws {
        try PostgresConnection(cluster.conninfo).executeScript(
            "CREATE TABLE IF NOT EXISTS canary (word text); INSERT INTO canary VALUES ('still here')")
    }

    static func readCanary(_ cluster: EmbeddedPostgres) throws -> String? {
        try PostgresConnection(cluster.conninfo).execute("SELECT word FROM canary").string(0, 0)
    }

    @Test func killingTheServerWithSIGKILLStopsItsPostgreSQL() throws {
        let scratch = ScratchDirectory()
        let data = scratch.path + "/data"
        let server = try ServerProcess(data: data, extraArguments: ["--projector", "on"])
        let cluster = try EmbeddedPostgres(dataDirectory: data)
        try Self.writeCanary(cluster)
        let postmaster = try #require(cluster.postmasterPID())
        let processes = Self.clusterProcesses(postmaster)
        #expect(processes.count > 1, "a running cluster has backends and auxiliary processes")

        server.kill9()
        // Generous: a fast shutdown ends with a checkpoint.
        let gone = waitUntil(timeoutSeconds: 30) { processes.allSatisfy { !Self.alive($0) } }
        #expect(gone, "still running after findmy serve was killed: \(processes.filter(Self.alive))")
        #expect(cluster.postmasterPID() == nil)

        let again = try ServerProcess(data: data, extraArguments: ["--projector", "on"])
        #expect(try HTTPConnection(address: again.address).send("GET", "/healthz").status == 200)
        #expect(try Self.readCanary(cluster) == "still here")
        #expect(again.stop() == 0)
        #expect(
            waitUntil(timeoutSeconds: 30) { cluster.postmasterPID() == nil }, "PostgreSQL outlived SIGTERM")
    }

    /// A cluster left running by something other than a live findmy (here: started by this test
    /// process, as an earlier findmy's `pg_ctl start` left one) is adopted: the server stops it.
    @Test func aClusterFoundRunningAtStartIsStoppedAtCleanShutdown() throws {
        let scratch = ScratchDirectory()
        let data = scratch.path + "/data"
        // As findmy makes it: passable by the cluster's OS user.
        try FileManager.default.createDirectory(
            atPath: data, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o711])
        let leftOver = try EmbeddedPostgres(dataDirectory: data)
        try leftOver.start()
        try Self.writeCanary(leftOver)
        let found = try #require(leftOver.postmasterPID())

        let server = try ServerProcess(data: data, extraArguments: ["--projector", "on"])
        #expect(try HTTPConnection(address: server.address).send("GET", "/healthz").status == 200)
        #expect(try Self.readCanary(leftOver) == "still here")
        #expect(server.stop() == 0)
        #expect(
            waitUntil(timeoutSeconds: 30) { leftOver.postmasterPID() == nil && !Self.alive(found) },
            "the cluster found running at start still runs after the server's clean shutdown")
        #expect(
            server.process.standardError.contains("adopting PostgreSQL"), "\(server.process.standardError)")
        try leftOver.stop()  // reaps this process's child
    }

    /// A data directory with a log but no projection (no server with a projector ever ran on it):
    /// compaction has nothing to delete in PostgreSQL, says so and succeeds.
    @Test func compactWithoutAProjectionSucceedsAndSaysSo() throws {
        let scratch = ScratchDirectory()
        let data = scratch.path + "/data"
        _ = try addUser("anna", data: data)
        let compact = try FindmyProcess.run(["compact", "--data-dir", data])
        #expect(compact.status == 0, "\(compact.output)\n\(compact.error)")
        #expect(compact.output.contains("log: removed 0 fixes"), "\(compact.output)")
        #expect(
            compact.output.contains("database: no projection to compact yet"),
            "\(compact.output)\n\(compact.error)")

        let json = try FindmyProcess.run(["compact", "--data-dir", data, "--json"])
        #expect(json.status == 0, "\(json.output)\n\(json.error)")
        let report = try JSONParser.parse(json.output)
        #expect(try report["database"]?["skipped"]?.stringValue.contains("no projection") == true)
        #expect(try report["database"]?["location_rows_deleted"]?.int64Value == 0)
    }

    /// `findmy purge` removes the data directory, the cluster (stopped), a cluster an earlier
    /// findmy put in /var/lib/findmy, and the OS user made for the cluster; without --yes and
    /// without a terminal it deletes nothing.
    @Test func purgeRemovesEverythingStoredForADataDirectory() throws {
        let scratch = ScratchDirectory()
        let data = scratch.path + "/data"
        let server = try ServerProcess(data: data, extraArguments: ["--projector", "on"])
        let cluster = try EmbeddedPostgres(dataDirectory: data)
        try Self.writeCanary(cluster)
        #expect(server.stop() == 0)
        // A cluster left in the old place by an earlier findmy, for this same data directory.
        let outside = outsideClusterDirectory(data)
        try FileManager.default.createDirectory(atPath: outside + "/data", withIntermediateDirectories: true)
        try Data("old history".utf8).write(to: URL(fileURLWithPath: outside + "/data/history"))
        let user = instanceOSUserName(URL(fileURLWithPath: data).standardizedFileURL.path)
        if getuid() == 0 { #expect(getpwnam(user) != nil, "the cluster runs as an OS user of its own") }

        let unconfirmed = try FindmyProcess.run(["purge", "--data-dir", data])
        #expect(unconfirmed.status != 0)
        #expect(unconfirmed.error.contains("--yes"), "\(unconfirmed.error)")
        #expect(FileManager.default.fileExists(atPath: data + "/log"))
        #expect(FileManager.default.fileExists(atPath: outside + "/data/history"))

        let purge = try FindmyProcess.run(["purge", "--data-dir", data, "--yes"])
        #expect(purge.status == 0, "\(purge.output)\n\(purge.error)")
        #expect(!FileManager.default.fileExists(atPath: data))
        #expect(!FileManager.default.fileExists(atPath: outside))
        #expect(getpwnam(user) == nil)
        #expect(purge.output.contains(outside), "\(purge.output)")
        #expect(cluster.postmasterPID() == nil)
    }

    /// As root, a data directory under a directory others cannot pass through: findmy refuses to
    /// start and says which directories to open, and puts no cluster anywhere else.
    @Test func aDataDirectoryTheClusterUserCannotReachIsRefusedWithTheFix() throws {
        guard getuid() == 0 else { return }  // only root runs the cluster as another user
        let scratch = ScratchDirectory()
        let closed = scratch.path + "/private"
        try FileManager.default.createDirectory(
            atPath: closed, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let data = closed + "/data"
        let refused = try FindmyProcess.run([
            "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--projector", "on",
        ])
        #expect(refused.status != 0)
        let standardized = URL(fileURLWithPath: closed).standardizedFileURL.path
        #expect(refused.error.contains("chmod o+x \(standardized)"), "\(refused.error)")
        #expect(refused.output.isEmpty, "a refused server prints no URL")
        let placed = URL(fileURLWithPath: data).standardizedFileURL.path
        #expect(!FileManager.default.fileExists(atPath: outsideClusterDirectory(placed)))
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: data + "/postgres")) == nil)
    }

    /// As root, a data directory whose cluster came from elsewhere (its files owned by a user id
    /// this machine does not know, as `tar` restores them) under a directory others cannot pass
    /// through: findmy refuses before it makes an OS user for a cluster it cannot run.
    @Test func aRefusedDataDirectoryGetsNoOSUser() throws {
        guard getuid() == 0 else { return }  // only root runs the cluster as another user
        let scratch = ScratchDirectory()
        let closed = scratch.path + "/private"
        try FileManager.default.createDirectory(
            atPath: closed, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let data = closed + "/data"
        let pgData = data + "/postgres/data"
        try FileManager.default.createDirectory(atPath: pgData, withIntermediateDirectories: true)
        try Data("15\n".utf8).write(to: URL(fileURLWithPath: pgData + "/PG_VERSION"))
        var unknownID: uid_t = 54_321
        while getpwuid(unknownID) != nil { unknownID += 1 }
        #expect(chown(pgData + "/PG_VERSION", unknownID, unknownID) == 0)
        let user = instanceOSUserName(URL(fileURLWithPath: data).standardizedFileURL.path)
        #expect(getpwnam(user) == nil)
        defer { if getpwnam(user) != nil { try? removeOSUser(user) } }

        let refused = try FindmyProcess.run([
            "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--projector", "on",
        ])
        #expect(refused.status != 0)
        #expect(refused.error.contains("chmod o+x"), "\(refused.error)")
        #expect(getpwnam(user) == nil, "a refused server left OS user \(user) behind")
    }
}
