import Events
import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// Retention and erasure end to end: real server, real projector, `findmy compact --as-of`, then
/// every log record decoded and every table read.
@Suite struct RetentionTests {
    static let day: Int64 = 86_400_000_000

    /// Every coordinate (latitude) held in a decoded log record, per device.
    func logLatitudes(_ data: String) throws -> [Int64: Set<Double>] {
        var found: [Int64: Set<Double>] = [:]
        let reader = LogReader(directory: data + "/log")
        try reader.read(from: 0) { record in
            if record.header.isPayloadRemoved {
                #expect(record.storedPayload.isEmpty, "an envelope keeps no payload")
                return true
            }
            if case .fixBatch(let batch) = try record.event() {
                for fix in batch.fixes { found[Int64(batch.deviceID), default: []].insert(fix.latitude) }
            }
            return true
        }
        return found
    }

    func tableLatitudes(_ connection: PostgresConnection, _ table: String) throws -> [Int64: Set<Double>] {
        let result = try connection.execute("SELECT device_id, latitude FROM findmy.\(table)")
        var found: [Int64: Set<Double>] = [:]
        for row in 0..<result.rowCount {
            found[try result.int64(row, 0)!, default: []].insert(Double(result.string(row, 1)!)!)
        }
        return found
    }

    @Test func onlyUnexpiredUnerasedFixesSurviveInTheLogAndEveryTable() throws {
        let data = ScratchDirectory("findmy-retention")
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on", "--segment-bytes-max", "8192"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let alice = try addUser("alice", data: data.path)
        let bob = try addUser("bob", data: data.path)
        var devices: [String: Int64] = [:]
        var deviceTokens: [String: String] = [:]
        for (name, owner) in [("a", alice), ("b", alice), ("c", bob), ("d", bob)] {
            let answer = try enrol(connection, userToken: owner, uuid: UUID().uuidString, name: name)
            devices[name] = answer.int("device_id")!
            deviceTokens[name] = answer.string("device_token")!
        }
        // b: 5 days by its owner; bob's devices: 10 days by the admin; a and d: the default 30.
        let retention = try send(
            connection, "PUT", "/api/find-my/devices/\(devices["b"]!)/retention", token: alice,
            body: "{\"days\": 5}")
        #expect(retention.status == 200, "\(retention.body)")
        let cli = try FindmyProcess.run([
            "retention", "set", "--user", "bob", "--days", "10", "--data-dir", data.path,
        ])
        #expect(cli.status == 0, "\(cli.error)")
        // Someone else's device answers exactly like a missing one.
        let foreign = try send(
            connection, "PUT", "/api/find-my/devices/\(devices["c"]!)/retention", token: alice,
            body: "{\"days\": 1}")
        let missing = try send(
            connection, "PUT", "/api/find-my/devices/999/retention", token: alice, body: "{\"days\": 1}")
        #expect(foreign.status == 404 && missing.status == 404 && foreign.body == missing.body)
        let bad = try send(
            connection, "PUT", "/api/find-my/devices/\(devices["b"]!)/retention", token: alice,
            body: "{\"days\": 0}")
        #expect(bad.status == 400 && bad.errorCode == "invalid_field")

        // One fix a day (half a day past each whole day), 0 to 28 days old, on every device; each
        // latitude names its device and day. Plus one with a device clock a year in the future.
        var recorded: [Int64: [Double: Int64]] = [:]
        let reportNow = Int64(Date().timeIntervalSince1970 * 1_000_000)
        for (index, name) in ["a", "b", "c", "d"].enumerated() {
            var fixes: [String] = []
            for age in 0..<29 {
                let latitude = Double(10 * (index + 1)) + Double(age) / 100
                let secondsAgo = age * 86_400 + 43_200
                fixes.append(fixJSON(latitude: latitude, secondsAgo: secondsAgo))
                recorded[devices[name]!, default: [:]][latitude] = reportNow - Int64(secondsAgo) * 1_000_000
            }
            for chunk in stride(from: 0, to: fixes.count, by: 7) {
                let answer = try post(
                    connection, "/api/find-my/report", token: deviceTokens[name]!,
                    body: reportBody(
                        batchID: UUID().uuidString, fixes: Array(fixes[chunk..<min(chunk + 7, fixes.count)])))
                #expect(answer.status == 200, "\(answer.body)")
            }
        }
        let future = try post(
            connection, "/api/find-my/report", token: deviceTokens["a"]!,
            body: reportBody(
                batchID: UUID().uuidString, fixes: [fixJSON(latitude: 9.5, secondsAgo: -365 * 86_400)]))
        #expect(future.status == 200 && future.int("accepted") == 1, "\(future.body)")
        recorded[devices["a"]!]![9.5] = reportNow  // its age counts from received_at

        // a: erase days 15 to 20 ago; d: removed.
        let eraseFrom = reportNow - 20 * Self.day
        let eraseTo = reportNow - 15 * Self.day
        let erase = try send(
            connection, "POST", "/api/find-my/devices/\(devices["a"]!)/erase", token: alice,
            body:
                "{\"from\": \"\(RFC3339.formatMicros(eraseFrom))\", \"to\": \"\(RFC3339.formatMicros(eraseTo))\"}"
        )
        #expect(erase.status == 200, "\(erase.body)")
        let removed = try send(
            connection, "DELETE", "/api/find-my/devices/\(devices["d"]!)", token: bob, body: "")
        #expect(removed.status == 200, "\(removed.body)")
        let afterRemoval = try post(
            connection, "/api/find-my/report", token: deviceTokens["d"]!,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(afterRemoval.status == 401, "a removed device's token stops working")

        // Compact as if three days had passed.
        let asOf = reportNow + 3 * Self.day
        let windows: [Int64: Int64] = [
            devices["a"]!: 30, devices["b"]!: 5, devices["c"]!: 10, devices["d"]!: 30,
        ]
        var expected: [Int64: Set<Double>] = [:]
        for (device, fixes) in recorded where device != devices["d"]! {
            for (latitude, at) in fixes {
                if at < asOf - windows[device]! * Self.day { continue }
                if device == devices["a"]! && at >= eraseFrom && at < eraseTo { continue }
                expected[device, default: []].insert(latitude)
            }
        }
        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        try waitForProjector(data.path, cluster.conninfo)
        let dry = try FindmyProcess.run([
            "compact", "--data-dir", data.path, "--as-of", RFC3339.formatMicros(asOf), "--dry-run", "--json",
        ])
        #expect(dry.status == 0, "\(dry.error)")
        let compact = try FindmyProcess.run([
            "compact", "--data-dir", data.path, "--as-of", RFC3339.formatMicros(asOf), "--json",
        ])
        #expect(compact.status == 0, "\(compact.error)")
        let report = try JSONParser.parse(compact.output)
        let removedFixes = try report["log"]!["fixes_removed"]!.int64Value
        #expect(removedFixes > 0)
        #expect(try JSONParser.parse(dry.output)["log"]!["fixes_removed"]!.int64Value == removedFixes)
        // The server's compactor left a registry snapshot of the compacted log (docs/snapshots.md).
        let snapshotOffset = try report["registry_snapshot_offset"]?.int64Value ?? 0
        #expect(snapshotOffset > 0, "\(compact.output)")
        let snapshotFiles =
            (try? FileManager.default.contentsOfDirectory(atPath: data.path + "/snapshots")) ?? []
        #expect(
            snapshotFiles.contains(String(format: "registry-%020lld.snap", snapshotOffset)),
            "\(snapshotFiles)")

        // The log: decode every record; exactly the expected coordinates are left.
        #expect(try logLatitudes(data.path) == expected)
        let verify = try FindmyProcess.run(["log", "verify", "--data-dir", data.path])
        #expect(verify.status == 0, "\(verify.output) \(verify.error)")

        // Every table.
        let pg = try PostgresConnection(cluster.conninfo)
        defer { pg.close() }
        #expect(try tableLatitudes(pg, "device_locations") == expected)
        var best: [Int64: Set<Double>] = [:]
        for (device, fixes) in recorded where expected[device] != nil {
            let survivor = fixes.filter { expected[device]!.contains($0.key) && $0.key != 9.5 }.max {
                $0.value < $1.value
            }!
            best[device] = [survivor.key]
        }
        #expect(try tableLatitudes(pg, "device_latest") == best)
        let removedRows = try pg.execute(
            "SELECT (SELECT count(*) FROM findmy.devices WHERE id = $1) + (SELECT count(*) FROM findmy.device_batches WHERE device_id = $1)",
            [.int64(devices["d"]!)]
        ).int64(0, 0)
        #expect(removedRows == 0)

        // /metrics shows what the run removed.
        let metrics = try connection.send("GET", "/metrics")
        #expect(
            String(decoding: metrics.body, as: UTF8.self).contains(
                "findmy_compactor_fixes_removed_total \(removedFixes)"))

        // A rebuild from the compacted log yields exactly the survivors.
        let replay = try FindmyProcess.run(["replay", "--data-dir", data.path], timeoutSeconds: 300)
        #expect(replay.status == 0, "\(replay.error)")
        #expect(try tableLatitudes(pg, "device_locations") == expected)
        #expect(try tableLatitudes(pg, "device_latest") == best)
    }
}
