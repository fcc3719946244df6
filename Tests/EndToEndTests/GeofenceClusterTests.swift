import Foundation
import HTTPClient
import JSON
import NATSSupport
import Postgres
import PushFakeSupport
import Testing

/// Geofences in a cluster (docs/scale.md, "Geofences in a cluster"): `findmy projector` folds the
/// geofence projection under a lease of its own, ingest nodes given `--database-url` read the
/// transitions from it, and the one node holding the notifier's lease sends the webhooks. Real
/// processes: three nats-server, two ingest nodes, two `findmy projector`, a private PostgreSQL and
/// a webhook receiver (ops/tests/webhook_receiver.py); every one stopped whatever the outcome.
@Suite(.serialized) struct GeofenceClusterTests {
    let home = 52.52
    let away = 52.53  // 1.1 km north of a 100 m fence

    /// The `application_name` of the session holding the geofence projection's lease (7406), or nil.
    static func geofenceHolder(_ conninfo: String) -> String? {
        guard let connection = try? PostgresConnection(conninfo) else { return nil }
        defer { connection.close() }
        let result = try? connection.execute(
            """
            SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 7406 AND l.objid = 0 AND l.objsubid = 2
            """)
        guard let result, result.rowCount == 1 else { return nil }
        return result.string(0, 0)
    }

