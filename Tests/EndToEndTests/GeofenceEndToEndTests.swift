import Foundation
import HTTPClient
import JSON
import Testing

/// Geofences through `findmy serve` (docs/geofences.md): a fence drawn after the fixes answers for
/// their time, a late batch inserts the transitions that happened at their times, only the owner
/// reads a fence, and the geofence projector is a service in /healthz.
@Suite(.serialized) struct GeofenceEndToEndTests {
    let home = 52.52
    let away = 52.53  // 1.1 km north

    func send(_ server: ReadServer, _ method: String, _ target: String, token: String, body: String = "")
        throws
        -> Answer
    {
        let response = try server.connection.send(
            method, target,
            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
            body: Array(body.utf8))
        return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
    }

    /// A fix at `latitude`, `minutesAgo` before now, accuracy 12 m, and its recorded_at as sent.
    func fix(_ latitude: Double, minutesAgo: Int) -> (json: String, recordedAt: String) {
        let json = fixJSON(latitude: latitude, secondsAgo: minutesAgo * 60)
        let recordedAt = String(json.split(separator: "\"recorded_at\": \"")[1].prefix { $0 != "\"" })
        return (json, recordedAt)
    }

    func report(_ server: ReadServer, _ deviceToken: String, _ fixes: [String]) throws -> Int64 {
        let answer = try post(
            server.connection, "/api/find-my/report", token: deviceToken,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(answer.status == 200, "\(answer.body)")
        return answer.int("offset") ?? -1
    }

    /// The fence's transitions once the geofence projection holds `afterOffset`: (event, recorded_at).
    func transitions(_ server: ReadServer, _ fenceID: Int64, token: String, afterOffset: Int64) throws
        -> (answer: Answer, list: [(String, String)])
    {
        let answer = try get(
            server.connection, "/api/find-my/geofences/\(fenceID)/transitions?after_offset=\(afterOffset)",
            token: token)
        let list =
            (try? answer.body["transitions"]?.arrayValue.map {
                (try $0["event"]?.stringValue ?? "", try $0["recorded_at"]?.stringValue ?? "")
            }) ?? []
        return (answer, list)
    }

    func fenceBody(_ deviceID: Int64) -> String {
        "{\"name\": \"home\", \"latitude\": \(home), \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(deviceID)]}"
    }

    /// Same instant, whatever the number of fraction digits each side wrote.
    func sameTime(_ a: String, _ b: String) -> Bool {
        (try? RFC3339.parseMicros(a)) == (try? RFC3339.parseMicros(b))
    }

    @Test func aFenceDrawnAfterTheFixesFindsWhenThePhoneLeftAndCameBack() throws {
        let server = try ReadServer("findmy-geofence-history", users: ["anna", "ben"])
        defer { server.stop() }
        let anna = server.tokens[0]
        let phone = try enrol(server.connection, userToken: anna, uuid: UUID().uuidString)
        let deviceID = phone.int("device_id")!
        let deviceToken = phone.string("device_token")!
        let left = fix(away, minutesAgo: 240)
        let back = fix(home, minutesAgo: 120)
        _ = try report(
            server, deviceToken,
            [fix(home, minutesAgo: 300).json, left.json, fix(away, minutesAgo: 180).json, back.json])
        let created = try send(
            server, "POST", "/api/find-my/geofences", token: anna, body: fenceBody(deviceID))
        #expect(created.status == 201, "\(created.body)")
        let fenceID = created.int("geofence_id")!
        let (answer, list) = try transitions(
            server, fenceID, token: anna, afterOffset: created.int("offset")!)
        #expect(answer.status == 200, "\(answer.body)")
        #expect(list.map(\.0) == ["leave", "enter"])
        #expect(
            list.count == 2 && sameTime(list[0].1, left.recordedAt) && sameTime(list[1].1, back.recordedAt))
        let first = try answer.body["transitions"]?.arrayValue.first
        #expect(try first?["device_id"]?.int64Value == deviceID)
        #expect(try first?["fix_accuracy_m"]?.doubleValue == 12)
        // Received when the batch arrived, hours after it was recorded: both clocks are kept.
        let received = try RFC3339.parseMicros(try first?["received_at"]?.stringValue ?? "")
        #expect(received - (try RFC3339.parseMicros(left.recordedAt)) > 3 * 3_600_000_000)

        // Someone else: the 404 of a fence that does not exist.
        let ben = try get(
            server.connection, "/api/find-my/geofences/\(fenceID)/transitions", token: server.tokens[1])
        let missing = try get(server.connection, "/api/find-my/geofences/999/transitions", token: anna)
        #expect(ben.status == 404 && missing.status == 404 && ben.body == missing.body)
        // Paging: one at a time, the cursor leads to the second, then none.
        let page = try get(
            server.connection, "/api/find-my/geofences/\(fenceID)/transitions?limit=1", token: anna)
        let cursor = try #require(page.string("next_cursor"))
        let next = try get(
            server.connection, "/api/find-my/geofences/\(fenceID)/transitions?limit=1&cursor=\(cursor)",
            token: anna)
        #expect(try next.body["transitions"]?.arrayValue.first?["event"]?.stringValue == "enter")
        #expect(next.body["next_cursor"] == .null)
        // from/to bound recorded_at.
        let from = try get(
            server.connection,
            "/api/find-my/geofences/\(fenceID)/transitions?from=\(back.recordedAt.replacingOccurrences(of: "+", with: "%2B"))",
            token: anna)
        #expect(try from.body["transitions"]?.arrayValue.count == 1)

        // The geofence projector is a service of its own, with its status.
        let health = try JSONParser.parse(try server.connection.send("GET", "/healthz").body)
        #expect(try health["services"]?["geofences"]?["state"]?.stringValue == "running")
        #expect(health["geofences"]?["running"] == .bool(true))
    }

    @Test func aLateBatchInsertsTheTransitionsThatHappenedAtTheirTimes() throws {
        let server = try ReadServer("findmy-geofence-late", users: ["anna"])
        defer { server.stop() }
        let anna = server.tokens[0]
        let phone = try enrol(server.connection, userToken: anna, uuid: UUID().uuidString)
        let deviceID = phone.int("device_id")!
        let deviceToken = phone.string("device_token")!
        let created = try send(
            server, "POST", "/api/find-my/geofences", token: anna, body: fenceBody(deviceID))
        let fenceID = created.int("geofence_id")!
        _ = try report(server, deviceToken, [fix(home, minutesAgo: 200).json])
        let online = try report(server, deviceToken, [fix(home, minutesAgo: 10).json])
        #expect(try transitions(server, fenceID, token: anna, afterOffset: online).list.isEmpty)
        // Offline from 3 h ago to 1 h ago, away in between: the batch arrives now.
        let left = fix(away, minutesAgo: 150)
        let back = fix(home, minutesAgo: 60)
        let late = try report(server, deviceToken, [left.json, fix(away, minutesAgo: 100).json, back.json])
        let list = try transitions(server, fenceID, token: anna, afterOffset: late).list
        #expect(list.map(\.0) == ["leave", "enter"])
        #expect(
            list.count == 2 && sameTime(list[0].1, left.recordedAt) && sameTime(list[1].1, back.recordedAt))

        // Deleting the fence: gone for its owner too.
        #expect(try send(server, "DELETE", "/api/find-my/geofences/\(fenceID)", token: anna).status == 200)
        #expect(
            try get(server.connection, "/api/find-my/geofences/\(fenceID)/transitions", token: anna).status
                == 404)
    }
}
