import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Postgres
import Testing

/// One request with a user or device token, and its answer and headers (the command tests'
/// helpers, shared with CommandPushEndToEndTests).
func commandRequest(
    _ connection: HTTPConnection, _ method: String, _ target: String, token: String, body: String? = nil
)
    throws -> (answer: Answer, headers: [(name: String, value: String)])
{
    var headers: [(name: String, value: String)] = [("Authorization", "Bearer \(token)")]
    if body != nil { headers.append(("Content-Type", "application/json")) }
    let response = try connection.send(method, target, headers: headers, body: Array((body ?? "").utf8))
    return (
        Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null),
        response.headers
    )
}

/// Reads a command until `done` holds, within a generous deadline; the last answer.
func waitForCommand(
    _ connection: HTTPConnection, device: Int64, command: String, token: String, _ done: (Answer) -> Bool
) throws -> Answer {
    let deadline = Date().addingTimeInterval(60)
    var last = try get(connection, "/api/find-my/devices/\(device)/commands/\(command)", token: token)
    while !done(last) && Date() < deadline {
        usleep(50_000)
        last = try get(connection, "/api/find-my/devices/\(device)/commands/\(command)", token: token)
    }
    return last
}

/// Commands to devices over real HTTP against `findmy serve --projector on` (docs/commands.md):
/// who may send them, the rate limit, expiry, answers through a native report's `in_reply_to` and
/// through OwnTracks HTTP's `t: "r"`, and the `commands` table rebuilt by a replay.
@Suite(.serialized) struct CommandsEndToEndTests {
    static func basic(_ user: String, _ password: String) -> (name: String, value: String) {
        ("Authorization", "Basic " + Data("\(user):\(password)".utf8).base64EncodedString())
    }

    @Test func whoMayTheRateLimitExpiryAnswersAndRebuild() throws {
        let data = ScratchDirectory("findmy-commands")
        let olga = try addUser("olga", data: data.path)
        let mia = try addUser("mia", data: data.path)
        let sam = try addUser("sam", data: data.path)
        let eve = try addUser("eve", data: data.path)
        let adam = try addUser("adam", data: data.path)
        #expect(
            try FindmyProcess.run(["user", "role", "adam", "admin", "--data-dir", data.path]).status == 0)
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on", "--command-sound-expiry-seconds", "1"])
        var serverStopped = false
        defer { if !serverStopped { server.stop() } }
        let connection = HTTPConnection(address: server.address)

