import Events
import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// Retention reaches commands end to end (docs/retention.md, "Commands"): real server, real
/// projector, an erasure, `findmy compact --as-of` a month later. The erased device's closed
/// `lost` (ended by `found`) and answered locate leave the tables when the projector folds the
/// erasure, and the log's segment files and PostgreSQL's files at the compaction; another device's
/// closed `lost` leaves the log and the tables at the compaction (its window); an open `lost` stays.
@Suite struct CommandRetentionEndToEndTests {
    static let day: Int64 = 86_400_000_000

    func command(_ connection: HTTPConnection, device: Int64, token: String, _ body: String) throws -> String
    {
        let answer = try post(connection, "/api/find-my/devices/\(device)/commands", token: token, body: body)
        #expect(answer.status == 202, "\(answer.body)")
        return try #require(answer.string("command_id"))
    }

    /// Whether the log holds `text`: in a record's payload once decompressed, or anywhere in a
    /// segment file's bytes. The decompressed search is the one that finds: LZ4 may store part of
    /// a random string as a match against earlier bytes of its group record, so the text need not
    /// appear in the file as written. The file search makes "gone" also mean gone from the disk.
    func logHolds(_ text: String, data: String) throws -> Bool {
        let needle = Data(text.utf8)
        var found = false
        try LogReader(directory: data + "/log").read(from: 0) { record in
            let payload = try EventCodec.rawPayload(header: record.header, stored: record.storedPayload)
            found = Data(payload).range(of: needle) != nil
            return !found
        }
        if found { return true }
        let directory = data + "/log"
        return try FileManager.default.contentsOfDirectory(atPath: directory).contains { name in
            guard name.hasSuffix(".seg") else { return false }
            let bytes = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
            return bytes.range(of: needle) != nil
        }
    }

    /// The files under `directory` holding `text`.
    func filesHolding(_ text: String, under directory: String) -> [String] {
        var found: [String] = []
        guard let walker = FileManager.default.enumerator(atPath: directory) else { return [] }
        while let name = walker.nextObject() as? String {
            guard let bytes = FileManager.default.contents(atPath: directory + "/" + name) else { continue }
            if bytes.range(of: Data(text.utf8)) != nil { found.append(name) }
        }
        return found
    }

