import Foundation
import JSON
import Postgres
import Testing

/// The projector, killed with SIGKILL at random moments while it catches up, while the log grows,
/// and during a rebuild: afterwards the tables hold exactly the fixes in the log.
@Suite struct ProjectorCrashTests {
    /// What the projection must equal: the log's own count of fixes and its durable end.
    func logFacts(_ data: String) throws -> (fixes: Int64, durableEnd: Int64) {
        let stats = try FindmyProcess.run(["log", "stats", "--json", "--data-dir", data])
        let object = try JSONParser.parse(stats.output)
        return (try object["fixes"]!.int64Value, try object["durable_end"]!.int64Value)
    }

    /// Runs `findmy project` until its checkpoint reaches the log's end, then stops it with SIGTERM.
    func projectToTheEnd(_ data: String, _ conninfo: () throws -> String) throws {
        let end = try logFacts(data).durableEnd
        let projector = try FindmyProcess(["project", "--data-dir", data])
        defer {
            projector.kill(SIGTERM)
            projector.wait()
        }
        let reached = waitUntil(timeoutSeconds: 240) {
            guard let connection = try? PostgresConnection(try conninfo()) else { return false }
            defer { connection.close() }
            // No row yet (before the projector's first commit) means not yet; row 0 of none would trap.
            guard
                let result = try? connection.execute("SELECT next_offset FROM findmy.projector_checkpoints"),
                result.rowCount > 0
            else { return false }
            return (try? result.int64(0, 0)) == end
        }
        if reached { return }
        throw TestFailure("the projector did not reach offset \(end): \(projector.standardError)")
    }

    func checkExactlyTheLog(_ data: String, _ connection: PostgresConnection, seed: UInt64) throws {
        let facts = try logFacts(data)
        let rows = try connection.execute(
            "SELECT count(*), count(DISTINCT (log_offset, fix_index)) FROM findmy.device_locations")
        #expect(
            try rows.int64(0, 0) == facts.fixes, "seed \(seed): device_locations differs from the log's fixes"
        )
        #expect(try rows.int64(0, 1) == facts.fixes, "seed \(seed): duplicated fixes")
        let batches = try connection.execute("SELECT count(*) FROM findmy.device_batches").int64(0, 0)
        #expect(
            batches == facts.durableEnd,
            "seed \(seed): one device_batches row per record (load writes only batches)")
        let mismatches = try connection.execute(
            """
            SELECT count(*) FROM findmy.device_latest l FULL JOIN (
                SELECT DISTINCT ON (device_id) device_id, log_offset, fix_index FROM findmy.device_locations
                ORDER BY device_id, clock_suspect ASC, recorded_at DESC, log_offset DESC, fix_index DESC
            ) r USING (device_id)
            WHERE l.log_offset IS DISTINCT FROM r.log_offset OR l.fix_index IS DISTINCT FROM r.fix_index
            """
        ).int64(0, 0)
        #expect(mismatches == 0, "seed \(seed): device_latest differs from a recomputation from history")
    }

    @Test func exactlyOnceUnderSIGKILL() throws {
        let seed = UInt64.random(in: 1...1_000_000)
        print("ProjectorCrashTests seed: \(seed)")
        var random = SplitMix(seed: seed)
        let data = ScratchDirectory("findmy-projcrash")
        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        defer { try? cluster.stop() }
        // Started by the test, so no findmy process owns it: a projector that started the cluster
        // would stop it on SIGTERM, and one killed while deciding to restart it can leave it down.
        try cluster.start()

        // A backlog to catch up on.
        let backlog = try FindmyProcess.run(
            [
                "load", "--data-dir", data.path, "--seconds", "3", "--appenders", "8", "--fixes", "50",
                "--seed", String(seed),
            ], executable: benchExecutable())
        #expect(backlog.status == 0, "\(backlog.error)")

        // Kill the projector at random moments, while more batches arrive.
        for round in 0..<6 {
            let load = try FindmyProcess(
                [
                    "load", "--data-dir", data.path, "--seconds", "2", "--appenders", "4", "--fixes", "20",
                    "--seed", String(seed &+ UInt64(round)),
                ], executable: benchExecutable())
            let projector = try FindmyProcess(["project", "--data-dir", data.path])
            // A random moment to kill at, from the seed: choosing when, not waiting for anything.
            usleep(UInt32(1_500_000 + random.next() % 2_500_000))
            projector.kill(SIGKILL)
            projector.wait()
            load.wait()
        }
        try projectToTheEnd(data.path) { cluster.conninfo }
        try cluster.start()  // reuses the running server; starts it again if a killed process left it down
        let connection = try PostgresConnection(cluster.conninfo)
        try checkExactlyTheLog(data.path, connection, seed: seed)

        // Kill rebuilds at random moments: the live generation is untouched, and the next rebuild completes.
        for _ in 0..<3 {
            let replay = try FindmyProcess(["replay", "--data-dir", data.path])
            // A random moment to kill at, from the seed: choosing when, not waiting for anything.
            usleep(UInt32(500_000 + random.next() % 3_000_000))
            replay.kill(SIGKILL)
            replay.wait()
            try cluster.start()
            let check = try PostgresConnection(cluster.conninfo)
            try checkExactlyTheLog(data.path, check, seed: seed)
            check.close()
        }
        connection.close()
        try cluster.start()
        let replay = try FindmyProcess.run(["replay", "--data-dir", data.path], timeoutSeconds: 300)
        #expect(replay.status == 0, "\(replay.error)")
        try cluster.start()
        let after = try PostgresConnection(cluster.conninfo)
        try checkExactlyTheLog(data.path, after, seed: seed)
        after.close()
    }
}