        var ids: [String: Int64] = [:]
        var deviceTokens: [String: String] = [:]
        for name in ["own", "locate-shared", "see-shared"] {
            let enrolled = try enrol(connection, userToken: olga, uuid: UUID().uuidString, name: name)
            let id: Int64 = try #require(enrolled.int("device_id"))
            let token: String = try #require(enrolled.string("device_token"))
            ids[name] = id
            deviceTokens[name] = token
        }
        let granted = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(ids["locate-shared"]!)/shares", token: olga,
            body: "{\"user\": \"mia\", \"permission\": \"locate\"}")
        #expect(granted.answer.status == 201 && granted.answer.string("permission") == "locate")
        let seeOnly = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(ids["see-shared"]!)/shares", token: olga,
            body: "{\"user\": \"sam\"}")
        #expect(seeOnly.answer.status == 201 && seeOnly.answer.string("permission") == "see")

        // The permission table: owner, shared with locate, shared without, admin, stranger.
        let locate = "{\"kind\": \"locate\"}"
        let table: [(String, String, String, Int)] = [
            ("owner", olga, "own", 202), ("shared with locate", mia, "locate-shared", 202),
            ("shared without", sam, "see-shared", 404), ("admin", adam, "own", 404),
            ("stranger", eve, "own", 404),
        ]
        var commandIDs: [String: String] = [:]
        for (who, token, device, status) in table {
            let answer = try commandRequest(
                connection, "POST", "/api/find-my/devices/\(ids[device]!)/commands", token: token,
                body: locate
            ).answer
            #expect(answer.status == status, "\(who): \(answer.body)")
            if status == 202 {
                #expect(answer.string("state") == "pending", "\(who)")
                let id: String = try #require(answer.string("command_id"))
                commandIDs[device] = id
            } else {
                #expect(answer.errorCode == "device_not_found", "\(who)")
                // Reading is refused alike: nobody learns what was asked of a device they may not locate.
                let list = try get(connection, "/api/find-my/devices/\(ids[device]!)/commands", token: token)
                #expect(list.status == 404, "\(who)")
            }
        }

        // Rate limit: a second locate of the same device within 30 s.
        let again = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(ids["own"]!)/commands", token: olga, body: locate)
        #expect(again.answer.status == 429 && again.answer.errorCode == "command_rate_limited")
        let retryAfter = again.headers.first { $0.name.lowercased() == "retry-after" }.flatMap {
            Int($0.value)
        }
        #expect(retryAfter.map { (1...30).contains($0) } == true, "\(again.headers)")

        // Expiry (sound after 1 s on this server): the command ends as expired.
        let sound = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(ids["own"]!)/commands", token: olga,
            body: "{\"kind\": \"sound\"}")
        #expect(sound.answer.status == 202)
        let soundID = try #require(sound.answer.string("command_id"))
        let expired = try waitForCommand(connection, device: ids["own"]!, command: soundID, token: olga) {
            $0.string("state") == "expired"
        }
        #expect(expired.string("state") == "expired", "\(expired.body)")

        // A native report: its answer carries the open locate; a batch with in_reply_to answers it.
        let ownLocate = commandIDs["own"]!
        let plain = try post(
            connection, "/api/find-my/report", token: deviceTokens["own"],
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(plain.status == 200)
        let carried = try plain.body["commands"]?.arrayValue.map { try $0["command_id"]!.stringValue } ?? []
        #expect(carried == [ownLocate], "\(plain.body)")
        let reply = try post(
            connection, "/api/find-my/report", token: deviceTokens["own"],
            body: "{\"batch_id\": \"\(UUID().uuidString)\", \"in_reply_to\": \"\(ownLocate)\", \"fixes\": ["
                + fixJSON(latitude: 48.1, secondsAgo: 30) + ", " + fixJSON(latitude: 48.2, secondsAgo: 2)
                + "]}")
        let stillOpen = try reply.body["commands"]?.arrayValue.count
        #expect(reply.status == 200 && stillOpen == 0, "\(reply.body)")
        let answered = try waitForCommand(connection, device: ids["own"]!, command: ownLocate, token: olga) {
            $0.string("state") == "answered"
        }
        #expect(answered.string("state") == "answered", "\(answered.body)")
        #expect(answered.body["answer"]?["fix"]?["latitude"] == .double(48.2), "the batch's newest fix")
        #expect(answered.string("requested_by") == "olga")
        let channels = try answered.body["deliveries"]?.arrayValue.map { try $0["channel"]!.stringValue }
        #expect(channels == ["report-answer"], "\(answered.body)")

        // OwnTracks HTTP: the next POST's answer asks for a location; one with t "r" answers mia's locate.
        let miaLocate = commandIDs["locate-shared"]!
        let owntracks = HTTPConnection(address: server.address)
        func owntracksPost(_ trigger: String) throws -> JSONValue {
            let tst = Int(Date().timeIntervalSince1970) - 1
            let body =
                "{\"_type\": \"location\", \"lat\": 47.5, \"lon\": 9.7, \"acc\": 8, \"tst\": \(tst), \"t\": \"\(trigger)\"}"
            let response = try owntracks.send(
                "POST", "/api/find-my/owntracks",
                headers: [
                    Self.basic("olga", deviceTokens["locate-shared"]!), ("Content-Type", "application/json"),
                ],
                body: Array(body.utf8))
            #expect(response.status == 200)
            return try JSONParser.parse(response.body)
        }
        let asked = try owntracksPost("u")
        #expect(asked == .array([.object(["_type": .string("cmd"), "action": .string("reportLocation")])]))
        #expect(try owntracksPost("r") == .array([]))
        let viaOwnTracks = try waitForCommand(
            connection, device: ids["locate-shared"]!, command: miaLocate, token: mia
        ) { $0.string("state") == "answered" }
        #expect(viaOwnTracks.body["answer"]?["protocol"] == .string("owntracks-http"), "\(viaOwnTracks.body)")
        #expect(viaOwnTracks.string("requested_by") == "mia")

        // The owner sees every command to the device and by whom, newest first.
        let list = try get(connection, "/api/find-my/devices/\(ids["own"]!)/commands", token: olga)
        let kinds = try list.body["commands"]?.arrayValue.map { try $0["kind"]!.stringValue }
        #expect(kinds == ["sound", "locate"], "\(list.body)")

        // The owner sees what the grantee asked of her device, and by whom.
        let sharedList = try get(
            connection, "/api/find-my/devices/\(ids["locate-shared"]!)/commands", token: olga)
        let askers = try sharedList.body["commands"]?.arrayValue.map { try $0["requested_by"]!.stringValue }
        #expect(askers == ["mia"], "\(sharedList.body)")

        // The panel: the buttons for who may locate, none for a see-only share; a lost device is marked.
        let lost = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(ids["own"]!)/commands", token: olga,
            body: "{\"kind\": \"lost\", \"message\": \"Please call\", \"phone\": \"+49 30 1234567\"}")
        #expect(lost.answer.status == 202)
        func page(_ device: String, _ token: String) throws -> String {
            let response = try connection.send(
                "GET", "/find-my?selected=\(ids[device]!)", headers: [("Authorization", "Bearer \(token)")])
            #expect(response.status == 200)
            return String(decoding: response.body, as: UTF8.self)
        }
        let ownPage = try page("own", olga)
        #expect(ownPage.contains("id=\"locate-now\"") && ownPage.contains("id=\"found\""))
        #expect(ownPage.contains("marked lost"))
        #expect(try page("locate-shared", mia).contains("id=\"locate-now\""))
        #expect(!(try page("see-shared", sam).contains("id=\"commands\"")))

        // Replay rebuilds the same commands tables.
        try waitForProjector(data.path)
        server.stop()
        serverStopped = true
        // `findmy log dump --json` shows every step with its fields.
        let dumped = try dumpLog(data.path).records
        let requested = dumped.filter { (try? $0["type"]?.stringValue) == "command_requested" }
        #expect(requested.count == 4)
        #expect(requested.first?["kind"] == .string("locate") && requested.first?["requested_by"] != nil)
        let answers = dumped.filter { (try? $0["type"]?.stringValue) == "command_answered" }
        #expect(Set(answers.compactMap { try? $0["protocol"]?.stringValue }) == ["native", "owntracks-http"])
        let permissions = dumped.filter { (try? $0["type"]?.stringValue) == "share_permission_changed" }
        #expect(permissions.map { $0["permission"] } == [.string("locate")])

        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        defer { try? cluster.stop() }
        try cluster.start()
        let query = """
            SELECT command_id, device_id, kind, state, requested_by, requested_at, answer_log_offset, answer_fix_index,
                answer_protocol, end_reason FROM findmy.commands ORDER BY command_id
            """
        let deliveries =
            "SELECT log_offset, command_id, device_id, channel, state, at, detail, retry_at, address_dead "
            + "FROM findmy.command_deliveries ORDER BY log_offset"
        func rows(_ sql: String, columns: Int) throws -> [[String?]] {
            let connection = try PostgresConnection(cluster.conninfo)
            defer { connection.close() }
            let result = try connection.execute(sql)
            return (0..<result.rowCount).map { row in
                (0..<columns).map { result.string(row, $0) }
            }
        }
        let before = (try rows(query, columns: 10), try rows(deliveries, columns: 9))
        #expect(before.0.count == 4 && !before.1.isEmpty)
        let replay = try FindmyProcess.run(["replay", "--data-dir", data.path], timeoutSeconds: 300)
        #expect(replay.status == 0, "\(replay.error)")
        try cluster.start()
        let after = (try rows(query, columns: 10), try rows(deliveries, columns: 9))
        #expect(after.0 == before.0)
        #expect(after.1 == before.1)
    }
}

