import Foundation
import HTTPClient
import JSON
import Postgres
import PushFakeSupport
import Testing

/// Geofence notifications through `findmy serve` against a local receiver (ops/tests/webhook_receiver.py,
/// which checks each webhook's signature with the secret the API gave the fence's owner):
/// docs/geofences.md, "Notifications".
@Suite(.serialized) struct GeofenceNotifyTests {
    let home = 52.52
    let away = 52.53  // 1.1 km north of a 100 m fence

    struct Setup {
        let data: ScratchDirectory
        let server: ServerProcess
        let connection: HTTPConnection
        let receiver: FakeProvider
        let anna: String
        let ben: String
        let deviceToken: String
        let fenceID: Int64

        func stop() {
            _ = server.stop()
            receiver.stop()
        }
    }

    /// A server (retries after 1 s, then 2 s, ...), a receiver, user anna with a phone and a 100 m fence
    /// around home whose webhook and ntfy topic are the receiver's, and the receiver told the secret.
    func setUp(_ label: String) throws -> Setup {
        let receiver = try FakeProvider("receiver", script: "webhook_receiver.py")
        let data = ScratchDirectory(label)
        let server: ServerProcess
        let tokens: [String]
        do {
            tokens = try ["anna", "ben"].map { try addUser($0, data: data.path) }
            server = try ServerProcess(
                data: data.path, extraArguments: ["--projector", "on", "--geofence-retry-base-seconds", "1"])
        } catch {
            receiver.stop()
            throw error
        }
        let connection = HTTPConnection(address: server.address)
        do {
            let phone = try enrol(connection, userToken: tokens[0], uuid: UUID().uuidString)
            let deviceID = try #require(phone.int("device_id"))
            let created = try send(
                connection, "POST", "/api/find-my/geofences", token: tokens[0],
                body:
                    "{\"name\": \"Home\", \"latitude\": \(home), \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(deviceID)]}"
            )
            #expect(created.status == 201, "\(created.body)")
            let fenceID = try #require(created.int("geofence_id"))
            let base = "http://127.0.0.1:\(receiver.port)"
            let set = try send(
                connection, "PUT", "/api/find-my/geofences/\(fenceID)/notifications", token: tokens[0],
                body: "{\"webhook_url\": \"\(base)/hook\", \"ntfy_url\": \"\(base)/findmy-home\"}")
            #expect(set.status == 200, "\(set.body)")
            #expect(set.string("webhook_url") == "\(base)/hook")
            let secret = try #require(set.string("webhook_secret"))
            #expect(secret.count == 64)
            try receiver.command("secret \(secret)")
            return Setup(
                data: data, server: server, connection: connection, receiver: receiver, anna: tokens[0],
                ben: tokens[1], deviceToken: try #require(phone.string("device_token")), fenceID: fenceID)
        } catch {
            _ = server.stop()
            receiver.stop()
            throw error
        }
    }

    func report(_ setup: Setup, _ fixes: [String]) throws {
        let answer = try post(
            setup.connection, "/api/find-my/report", token: setup.deviceToken,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(answer.status == 200, "\(answer.body)")
    }

    func body(_ request: JSONObject) -> JSONValue {
        (try? JSONParser.parse((try? request["body"]?.stringValue) ?? "")) ?? .null
    }

    func path(_ request: JSONObject) -> String { (try? request["path"]?.stringValue) ?? "" }

    func header(_ request: JSONObject, _ name: String) -> String? {
        try? request["headers"]?[name]?.stringValue
    }

    @Test func aFixCrossingTheFenceNotifiesOnceWithAValidSignature() throws {
        let setup = try setUp("findmy-geofence-notify-once")
        defer { setup.stop() }
        // Home first (the first decided fix sets the state, no transition), then away: one leave.
        try report(setup, [fixJSON(latitude: home, secondsAgo: 120)])
        try report(setup, [fixJSON(latitude: away, secondsAgo: 60)])
        let hooks = setup.receiver.requests(atLeast: 1) { path($0) == "/hook" }
        #expect(hooks.count == 1)
        let hook = try #require(hooks.first)
        #expect(hook["signature_valid"] == .bool(true))
        #expect(header(hook, "content-type") == "application/json")
        let payload = body(hook)
        #expect(try payload["event"]?.stringValue == "leave")
        #expect(try payload["geofence_id"]?.int64Value == setup.fenceID)
        #expect(try payload["geofence_name"]?.stringValue == "Home")
        #expect(try payload["fix_accuracy_m"]?.doubleValue == 12)
        let key = try #require(try payload["idempotency_key"]?.stringValue)
        #expect(header(hook, "idempotency-key") == key)
        // The ntfy topic: text, with ntfy's Title and Tags.
        let topic = try #require(setup.receiver.requests(atLeast: 1) { path($0) == "/findmy-home" }.first)
        #expect(header(topic, "title") == "phone left Home")
        #expect(header(topic, "tags")?.contains("geofence-leave") == true)
        #expect((try? topic["body"]?.stringValue)?.hasPrefix("phone left Home at ") == true)

        // Back home: the enter arrives, and still only one leave was ever sent.
        try report(setup, [fixJSON(latitude: home, secondsAgo: 0)])
        let after = setup.receiver.requests(atLeast: 2) { path($0) == "/hook" }
        #expect(after.map { (try? body($0)["event"]?.stringValue) ?? nil } == ["leave", "enter"])
        #expect(after.allSatisfy { $0["signature_valid"] == .bool(true) })

        // The owner sees the delivery log (recorded once both answers of a round are in); anyone else
        // the 404 of a missing fence.
        var deliveries: [JSONValue] = []
        let settled = try waitUntil(timeoutSeconds: 120) {
            let log = try get(
                setup.connection, "/api/find-my/geofences/\(setup.fenceID)/deliveries", token: setup.anna)
            deliveries = (try? log.body["deliveries"]?.arrayValue) ?? []
            return deliveries.count == 4
                && deliveries.allSatisfy { (try? $0["state"]?.stringValue) == "delivered" }
        }
        #expect(settled, "\(deliveries)")  // (leave, enter) x (webhook, ntfy)
        let ben = try get(
            setup.connection, "/api/find-my/geofences/\(setup.fenceID)/deliveries", token: setup.ben)
        let bens = try get(
            setup.connection, "/api/find-my/geofences/\(setup.fenceID)/notifications", token: setup.ben)
        #expect(ben.status == 404 && bens.status == 404)
        // The notifier is a service in /healthz. It counts a delivery once the row saying so is
        // committed, so its count may trail the deliveries list for a moment.
        var health = JSONValue.null
        let counted = try waitUntil {
            health = try JSONParser.parse(try setup.connection.send("GET", "/healthz").body)
            return (try? health["geofence-notifier"]?["delivered"]?.int64Value) == 4
        }
        #expect(counted, "\(health)")
        #expect(try health["services"]?["geofence-notifier"]?["state"]?.stringValue == "running")
    }

    /// The geofence projector wakes the notifier at each commit, and most commits add no
    /// transition: a round with nothing after its cursors writes neither (the row keeps its
    /// version, `xmin`), while one with a transition still queues it (the test above).
    @Test func roundsWithNothingNewWriteNoCursor() throws {
        let setup = try setUp("findmy-geofence-notify-quiet")
        defer { setup.stop() }
        try report(setup, [fixJSON(latitude: home, secondsAgo: 120)])
        try report(setup, [fixJSON(latitude: away, secondsAgo: 60)])
        _ = setup.receiver.requests(atLeast: 1) { path($0) == "/hook" }
        func rounds() throws -> Int64 {
            let health = try JSONParser.parse(try setup.connection.send("GET", "/healthz").body)
            return try #require(try health["geofence-notifier"]?["rounds"]?.int64Value)
        }
        let cluster = try EmbeddedPostgres(dataDirectory: setup.data.path)
        let sql = try PostgresConnection(cluster.conninfo)
        defer { sql.close() }
        func cursorVersions() throws -> [String] {
            let rows = try sql.execute(
                "SELECT name || ':' || xmin::text FROM findmy_geofence_alerts.cursor ORDER BY name")
            return (0..<rows.rowCount).compactMap { rows.string($0, 0) }
        }
        // Once the leave's two deliveries are recorded (in a round after the one that queued them
        // and wrote both cursors), every later report stays away: no transition, nothing to queue.
        try waitUntil("the leave delivered") {
            let health = try JSONParser.parse(try setup.connection.send("GET", "/healthz").body)
            return (try? health["geofence-notifier"]?["delivered"]?.int64Value) == 2
        }
        let before = try cursorVersions()
        #expect(before.count == 2)
        let roundsBefore = try rounds()
        for second in 0..<5 { try report(setup, [fixJSON(latitude: away, secondsAgo: 50 - second)]) }
        // Two rounds ended since: at least one began after the versions were read (a commit of the
        // geofence projector wakes one; the 30 s poll would too).
        try waitUntil("rounds woken by the geofence projector's commits") { try rounds() > roundsBefore + 1 }
        #expect(try cursorVersions() == before)
    }

    @Test func aReceiverFailingOnceGetsARetryWithTheSameIdempotencyKey() throws {
        let setup = try setUp("findmy-geofence-notify-retry")
        defer { setup.stop() }
        try setup.receiver.command("fail 1")
        try report(setup, [fixJSON(latitude: home, secondsAgo: 120)])
        try report(setup, [fixJSON(latitude: away, secondsAgo: 60)])
        // Both channels are sent together: whichever came first got the 500. Wait for 3 requests.
        let all = setup.receiver.requests(atLeast: 3) { _ in true }
        let failed = try #require(all.first { $0["status"] == .integer(500) })
        let retried = all.filter { path($0) == path(failed) }
        #expect(retried.map { $0["status"] } == [.integer(500), .integer(200)])
        let keys = retried.map { header($0, "idempotency-key") }
        #expect(keys.count == 2 && keys[0] != nil && keys[0] == keys[1])
        if path(failed) == "/hook" { #expect(retried.allSatisfy { $0["signature_valid"] == .bool(true) }) }
        // The log says two attempts, delivered, and the status of the last.
        let channel = path(failed) == "/hook" ? "webhook" : "ntfy"
        var row: JSONValue = .null
        _ = try waitUntil(timeoutSeconds: 120) {
            let log = try get(
                setup.connection, "/api/find-my/geofences/\(setup.fenceID)/deliveries", token: setup.anna)
            row =
                (try? log.body["deliveries"]?.arrayValue.first { try $0["channel"]?.stringValue == channel })
                ?? .null
            return (try? row["state"]?.stringValue) == "delivered"
        }
        #expect(try row["attempts"]?.int64Value == 2)
        #expect(try row["state"]?.stringValue == "delivered")
        #expect(try row["last_status"]?.int64Value == 200)
        #expect(try row["idempotency_key"]?.stringValue == keys[0])
    }

    @Test func aHistoryEvaluationOfOldFixesNotifiesNothing() throws {
        let setup = try setUp("findmy-geofence-notify-history")
        defer { setup.stop() }
        // A late batch from an offline phone: it left and came back hours ago. The projection records
        // both transitions at their times; neither is announced.
        try report(
            setup,
            [
                fixJSON(latitude: home, secondsAgo: 5 * 3600), fixJSON(latitude: away, secondsAgo: 4 * 3600),
                fixJSON(latitude: home, secondsAgo: 3 * 3600),
            ])
        // Then it leaves now: only this one is announced (its row follows the old ones, so once it has
        // arrived the old ones were looked at and passed over).
        try report(setup, [fixJSON(latitude: away, secondsAgo: 30)])
        let hooks = setup.receiver.requests(atLeast: 1) { path($0) == "/hook" }
        _ = setup.receiver.requests(atLeast: 1) { path($0) == "/findmy-home" }
        #expect(hooks.count == 1)
        let recorded = try RFC3339.parseMicros(try body(hooks[0])["recorded_at"]?.stringValue ?? "")
        #expect(Int64(Date().timeIntervalSince1970 * 1_000_000) - recorded < 3_600_000_000)
        #expect(setup.receiver.requests.count == 2)
        let transitions = try get(
            setup.connection, "/api/find-my/geofences/\(setup.fenceID)/transitions", token: setup.anna)
        if transitions.status == 200 {
            #expect(try transitions.body["transitions"]?.arrayValue.count == 3)
        }
    }
}
