import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// The server's own requests to URLs its users give (docs/configuration.md, "Outgoing requests"):
/// a member must not make findmy reach what only findmy reaches (its own API, a router, a cloud
/// metadata service) and read the answer back. A real webhook receiver on loopback stands in for
/// such an internal service.
@Suite(.serialized) struct OutgoingTargetsTests {
    let home = 52.52
    let away = 52.53  // 1.1 km north of a 100 m fence

    /// A user with a phone and a 100 m fence around home on `server`: (user token, device token, fence id).
    func fence(_ connection: HTTPConnection, userToken: String) throws -> (String, Int64) {
        let phone = try enrol(connection, userToken: userToken, uuid: UUID().uuidString)
        let deviceID = try #require(phone.int("device_id"))
        let created = try post(
            connection, "/api/find-my/geofences", token: userToken,
            body:
                "{\"name\": \"Home\", \"latitude\": \(home), \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(deviceID)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        return (try #require(phone.string("device_token")), try #require(created.int("geofence_id")))
    }

    func setNotifications(
        _ connection: HTTPConnection, userToken: String, fenceID: Int64, webhook: String?, ntfy: String? = nil
    ) throws -> Answer {
        var members: [String] = []
        if let webhook { members.append("\"webhook_url\": \"\(webhook)\"") }
        if let ntfy { members.append("\"ntfy_url\": \"\(ntfy)\"") }
        let response = try connection.send(
            "PUT", "/api/find-my/geofences/\(fenceID)/notifications",
            headers: [("Authorization", "Bearer \(userToken)"), ("Content-Type", "application/json")],
            body: Array("{\(members.joined(separator: ", "))}".utf8))
        return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
    }

    /// Home, then away: one leave.
    func crossFence(_ connection: HTTPConnection, deviceToken: String) throws {
        for (latitude, secondsAgo) in [(home, 120), (away, 60)] {
            let answer = try post(
                connection, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude, secondsAgo: secondsAgo)]))
            #expect(answer.status == 200, "\(answer.body)")
        }
    }

    func deliveries(_ connection: HTTPConnection, userToken: String, fenceID: Int64) throws -> [JSONValue] {
        let log = try get(connection, "/api/find-my/geofences/\(fenceID)/deliveries", token: userToken)
        return (try? log.body["deliveries"]?.arrayValue) ?? []
    }

    @Test func aLiteralNonPublicAddressIsRefusedWhenAURLIsSetInEverySpelling() throws {
        let data = ScratchDirectory("findmy-targets-literal")
        let anna = try addUser("anna", data: data.path)
        let server = try ServerProcess(
            data: data.path, environment: [ServerProcess.allowPrivateTargets: ""])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let (deviceToken, fenceID) = try fence(connection, userToken: anna)
        let port = 8080
        let hosts = [
            "127.0.0.1", "localhost", "LOCALHOST.", "[::1]", "0.0.0.0", "127.1", "2130706433", "0x7f.0.0.1",
            "169.254.169.254", "10.1.2.3", "192.168.0.1", "172.16.0.1", "100.64.0.1", "[fd00::1]",
            "[fe80::1]", "[::ffff:127.0.0.1]", "[::]", "user@127.0.0.1",
        ]
        for host in hosts {
            for (webhook, ntfy) in [("http://\(host):\(port)/hook", nil), (nil, "https://\(host)/topic")] {
                let answer = try setNotifications(
                    connection, userToken: anna, fenceID: fenceID, webhook: webhook, ntfy: ntfy)
                #expect(answer.status == 400, "\(host): \(answer.body)")
                #expect(answer.errorCode == "invalid_field", "\(host): \(answer.body)")
                let message = (try? answer.body["error"]?["message"]?.stringValue) ?? ""
                #expect(message.contains("public addresses"), "\(host): \(message)")
            }
        }
        // findmy's own API.
        let own = try setNotifications(
            connection, userToken: anna, fenceID: fenceID,
            webhook: "http://\(server.address)/api/find-my/devices")
        #expect(own.status == 400, "\(own.body)")
        // A public address, or a name (checked when it is connected to), is taken.
        for url in ["http://93.184.216.34/hook", "https://hooks.example.org/findmy"] {
            let answer = try setNotifications(connection, userToken: anna, fenceID: fenceID, webhook: url)
            #expect(answer.status == 200, "\(url): \(answer.body)")
        }

        // A UnifiedPush endpoint a device registers is its server's target too.
        let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        let auth = "BTBZMqHH6r4Tts7J_aSIgg"
        for endpoint in ["https://127.0.0.1:9443/up", "https://[::1]/up", "https://localhost/up"] {
            let answer = try post(
                connection, "/api/find-my/push-tokens", token: deviceToken,
                body:
                    "{\"provider\": \"unifiedpush\", \"token\": \"\(endpoint)\", \"p256dh\": \"\(p256dh)\", \"auth\": \"\(auth)\"}"
            )
            #expect(
                answer.status == 400 && answer.errorCode == "invalid_field", "\(endpoint): \(answer.body)")
        }
    }

    /// A target that passed when it was set (allowed then; or a name whose DNS answer changes) is
    /// checked again on the address each connection is opened to: the receiver gets nothing, and the
    /// owner sees a short reason of findmy's own.
    @Test func aTargetRefusedAtConnectTimeReceivesNothing() throws {
        let receiver = try FakeProvider("receiver", script: "webhook_receiver.py")
        defer { receiver.stop() }
        let data = ScratchDirectory("findmy-targets-connect")
        let anna = try addUser("anna", data: data.path)
        let url = "http://127.0.0.1:\(receiver.port)/hook"
        let setUp = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        let fenceID: Int64
        let deviceToken: String
        do {
            let connection = HTTPConnection(address: setUp.address)
            (deviceToken, fenceID) = try fence(connection, userToken: anna)
            let set = try setNotifications(connection, userToken: anna, fenceID: fenceID, webhook: url)
            #expect(set.status == 200, "\(set.body)")
        } catch {
            setUp.stop()
            throw error
        }
        #expect(setUp.stop() == 0)

        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on", "--geofence-retry-base-seconds", "1"],
            environment: [ServerProcess.allowPrivateTargets: ""])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        try crossFence(connection, deviceToken: deviceToken)
        var rows: [JSONValue] = []
        let refused = try waitUntil(timeoutSeconds: 120) {
            rows = try deliveries(connection, userToken: anna, fenceID: fenceID)
            return rows.contains {
                (try? $0["attempts"]?.int64Value) ?? 0 >= 2 || (try? $0["state"]?.stringValue) == "delivered"
            }
        }
        #expect(refused, "\(rows)")
        let row = try #require(rows.first)
        let lastError = (try? row["last_error"]?.stringValue) ?? ""
        #expect(lastError.hasPrefix("refused: 127.0.0.1 is not a public address (loopback)"), "\(lastError)")
        #expect(row["last_status"] == .null)
        #expect(receiver.requests.isEmpty)
    }

    /// With loopback allowed the webhook is sent; a receiver's answer body is neither shown to the
    /// fence's owner nor written to the server's log: the status alone.
    @Test func aReceiversAnswerBodyIsNeitherShownNorLogged() throws {
        let receiver = try FakeProvider("receiver", script: "webhook_receiver.py")
        defer { receiver.stop() }
        let data = ScratchDirectory("findmy-targets-body")
        let anna = try addUser("anna", data: data.path)
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on", "--geofence-retry-base-seconds", "1"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let (deviceToken, fenceID) = try fence(connection, userToken: anna)
        let set = try setNotifications(
            connection, userToken: anna, fenceID: fenceID, webhook: "http://127.0.0.1:\(receiver.port)/hook")
        #expect(set.status == 200, "\(set.body)")
        try receiver.command("fail 1000")
        try crossFence(connection, deviceToken: deviceToken)
        #expect(receiver.requests(atLeast: 2) { _ in true }.count >= 2)
        var rows: [JSONValue] = []
        let answered = try waitUntil(timeoutSeconds: 120) {
            rows = try deliveries(connection, userToken: anna, fenceID: fenceID)
            return rows.contains {
                (try? $0["attempts"]?.int64Value) ?? 0 >= 2 || (try? $0["state"]?.stringValue) == "delivered"
            }
        }
        #expect(answered, "\(rows)")
        let row = try #require(rows.first)
        #expect(try row["last_status"]?.int64Value == 500)
        #expect(try row["last_error"]?.stringValue == "answered 500")
        // The receiver answers {"ok": false}; the log's geofence_notification lines must not carry it.
        let log = server.process.standardError
        #expect(log.contains("geofence_notification"))
        #expect(!log.contains("ok\\\": false") && !log.contains("\"ok\": false"), "\(log.suffix(2_000))")
    }
}