    @Test func closedCommandsPastTheWindowLeaveTheLogAndTheTablesAnOpenLostStays() throws {
        let data = ScratchDirectory("findmy-command-retention")
        let alice = try addUser("alice", data: data.path)
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        var ids: [String: Int64] = [:]
        var tokens: [String: String] = [:]
        for name in ["a", "b", "c"] {
            let enrolled = try enrol(connection, userToken: alice, uuid: UUID().uuidString, name: name)
            let id: Int64 = try #require(enrolled.int("device_id"))
            let token: String = try #require(enrolled.string("device_token"))
            ids[name] = id
            tokens[name] = token
        }
        let closedMessage = "closed-lost-\(UUID().uuidString)"
        let closedPhone = "+49 30 5550 1234"
        let openMessage = "open-lost-\(UUID().uuidString)"
        let closedLost = try command(
            connection, device: ids["a"]!, token: alice,
            "{\"kind\": \"lost\", \"message\": \"\(closedMessage)\", \"phone\": \"\(closedPhone)\"}")
        let found = try command(connection, device: ids["a"]!, token: alice, "{\"kind\": \"found\"}")
        let locate = try command(connection, device: ids["a"]!, token: alice, "{\"kind\": \"locate\"}")
        let reply = try post(
            connection, "/api/find-my/report", token: tokens["a"]!,
            body: "{\"batch_id\": \"\(UUID().uuidString)\", \"in_reply_to\": \"\(locate)\", \"fixes\": ["
                + fixJSON(latitude: 48.2, secondsAgo: 2) + "]}")
        #expect(reply.status == 200, "\(reply.body)")
        let openLost = try command(
            connection, device: ids["b"]!, token: alice,
            "{\"kind\": \"lost\", \"message\": \"\(openMessage)\", \"phone\": \"+49 30 5550 9999\"}")
        // Device c: a lost ended by found, which only its age (the window) removes.
        let agedMessage = "aged-lost-\(UUID().uuidString)"
        let agedLost = try command(
            connection, device: ids["c"]!, token: alice,
            "{\"kind\": \"lost\", \"message\": \"\(agedMessage)\", \"phone\": \"+49 30 5550 4242\"}")
        let foundC = try command(connection, device: ids["c"]!, token: alice, "{\"kind\": \"found\"}")
        // The closed lost reached the device through the report answer: it has a delivery row.
        _ = try post(
            connection, "/api/find-my/report", token: tokens["b"]!,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))

        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        try waitForProjector(data.path, cluster.conninfo)
        let pg = try PostgresConnection(cluster.conninfo)
        defer { pg.close() }
        func states() throws -> [String: String] {
            let result = try pg.execute("SELECT command_id::text, state FROM findmy.commands")
            var states: [String: String] = [:]
            for row in 0..<result.rowCount {
                states[result.string(row, 0)!.lowercased()] = result.string(row, 1)!
            }
            return states
        }
        let before = try states()
        #expect(
            before[closedLost.lowercased()] == "expired" && before[locate.lowercased()] == "answered",
            "\(before)")
        #expect(before.count == 6 && before[agedLost.lowercased()] == "expired", "\(before)")
        #expect(try logHolds(closedMessage, data: data.path))

        // Device a's whole history erased (its open found stays; the closed lost and locate go, and
        // the scrub rewrites the command tables so their bytes leave PostgreSQL's files too).
        let erase = try post(connection, "/api/find-my/devices/\(ids["a"]!)/erase", token: alice, body: "{}")
        #expect(erase.status == 200, "\(erase.body)")
        try waitForProjector(data.path, cluster.conninfo)
        try pg.executeScript("CHECKPOINT")  // the rows' pages reach the table files
        #expect(!filesHolding(closedMessage, under: cluster.pgData + "/base").isEmpty)
        // What reads see: the erased closed commands are gone at once, the open found stays.
        let erased = try states()
        #expect(erased[closedLost.lowercased()] == nil && erased[locate.lowercased()] == nil, "\(erased)")
        #expect(erased.count == 4)

        // A month later: past the 30-day window.
        let asOf = Int64(Date().timeIntervalSince1970 * 1_000_000) + 31 * Self.day
        let compact = try FindmyProcess.run([
            "compact", "--data-dir", data.path, "--as-of", RFC3339.formatMicros(asOf), "--json",
        ])
        #expect(compact.status == 0, "\(compact.error)")
        let report = try JSONParser.parse(compact.output)
        #expect(try report["log"]!["command_events_removed"]!.int64Value > 0, "\(compact.output)")
        #expect(try report["database"]!["command_rows_deleted"]!.int64Value == 1, "\(compact.output)")
        // The server ran it (through its admin socket): /metrics counts the same.
        let metrics = String(decoding: try connection.send("GET", "/metrics").body, as: UTF8.self)
        let removed = try report["log"]!["command_events_removed"]!.int64Value
        #expect(
            metrics.contains("\nfindmy_compactor_command_events_removed_total \(removed)\n"), "\(metrics)")
        #expect(metrics.contains("\nfindmy_compactor_command_rows_deleted_total 1\n"), "\(metrics)")

        let after = try states()
        #expect(
            Set(after.keys) == [found.lowercased(), openLost.lowercased(), foundC.lowercased()], "\(after)")
        let orphans = try pg.execute(
            "SELECT count(*) FROM findmy.command_deliveries WHERE command_id::text = ANY($1::text[])",
            [.textArray([closedLost.lowercased(), locate.lowercased(), agedLost.lowercased()])]
        ).int64(0, 0)
        #expect(orphans == 0)
        #expect(try !logHolds(closedMessage, data: data.path))
        #expect(filesHolding(closedMessage, under: cluster.pgData + "/base") == [])
        #expect(filesHolding(closedMessage, under: cluster.pgData + "/pg_wal") == [])
        #expect(!filesHolding(openMessage, under: cluster.pgData + "/base").isEmpty)
        #expect(try !logHolds(closedPhone, data: data.path))
        #expect(try !logHolds(agedMessage, data: data.path))
        #expect(try logHolds(openMessage, data: data.path))
        // The live server still knows device b is lost: its open lost goes out with a report answer.
        let carried = try post(
            connection, "/api/find-my/report", token: tokens["b"]!,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        let carriedIDs =
            try carried.body["commands"]?.arrayValue.map { try $0["command_id"]!.stringValue } ?? []
        #expect(carriedIDs.map { $0.lowercased() } == [openLost.lowercased()], "\(carried.body)")
    }
}
