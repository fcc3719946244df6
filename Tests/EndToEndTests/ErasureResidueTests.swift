import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// What an erasure leaves in the embedded cluster's files (docs/retention.md, "What stays, and
/// where"): the projector deletes the rows at once, but their bytes stay in the table pages and
/// the WAL; after the compactor's next run they are in neither, nor in the log's segment files
/// (the device's OwnTracks transitions and waypoints included).
@Suite struct ErasureResidueTests {
    /// The files under `directory` holding `needle`.
    func filesHolding(_ needle: [UInt8], under directory: String) -> [String] {
        var found: [String] = []
        guard let walker = FileManager.default.enumerator(atPath: directory) else { return [] }
        while let name = walker.nextObject() as? String {
            let path = directory + "/" + name
            guard let bytes = FileManager.default.contents(atPath: path), bytes.count >= needle.count else {
                continue
            }
            if bytes.withUnsafeBytes({ Data($0).range(of: Data(needle)) }) != nil { found.append(name) }
        }
        return found
    }

    @Test func afterTheCompactorsRunAnErasedCoordinateIsInNoTableFileAndNoWALSegment() throws {
        let data = ScratchDirectory("findmy-residue")
        defer { withExtendedLifetime(data) {} }
        let server = try ServerProcess(
            data: data.path,
            // No scheduled run: only the `findmy compact` below may scrub.
            extraArguments: [
                "--projector", "on", "--compact-interval-seconds", "86400", "--compact-first-run-seconds",
                "86400",
            ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let token = try addUser("alice", data: data.path)
        let secret = try enrol(connection, userToken: token, uuid: UUID().uuidString, name: "secret")
        let other = try enrol(connection, userToken: token, uuid: UUID().uuidString, name: "other")
        // A value no other fix has; PostgreSQL stores a float8 as its 8 bytes, little endian.
        let latitude = 37.0 + Double(UInt32.random(in: 1...UInt32.max)) / 1e10
        let needle = withUnsafeBytes(of: latitude.bitPattern.littleEndian) { Array($0) }
        for batch in 0..<10 {
            for (device, value) in [(other, 52.5 + Double(batch) / 1000), (secret, latitude)] {
                let fixes = (0..<20).map { fixJSON(latitude: value, secondsAgo: 3600 * (batch + 1) + $0) }
                let answer = try post(
                    connection, "/api/find-my/report", token: device.string("device_token")!,
                    body: reportBody(batchID: UUID().uuidString, fixes: fixes))
                #expect(answer.status == 200, "\(answer.body)")
            }
        }
        // The same spot as OwnTracks places of the same device: a region transition and a waypoint
        // (a region such as home). The log stores their coordinates as plain doubles (fixes are
        // XORed by their codec), so the needle found in the log's files before the run is theirs.
        let tst = Int(Date().timeIntervalSince1970) - 7200
        let basic = "Basic " + Data("alice:\(secret.string("device_token")!)".utf8).base64EncodedString()
        for place in [
            "{\"_type\":\"transition\",\"event\":\"enter\",\"desc\":\"Home\",\"t\":\"c\",\"tst\":\(tst),"
                + "\"wtst\":\(tst - 86_400),\"acc\":10,\"lon\":13.4,\"lat\":\(latitude)}",
            "{\"_type\":\"waypoint\",\"desc\":\"Home\",\"lat\":\(latitude),\"lon\":13.4,\"rad\":100,\"tst\":\(tst)}",
        ] {
            let answer = try connection.send(
                "POST", "/api/find-my/owntracks",
                headers: [("Content-Type", "application/json"), ("Authorization", basic)],
                body: Array(place.utf8))
            #expect(answer.status == 200)
        }
        #expect(!filesHolding(needle, under: data.path + "/log").isEmpty)
        try waitForProjector(data.path)
        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        let sql = try PostgresConnection(cluster.conninfo)
        defer { sql.close() }
        // What the projector does after 5,000 fixes: the statistics then hold sample values (the
        // repeated latitude is a most-common value) in pg_statistic, a table of its own.
        try sql.executeScript("ANALYZE findmy.device_locations; ANALYZE findmy.device_latest")
        let sampled = try sql.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = 'findmy' AND most_common_vals::text LIKE $1",
            [.text("%\(latitude)%")])
        #expect(try sampled.int64(0, 0) ?? 0 > 0)
        try sql.executeScript("CHECKPOINT")  // the pages reach the table files
        #expect(!filesHolding(needle, under: cluster.pgData + "/base").isEmpty)

        let erase = try post(
            connection, "/api/find-my/devices/\(secret.int("device_id")!)/erase", token: token, body: "{}")
        #expect(erase.status == 200, "\(erase.body)")
        try waitForProjector(data.path)
        let left = try sql.execute(
            "SELECT count(*) FROM findmy.device_locations WHERE latitude = $1", [.double(latitude)])
        #expect(try left.int64(0, 0) == 0, "the projector deleted the rows at once")
        try sql.executeScript("CHECKPOINT")
        // Deleted rows are still bytes in their pages: what the docs must not hide.
        #expect(!filesHolding(needle, under: cluster.pgData + "/base").isEmpty)

        // A reader that holds a table the scrub must rewrite: the run gives up after its lock wait
        // (scrubLockWaitMillisMax) instead of queueing every later reader behind it, and moves no mark.
        try sql.executeScript("BEGIN; LOCK TABLE findmy.device_latest IN ACCESS SHARE MODE")
        let blocked = try FindmyProcess.run(["compact", "--data-dir", data.path, "--json"])
        try sql.executeScript("COMMIT")
        #expect(
            blocked.status != 0 && blocked.error.contains("lock timeout"),
            "\(blocked.output) \(blocked.error)")

        let compact = try FindmyProcess.run(["compact", "--data-dir", data.path, "--json"])
        #expect(compact.status == 0, "\(compact.error)")
        let database = try JSONParser.parse(compact.output)["database"]
        let rewritten = try database?["relations_rewritten"]?.arrayValue.map { try $0.stringValue } ?? []
        #expect(
            rewritten.contains("device_latest") && rewritten.contains { $0.hasPrefix("device_locations") })
        #expect(database?["checkpoint"] == .bool(true), "\(compact.output)")
        #expect(filesHolding(needle, under: cluster.pgData + "/base") == [])
        #expect(filesHolding(needle, under: cluster.pgData + "/pg_wal") == [])
        // The places went with the fixes (the log half already ran in the blocked run above): no
        // segment file of the log holds the spot any more.
        #expect(filesHolding(needle, under: data.path + "/log") == [])
        // Later statistics and page writes do not bring it back (before pg_statistic was rewritten,
        // its next update copied the old page, erased value included, into the WAL).
        try sql.executeScript("ANALYZE findmy.device_locations; ANALYZE findmy.device_latest; CHECKPOINT")
        #expect(filesHolding(needle, under: cluster.pgData + "/base") == [])
        #expect(filesHolding(needle, under: cluster.pgData + "/pg_wal") == [])
        // A second run has nothing left to rewrite.
        let again = try FindmyProcess.run(["compact", "--data-dir", data.path, "--json"])
        let second = try JSONParser.parse(again.output)["database"]?["relations_rewritten"]?.arrayValue
        #expect(second == [], "\(again.output)")
    }
}
