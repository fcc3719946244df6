import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// "Notify when found" through `findmy serve --projector on` against a local receiver
/// (ops/tests/webhook_receiver.py, which checks each webhook's signature with the secret the
/// settings gave the owner): docs/found-notices.md.
@Suite(.serialized) struct FoundNoticeTests {
    func header(_ request: JSONObject, _ name: String) -> String? {
        try? request["headers"]?[name]?.stringValue
    }

    func path(_ request: JSONObject) -> String { (try? request["path"]?.stringValue) ?? "" }

    @Test func aSilentDeviceReportingAgainNotifiesItsOwnerOnce() throws {
        let receiver = try FakeProvider("receiver", script: "webhook_receiver.py")
        defer { receiver.stop() }
        let data = ScratchDirectory("findmy-found-notice")
        let tokens = try ["anna", "ben"].map { try addUser($0, data: data.path) }
        let (anna, ben) = (tokens[0], tokens[1])
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { _ = server.stop() }
        let connection = HTTPConnection(address: server.address)
        let phone = try enrol(connection, userToken: anna, uuid: UUID().uuidString, name: "Anna's phone")
        let deviceID = try #require(phone.int("device_id"))
        let deviceToken = try #require(phone.string("device_token"))
        func report(secondsAgo: Int, latitude: Double = 52.52) throws -> Int64 {
            let answer = try post(
                connection, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude, secondsAgo: secondsAgo)]))
            #expect(answer.status == 200, "\(answer.body)")
            return try #require(answer.int("offset"))
        }
        let arm = "/api/find-my/devices/\(deviceID)/notify-when-found"
        // Last heard of two days ago: silent since.
        _ = try report(secondsAgo: 2 * 86_400)

        // Nowhere to notify yet: 409, saying what to set.
        let early = try send(connection, "PUT", arm, token: anna, body: "{\"armed\": true}")
        #expect(early.status == 409 && early.errorCode == "no_alert_target", "\(early.body)")
        #expect((try? early.body["error"]?["message"]?.stringValue)?.contains("notify_webhook_url") == true)

        // The owner's alert targets: both at the receiver; the settings give the webhook's secret.
        let base = "http://127.0.0.1:\(receiver.port)"
        let settings = try send(
            connection, "PUT", "/api/find-my/account/settings", token: anna,
            body: "{\"notify_webhook_url\": \"\(base)/found\", \"notify_ntfy_url\": \"\(base)/anna-found\"}")
        #expect(settings.status == 200, "\(settings.body)")
        #expect(settings.string("notify_webhook_url") == "\(base)/found")
        let secret = try #require(settings.string("notify_webhook_secret"))
        #expect(secret.count == 64)
        try receiver.command("secret \(secret)")
        let refused = try send(
            connection, "PUT", "/api/find-my/account/settings", token: anna,
            body: "{\"notify_webhook_url\": \"ftp://example.org/x\"}")
        #expect(refused.status == 400 && refused.errorCode == "invalid_field")

        // Someone else's device: the 404 of a missing device, armed or not.
        let bens = try send(connection, "PUT", arm, token: ben, body: "{\"armed\": true}")
        #expect(bens.status == 404, "\(bens.body)")

        let armed = try send(connection, "PUT", arm, token: anna, body: "{\"armed\": true}")
        #expect(armed.status == 200 && armed.body["armed"] == .bool(true), "\(armed.body)")
        let armedOffset = try #require(armed.int("offset"))
        let card = try get(
            connection, "/api/find-my/devices/\(deviceID)?after_offset=\(armedOffset)", token: anna)
        #expect(card.status == 200, "\(card.body)")
        #expect(card.body["notify_when_found"]?["armed"] == .bool(true), "\(card.body)")
        #expect(try card.body["notify_when_found"]?["since_offset"]?.int64Value == armedOffset)

        // It reports again: one webhook and one ntfy message.
        let found = try report(secondsAgo: 5, latitude: 52.53)
        let hooks = receiver.requests(atLeast: 1) { path($0) == "/found" }
        let topics = receiver.requests(atLeast: 1) { path($0) == "/anna-found" }
        #expect(hooks.count == 1 && topics.count == 1)
        let hook = try #require(hooks.first)
        let key = "found-d\(deviceID)-o\(found)"
        #expect(hook["signature_valid"] == .bool(true))
        #expect(header(hook, "idempotency-key") == key)
        #expect(header(hook, "x-findmy-event") == "device.found")
        let payload = try JSONParser.parse((try? hook["body"]?.stringValue) ?? "")
        #expect(try payload["type"]?.stringValue == "device.found")
        #expect(try payload["idempotency_key"]?.stringValue == key)
        #expect(try payload["device_id"]?.int64Value == deviceID)
        #expect(try payload["device_name"]?.stringValue == "Anna's phone")
        #expect(try payload["latitude"]?.doubleValue == 52.53)
        #expect(try payload["longitude"]?.doubleValue == 13.405)
        #expect(try payload["accuracy_m"]?.doubleValue == 12)
        #expect(payload["recorded_at"] != nil && payload["received_at"] != nil)
        let topic = try #require(topics.first)
        #expect(header(topic, "title") == "Anna's phone was found")
        #expect(header(topic, "tags") == "tada")
        #expect(header(topic, "idempotency-key") == key)
        let text = (try? topic["body"]?.stringValue) ?? ""
        #expect(text.hasPrefix("Anna's phone reported again at "), "\(text)")
        #expect(text.contains("(±12 m): https://www.openstreetmap.org/?mlat=52.53&mlon=13.405"), "\(text)")
        // The card shows it went off.
        let after = try get(connection, "/api/find-my/devices/\(deviceID)?after_offset=\(found)", token: anna)
        #expect(after.body["notify_when_found"]?["armed"] == .bool(false), "\(after.body)")
        #expect(after.body["notify_when_found"]?["since"] == nil)
        // Its delivery log: one row per target, delivered once the notifier recorded the answers.
        let log = "/api/find-my/devices/\(deviceID)/found-notices/deliveries"
        var entries: [JSONValue] = []
        let delivered = waitUntil {
            entries = (try? get(connection, log, token: anna).body["deliveries"]?.arrayValue) ?? []
            return entries.count == 2 && entries.allSatisfy { (try? $0["state"]?.stringValue) == "delivered" }
        }
        #expect(delivered, "\(entries)")
        #expect(entries.compactMap { try? $0["channel"]?.stringValue }.sorted() == ["ntfy", "webhook"])
        #expect(
            entries.compactMap { try? $0["url"]?.stringValue }.sorted() == [
                "\(base)/anna-found", "\(base)/found",
            ])
        for entry in entries {
            #expect(try entry["event"]?.stringValue == "found" && entry["idempotency_key"] == .string(key))
            #expect(try entry["device_id"]?.int64Value == deviceID && entry["attempts"] == .integer(1))
            #expect(entry["last_status"] == .integer(200) && entry["next_attempt_at"] == .null)
        }
        // A user the device is shared with sees neither the notice nor its log: the owner's targets.
        let shared = try send(
            connection, "POST", "/api/find-my/devices/\(deviceID)/shares", token: anna,
            body: "{\"user\": \"ben\"}")
        #expect(shared.status == 201, "\(shared.body)")
        let viewer = try get(connection, log, token: ben)
        #expect(viewer.status == 404 && viewer.errorCode == "device_not_found", "\(viewer.body)")
        let lent = try get(connection, "/api/find-my/devices/\(deviceID)", token: ben)
        #expect(lent.status == 200 && lent.body["notify_when_found"] == nil, "\(lent.body)")

        // A second report fires nothing: the notice was disarmed. Armed again, the third report
        // fires the second notice; by then every notice before it was queued, so the notifier's count
        // of queued deliveries says whether the second report queued any.
        _ = try report(secondsAgo: 3)
        let again = try send(connection, "PUT", arm, token: anna, body: "{\"armed\": true}")
        #expect(again.status == 200)
        let third = try report(secondsAgo: 1)
        let all = receiver.requests(atLeast: 2) { path($0) == "/found" }
        #expect(all.compactMap { header($0, "idempotency-key") } == [key, "found-d\(deviceID)-o\(third)"])
        var health = JSONValue.null
        let counted = try waitUntil {
            health = try JSONParser.parse(try connection.send("GET", "/healthz").body)
            return (try? health["geofence-notifier"]?["delivered"]?.int64Value) == 4
        }
        #expect(counted, "\(health)")
        #expect(try health["geofence-notifier"]?["queued"]?.int64Value == 4)
        #expect(receiver.requests.count == 4)
        // Newest first: the second notice's two rows, then the first's.
        let keys = try get(connection, log, token: anna).body["deliveries"]?.arrayValue.compactMap {
            try? $0["idempotency_key"]?.stringValue
        }
        #expect(keys == [String](repeating: "found-d\(deviceID)-o\(third)", count: 2) + [key, key])
    }
}