    @Test func aFenceThroughOneNodeIsCrossedThroughTheOtherAndSurvivesItsFolderKilled() throws {
        let postgres = try ScratchPostgres()
        let receiver = try FakeProvider("receiver", script: "webhook_receiver.py")
        defer { receiver.stop() }
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let scratch = ScratchDirectory("findmy-fence-cluster")
        // The same webhook key on both nodes, as docs/scale.md tells operators to copy it: whichever
        // node sends, the signature checks with the secret either node shows.
        let key = (0..<32).map { _ in UInt8.random(in: 0...255) }
        for index in 1...2 {
            let directory = scratch.path + "/node\(index)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let path = directory + "/geofence-webhook.key"
            #expect(FileManager.default.createFile(atPath: path, contents: Data(key)))
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        }
        let nodes = try IngestNodesTests.startNodes(
            cluster, scratch,
            extraArguments: ["--database-url", postgres.conninfo, "--geofence-retry-base-seconds", "1"])
        defer { for node in nodes where node.process.process.isRunning { node.kill9() } }
        let one = HTTPConnection(address: nodes[0].address)
        let two = HTTPConnection(address: nodes[1].address)

        // A user, a phone and a fence with a webhook, all through node 1.
        let userToken = try addUser("gil", data: scratch.path + "/node1")
        let phone = try enrol(one, userToken: userToken, uuid: UUID().uuidString)
        let deviceID = try #require(phone.int("device_id"), "\(phone.body)")
        let deviceToken = try #require(phone.string("device_token"))
        let created = try post(
            one, "/api/find-my/geofences", token: userToken,
            body:
                "{\"name\": \"Home\", \"latitude\": \(home), \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(deviceID)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        let fenceID = try #require(created.int("geofence_id"))
        let response = try one.send(
            "PUT", "/api/find-my/geofences/\(fenceID)/notifications",
            headers: [("Authorization", "Bearer \(userToken)"), ("Content-Type", "application/json")],
            body: Array("{\"webhook_url\": \"http://127.0.0.1:\(receiver.port)/hook\"}".utf8))
        #expect(response.status == 200)
        let settings = try JSONParser.parse(response.body)
        try receiver.command("secret \(try settings["webhook_secret"]?.stringValue ?? "")")

        // Projector a takes the geofence lease; b starts beside it and waits.
        let a = try ProjectorProcess(
            ["--log", cluster.logArgument, "--database-url", postgres.conninfo],
            outputPath: scratch.path + "/projector-a.out")
        defer { a.kill9() }
        #expect(
            waitUntil(timeoutSeconds: 120) { Self.geofenceHolder(postgres.conninfo) == a.sessionName },
            "\(a.output)")
        let b = try ProjectorProcess(
            ["--log", cluster.logArgument, "--database-url", postgres.conninfo],
            outputPath: scratch.path + "/projector-b.out")
        defer { b.kill9() }

        // Reports through node 2: home, then away (a leave), read through node 1.
        func report(_ latitude: Double, secondsAgo: Int) throws -> Int64 {
            let answer = try post(
                two, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude, secondsAgo: secondsAgo)]))
            #expect(answer.status == 200, "\(answer.body)")
            return try #require(answer.int("offset"), "\(answer.body)")
        }
        func transitions(after offset: Int64, count: Int) throws -> [String] {
            var events: [String] = []
            var last = Answer(status: 0, body: .null)
            let read = try waitUntil(timeoutSeconds: 120) {
                last = try get(
                    one, "/api/find-my/devices/\(deviceID)/transitions?after_offset=\(offset)",
                    token: userToken)
                events =
                    (try? last.body["transitions"]?.arrayValue.map { try $0["event"]?.stringValue ?? "" })
                    ?? []
                return last.status == 200 && events.count >= count
            }
            #expect(read, "\(last.status) \(last.body)\na: \(a.output)\nb: \(b.output)")
            return events
        }
        _ = try report(home, secondsAgo: 300)
        let left = try report(away, secondsAgo: 240)
        #expect(try transitions(after: left, count: 1) == ["leave"])

        // The holder is killed as the next reports come; b takes the lease over from its checkpoint.
        _ = try report(home, secondsAgo: 180)
        a.kill9()
        _ = try report(away, secondsAgo: 120)
        let last = try report(home, secondsAgo: 60)
        #expect(
            waitUntil(timeoutSeconds: 120) { Self.geofenceHolder(postgres.conninfo) == b.sessionName },
            "\(b.output)")
        // Newest first, each once.
        #expect(try transitions(after: last, count: 4) == ["enter", "leave", "enter", "leave"])
        let database = try PostgresConnection(postgres.conninfo)
        defer { database.close() }
        let rows = try database.execute(
            "SELECT count(*), count(DISTINCT (event, recorded_at)) FROM findmy_geofences.geofence_transitions"
        )
        #expect(try rows.int64(0, 0) == 4 && rows.int64(0, 1) == 4)

        // Each transition announced once, signed, by the node holding the notifier's lease.
        let hooks = receiver.requests(atLeast: 4) { (try? $0["path"]?.stringValue) == "/hook" }
        // Sends are in flight side by side, so they may arrive in any order: by recorded_at.
        func field(_ request: JSONObject, _ name: String) -> String {
            let body = try? JSONParser.parse((try? request["body"]?.stringValue) ?? "")
            return (try? body?[name]?.stringValue) ?? ""
        }
        let announced = hooks.sorted { field($0, "recorded_at") < field($1, "recorded_at") }
        #expect(announced.map { field($0, "event") } == ["leave", "enter", "leave", "enter"])
        #expect(hooks.allSatisfy { $0["signature_valid"] == .bool(true) })
        let keys = Set(hooks.compactMap { try? $0["headers"]?["idempotency-key"]?.stringValue })
        #expect(keys.count == 4)
        // The delivery log, read through node 2, says four delivered; the receiver has still four.
        var deliveries: [JSONValue] = []
        let settled = try waitUntil(timeoutSeconds: 120) {
            let log = try get(two, "/api/find-my/geofences/\(fenceID)/deliveries", token: userToken)
            deliveries = (try? log.body["deliveries"]?.arrayValue) ?? []
            return deliveries.count == 4
                && deliveries.allSatisfy { (try? $0["state"]?.stringValue) == "delivered" }
        }
        #expect(settled, "\(deliveries)")
        #expect(receiver.requests(atLeast: 4) { (try? $0["path"]?.stringValue) == "/hook" }.count == 4)
        let holders = try nodes.map { node in
            let health = try JSONParser.parse(
                try HTTPConnection(address: node.address).send("GET", "/healthz").body)
            return (try? health["geofence-notifier"]?["lease"]?.stringValue) ?? ""
        }
        #expect(holders.sorted() == ["held", "waiting"], "\(holders)")
    }
}
