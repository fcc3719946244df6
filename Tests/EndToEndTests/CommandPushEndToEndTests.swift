import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// A command through `findmy serve` to a push provider: the fake APNs (ops/tests/fake_push.py,
/// HTTP/2 over TLS, verifying the JWT with the key's public half, the headers and the payload)
/// receives the push carrying the command's id, and the command's deliveries say "sent" with
/// APNs' id; a token APNs calls unregistered ends as a failed delivery and a
/// `push_token_invalidated` event in the log, so it is not tried again.
@Suite(.serialized) struct CommandPushEndToEndTests {
    static let team = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundle = "org.findmy.app"

    func deliveries(_ answer: Answer) -> [(channel: String, state: String, detail: String)] {
        guard case .array(let items)? = answer.body["deliveries"] else { return [] }
        return items.map {
            (
                (try? $0["channel"]?.stringValue) ?? "", (try? $0["state"]?.stringValue) ?? "",
                (try? $0["detail"]?.stringValue) ?? ""
            )
        }
    }

    @Test func aSoundReachesTheFakeAPNsAndADeadTokenIsInvalidated() throws {
        let fake = try FakeProvider(
            "apns", ["--team", Self.team, "--key-id", Self.keyID, "--bundle", Self.bundle])
        defer { fake.stop() }
        let data = ScratchDirectory("findmy-command-push")
        let olga = try addUser("olga", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: [
                "--projector", "on",
                "--apns-key-file", fake.directory + "/AuthKey_\(Self.keyID).p8", "--apns-key-id", Self.keyID,
                "--apns-team-id", Self.team, "--apns-bundle-id", Self.bundle, "--apns-url", fake.baseURL,
                "--apns-sandbox-url", fake.baseURL, "--push-ca-file", fake.caFile,
            ])
        defer { stopIfRunning(server) }
        let connection = HTTPConnection(address: server.address)

        var devices: [(id: Int64, token: String)] = []
        for (name, pushToken) in [("phone", "cafe01"), ("old-phone", "dead-unregistered")] {
            let enrolled = try enrol(connection, userToken: olga, uuid: UUID().uuidString, name: name)
            let device = (
                id: try #require(enrolled.int("device_id")),
                token: try #require(enrolled.string("device_token"))
            )
            devices.append(device)
            let registered = try post(
                connection, "/api/find-my/push-tokens", token: device.token,
                body: "{\"provider\": \"apns\", \"token\": \"\(pushToken)\", \"topic\": \"\(Self.bundle)\", "
                    + "\"environment\": \"production\"}")
            #expect(registered.status == 200 || registered.status == 201, "\(registered.body)")
        }

        // The phone: the push arrives at the fake with the command id, and the command says sent.
        let asked = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(devices[0].id)/commands", token: olga,
            body: "{\"kind\": \"sound\"}"
        ).answer
        #expect(asked.status == 202, "\(asked.body)")
        let commandID = try #require(asked.string("command_id"))
        let pushed = fake.requests(atLeast: 1) { $0["payload"]?["command_id"] == .string(commandID) }
        #expect(pushed.count == 1, "\(fake.allLines.suffix(5))")
        #expect(pushed.first?["topic"] == .string(Self.bundle))
        let sent = try waitForCommand(connection, device: devices[0].id, command: commandID, token: olga) {
            self.deliveries($0).contains { $0.channel == "apns" && $0.state == "sent" }
        }
        #expect(sent.string("state") == "sent", "\(sent.body)")
        let apnsID = pushed.first.flatMap { try? $0["apns_id"]?.stringValue }
        #expect(apnsID != nil && deliveries(sent).contains { $0.channel == "apns" && $0.detail == apnsID })

        // The old phone: APNs answers 410 Unregistered; the delivery fails, the token is ended.
        let dead = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(devices[1].id)/commands", token: olga,
            body: "{\"kind\": \"sound\"}"
        ).answer
        #expect(dead.status == 202, "\(dead.body)")
        let deadID = try #require(dead.string("command_id"))
        let failed = try waitForCommand(connection, device: devices[1].id, command: deadID, token: olga) {
            self.deliveries($0).contains { $0.channel == "apns" && $0.state == "failed" }
        }
        #expect(
            deliveries(failed).contains { $0.channel == "apns" && $0.state == "failed" }, "\(failed.body)")
        #expect(server.stop() == 0)

        let dump = try FindmyProcess.run(
            ["log", "dump", "--json", "--data-dir", data.path], timeoutSeconds: 120)
        let invalidated = dump.output.split(separator: "\n").filter { $0.contains("push_token_invalidated") }
        #expect(
            invalidated.count == 1 && invalidated.first?.contains("\"provider\":\"apns\"") == true
                && invalidated.first?.contains("Unregistered") == true,
            "\(invalidated)")
    }
}