extension CommandsEndToEndTests {
    /// OwnTracks over MQTT answers a locate the same way as over HTTP: a location with `t: "r"`.
    @Test func anOwnTracksMQTTLocationWithTriggerRAnswersTheLocate() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-commands-mqtt")
        let alice = try addUser("alice", data: data.path)
        let server = try OwnTracksMQTTTests.server(data.path, broker, projector: true)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        try broker.publish(topic: "owntracks/alice/phone", OwnTracksMQTTTests.location(latitude: 48.1))
        var deviceID: Int64?
        _ = waitUntil(timeoutSeconds: 60) {
            deviceID = try? get(connection, "/api/find-my/devices", token: alice).body["devices"]?
                .arrayValue.first?["id"]?.int64Value
            return deviceID != nil
        }
        let device = try #require(deviceID)
        let asked = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(device)/commands", token: alice,
            body: "{\"kind\": \"locate\"}")
        #expect(asked.answer.status == 202)
        let command: String = try #require(asked.answer.string("command_id"))
        let tst = Int(Date().timeIntervalSince1970) - 1
        try broker.publish(
            topic: "owntracks/alice/phone",
            "{\"_type\":\"location\",\"lat\":48.3,\"lon\":13.405,\"tst\":\(tst),\"acc\":12,\"t\":\"r\",\"tid\":\"ph\"}"
        )
        let answered = try waitForCommand(connection, device: device, command: command, token: alice) {
            $0.string("state") == "answered"
        }
        #expect(answered.body["answer"]?["protocol"] == .string("owntracks-mqtt"), "\(answered.body)")
        #expect(answered.body["answer"]?["fix"]?["latitude"] == .double(48.3))
    }
}
