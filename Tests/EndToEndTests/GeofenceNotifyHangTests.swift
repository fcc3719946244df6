import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// The geofence notifier is woken by the geofence projector's commits (its fallback poll here is an
/// hour), and a receiver that never answers holds back only its own delivery: another fence's
/// notification is sent while the hanging request is still open (docs/geofence-notifications.md,
/// "When").
@Suite(.serialized) struct GeofenceNotifyHangTests {
    let home = 52.52
    let office = 52.53  // 1.1 km north
    let elsewhere = 52.55  // 3.3 km from home, 2.2 km from the office

    func fence(
        _ connection: HTTPConnection, _ token: String, _ name: String, _ latitude: Double, _ device: Int64
    )
        throws -> Int64
    {
        let created = try post(
            connection, "/api/find-my/geofences", token: token,
            body:
                "{\"name\": \"\(name)\", \"latitude\": \(latitude), \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(device)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        return try #require(created.int("geofence_id"))
    }

    /// Points the fence's webhook at `receiver` and tells the receiver the fence's secret.
    func notify(_ connection: HTTPConnection, _ token: String, _ fenceID: Int64, _ receiver: FakeProvider)
        throws
    {
        let response = try connection.send(
            "PUT", "/api/find-my/geofences/\(fenceID)/notifications",
            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
            body: Array("{\"webhook_url\": \"http://127.0.0.1:\(receiver.port)/hook\"}".utf8))
        #expect(response.status == 200)
        let secret = try JSONParser.parse(response.body)["webhook_secret"]?.stringValue ?? ""
        try receiver.command("secret \(secret)")
    }

    /// How many of the receiver's hanging requests still have their client waiting.
    func hung(_ receiver: FakeProvider) throws -> Int? {
        let token = UUID().uuidString
        try receiver.command("status \(token)")
        return receiver.allLines.last { $0.hasPrefix("HUNG \(token) ") }.flatMap {
            Int($0.dropFirst("HUNG \(token) ".count))
        }
    }

    @Test func aHangingReceiverDoesNotHoldBackAnotherFence() throws {
        let hanging = try FakeProvider("receiver", script: "webhook_receiver.py")
        defer { hanging.stop() }
        let answering = try FakeProvider("receiver", script: "webhook_receiver.py")
        defer { answering.stop() }
        let data = ScratchDirectory("findmy-geofence-notify-hang")
        let anna = try addUser("anna", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: ["--projector", "on", "--geofence-notify-poll-seconds", "3600"])
        defer { stopIfRunning(server) }
        let connection = HTTPConnection(address: server.address)
        let phone = try enrol(connection, userToken: anna, uuid: UUID().uuidString)
        let deviceID = phone.int("device_id")!
        let homeID = try fence(connection, anna, "Home", home, deviceID)
        let officeID = try fence(connection, anna, "Office", office, deviceID)
        try notify(connection, anna, homeID, hanging)
        try notify(connection, anna, officeID, answering)
        try hanging.command("hang /hook")
        func report(_ latitude: Double, secondsAgo: Int) throws {
            let answer = try post(
                connection, "/api/find-my/report", token: phone.string("device_token")!,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude, secondsAgo: secondsAgo)]))
            #expect(answer.status == 200, "\(answer.body)")
        }

        // At home (sets both states), then elsewhere: Home's leave goes to the receiver that hangs.
        try report(home, secondsAgo: 90)
        try report(elsewhere, secondsAgo: 60)
        #expect(hanging.requests(atLeast: 1) { _ in true }.count == 1)
        #expect(try waitUntil(timeoutSeconds: 60) { try hung(hanging) == 1 })
        // Then at the office: its enter is sent while Home's request still hangs.
        try report(office, secondsAgo: 30)
        let entered = answering.requests(atLeast: 1) { _ in true }
        #expect(entered.count == 1)
        #expect(try hung(hanging) == 1, "the office's notification waited for the hanging receiver")
        let payload = try JSONParser.parse((try? entered.first?["body"]?.stringValue) ?? "")
        #expect(
            try payload["geofence_name"]?.stringValue == "Office" && payload["event"]?.stringValue == "enter")
        #expect(entered.first?["signature_valid"] == .bool(true))

        // Released, the hanging one is answered and recorded; both are delivered.
        try hanging.command("release")
        for (fenceID, event) in [(homeID, "leave"), (officeID, "enter")] {
            var rows: [JSONValue] = []
            let delivered = try waitUntil(timeoutSeconds: 60) {
                let log = try get(connection, "/api/find-my/geofences/\(fenceID)/deliveries", token: anna)
                rows = (try? log.body["deliveries"]?.arrayValue) ?? []
                return rows.count == 1 && (try? rows[0]["state"]?.stringValue) == "delivered"
            }
            #expect(delivered, "\(fenceID): \(rows)")
            #expect(try rows.first?["event"]?.stringValue == event)
        }
    }
}
