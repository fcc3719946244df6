import Foundation
import HTTPClient
import JSON
import Testing

/// Commands through `findmy serve` to a real ntfy server (Debian's `ntfy serve` on loopback, which
/// the server may reach through `--allow-private-targets 127.0.0.0/8`), read back by subscribing
/// to the topic as the ntfy app does: the owner sets the device's topic through the API (nobody
/// else may), `sound` and `lost` arrive at max priority with their title and text, `found` at the
/// default priority, each delivery `sent` on channel `ntfy` with ntfy's message id; a `locate`
/// never goes there.
@Suite(.serialized) struct CommandNtfyEndToEndTests {
    @Test func soundLostAndFoundRingThroughNtfyAndLocateDoesNot() throws {
        let ntfy = try NtfyServer()
        defer { ntfy.stop() }
        let data = ScratchDirectory("findmy-ntfy")
        let olga = try addUser("olga", data: data.path)
        let mia = try addUser("mia", data: data.path)
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on"],
            environment: [ServerProcess.allowPrivateTargets: "127.0.0.0/8"])
        var serverRunning = true
        defer { if serverRunning { server.stop() } }
        let connection = HTTPConnection(address: server.address)
        let enrolled = try enrol(connection, userToken: olga, uuid: UUID().uuidString, name: "Olga's phone")
        let phone = try #require(enrolled.int("device_id"))
        let shared = try post(
            connection, "/api/find-my/devices/\(phone)/shares", token: olga, body: "{\"user\": \"mia\"}")
        #expect(shared.status == 200 || shared.status == 201, "\(shared.body)")

        let topic = "findmy-\(UUID().uuidString.prefix(8))"
        let topicURL = ntfy.baseURL + "/" + topic
        let body = "{\"topic_url\": \"\(topicURL)\"}"
        // Only the owner: the user it is shared with gets the 404 of a device they cannot change.
        let refused = try send(
            connection, "PUT", "/api/find-my/devices/\(phone)/ntfy", token: mia, body: body)
        #expect(refused.status == 404, "\(refused.body)")
        let set = try send(connection, "PUT", "/api/find-my/devices/\(phone)/ntfy", token: olga, body: body)
        #expect(set.status == 200 && set.string("topic_url") == topicURL, "\(set.body)")
        let offset = try #require(set.int("offset"))
        let owners = try get(connection, "/api/find-my/devices/\(phone)?after_offset=\(offset)", token: olga)
        #expect(owners.string("ntfy_topic_url") == topicURL, "\(owners.body)")
        let sharers = try get(connection, "/api/find-my/devices/\(phone)?after_offset=\(offset)", token: mia)
        #expect(sharers.status == 200 && sharers.body["ntfy_topic_url"] == nil, "\(sharers.body)")

        func command(_ json: String) throws -> String {
            let asked = try commandRequest(
                connection, "POST", "/api/find-my/devices/\(phone)/commands", token: olga, body: json
            ).answer
            #expect(asked.status == 202, "\(asked.body)")
            return try #require(asked.string("command_id"))
        }
        // One at a time, each once sent: a `found` ends the `lost` before it, and ntfy keeps the
        // order of arrival.
        let locate = try command("{\"kind\": \"locate\"}")
        var sent: [(command: String, delivery: [ShownDelivery])] = []
        for json in [
            "{\"kind\": \"sound\"}",
            "{\"kind\": \"lost\", \"message\": \"Please bring it back\", \"phone\": \"+49 30 1234567\"}",
            "{\"kind\": \"found\"}",
        ] {
            let id = try command(json)
            let answer = try waitForCommand(connection, device: phone, command: id, token: olga) {
                shownDeliveries($0).contains { $0.channel == "ntfy" && $0.state == "sent" }
            }
            sent.append((id, shownDeliveries(answer)))
        }

        // What ntfy holds: one message per command that can go there, none for the locate.
        let messages = try ntfy.messages(topic: topic)
        let shown = messages.map { message in
            [
                (try? message["title"]?.stringValue) ?? "", (try? message["message"]?.stringValue) ?? "",
                "\((try? message["priority"]?.int64Value) ?? 3)",
            ]
        }
        #expect(
            shown == [
                [
                    "Play sound on Olga's phone", "Someone is looking for Olga's phone and asked it to ring.",
                    "5",
                ],
                ["Olga's phone is lost", "Please bring it back\nCall +49 30 1234567", "5"],
                ["Olga's phone was found", "Olga's phone is no longer marked as lost.", "3"],
            ], "\(messages)")
        #expect(messages.first?["tags"]?[0] == .string("rotating_light"), "\(messages)")
        #expect(messages.dropFirst().first?["tags"]?[0] == .string("warning"), "\(messages)")

        // Each is sent on channel ntfy alone, with ntfy's id for the message.
        #expect(
            sent.map(\.delivery)
                == messages.map { message in
                    [
                        ShownDelivery(
                            channel: "ntfy", state: "sent", detail: (try? message["id"]?.stringValue) ?? "?",
                            retryAt: nil, addressDead: false)
                    ]
                }, "\(sent)")
        let located = try get(connection, "/api/find-my/devices/\(phone)/commands/\(locate)", token: olga)
        #expect(located.status == 200 && shownDeliveries(located).isEmpty, "\(located.body)")

        // Removed: null takes the topic away, and the owner sees it gone.
        let cleared = try send(
            connection, "PUT", "/api/find-my/devices/\(phone)/ntfy", token: olga,
            body: "{\"topic_url\": null}")
        #expect(cleared.status == 200 && cleared.body["topic_url"] == .null, "\(cleared.body)")
        let after = try get(
            connection, "/api/find-my/devices/\(phone)?after_offset=\(cleared.int("offset") ?? 0)",
            token: olga)
        #expect(after.body["ntfy_topic_url"] == .null, "\(after.body)")

        #expect(server.stop() == 0)
        serverRunning = false
        let dump = try FindmyProcess.run(["log", "dump", "--json", "--data-dir", data.path])
        let lines = dump.output.split(separator: "\n")
        let settings = lines.filter { $0.contains("\"device_ntfy_set\"") }
        #expect(settings.count == 2 && settings[0].contains(topic), "\(settings)")
        let sentOnNtfy = lines.filter { $0.contains("\"command_sent\"") && $0.contains("\"ntfy\"") }
        #expect(sentOnNtfy.count == 3, "\(sentOnNtfy)")
    }
}
