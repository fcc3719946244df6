import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// Commands through `findmy serve` to a fake UnifiedPush endpoint that DECRYPTS what it gets with
/// python3-cryptography (RFC 8291 aes128gcm, an implementation independent of findmy's) and
/// checks the VAPID JWT (RFC 8292): sent with the push service's Location, endpoints answering
/// 410 and 404 ended, a 429 with Retry-After retried and then sent, a locate nobody answers
/// expired, a sound answered by the phone's report; a retry waiting when the server stops made
/// after it starts again.
@Suite(.serialized) struct CommandPushUnifiedPushEndToEndTests {
    @Test func sentDeadRetriedExpiredAndAnswered() throws {
        let life = try PushLifecycle("unifiedpush", []) { _ in
            ["--unifiedpush-contact", "mailto:ops@findmy.example", "--command-locate-expiry-seconds", "5"]
        }
        defer { life.stop() }
        let subscription = try JSONParser.parse(
            Array(try Data(contentsOf: URL(fileURLWithPath: life.fake.directory + "/subscription.json"))))
        let p256dh = try #require(try subscription["p256dh"]?.stringValue)
        let auth = try #require(try subscription["auth"]?.stringValue)
        func endpoint(_ path: String) -> String {
            "{\"provider\": \"unifiedpush\", \"token\": \"\(life.fake.baseURL)/up/\(path)\", "
                + "\"p256dh\": \"\(p256dh)\", \"auth\": \"\(auth)\"}"
        }
        let phone = try life.device("phone", registration: endpoint("phone-1"))
        let gone = try life.device("old-phone", registration: endpoint("dead"))
        let missing = try life.device("older-phone", registration: endpoint("gone"))
        let flaky = try life.device("flaky", registration: endpoint("once-busy-1"))

        // Sent: the fake decrypted the command; the delivery names the push service's Location.
        let sound = try life.command(phone.id, "sound")
        let pushed = life.pushes(sound)
        #expect(
            pushed.count == 1 && pushed.first?["payload"]?["kind"] == .string("sound"),
            "\(life.fake.allLines.suffix(5))")
        let location = try #require(pushed.first.flatMap { try? $0["location"]?.stringValue })
        let sent = try life.wait(phone.id, sound) { $0.string("state") == "sent" }
        #expect(sent.string("state") == "sent", "\(sent.body)")
        #expect(
            shownDeliveries(sent) == [
                ShownDelivery(
                    channel: "unifiedpush", state: "sent", detail: location, retryAt: nil, addressDead: false)
            ], "\(sent.body)")

        // Dead: 410 and 404 end the endpoint.
        for (device, status) in [(gone, "410"), (missing, "404")] {
            let command = try life.command(device.id, "sound")
            let failed = try life.wait(device.id, command) { $0.string("state") == "failed" }
            #expect(
                shownDeliveries(failed) == [
                    ShownDelivery(
                        channel: "unifiedpush", state: "failed", detail: "push service \(status)",
                        retryAt: nil,
                        addressDead: true)
                ], "\(failed.body)")
            #expect(failed.string("state") == "failed")
        }

        // Retry: 429 with Retry-After 1 once, then accepted.
        let retried = try life.command(flaky.id, "sound")
        let afterRetry = try life.wait(flaky.id, retried) { answer in
            shownDeliveries(answer).contains { $0.state == "sent" }
        }
        let steps = shownDeliveries(afterRetry)
        #expect(steps.map(\.state) == ["failed", "sent"], "\(afterRetry.body)")
        #expect(
            steps.first?.detail == "push service 429" && steps.first?.retryAt != nil, "\(afterRetry.body)")
        #expect(afterRetry.string("state") == "sent")
        #expect(life.pushes(retried).first?["payload"]?["kind"] == .string("sound"))

        // Expiry: a locate nobody answers (5 s on this server).
        let locate = try life.command(phone.id, "locate")
        #expect(life.pushes(locate).first?["payload"]?["kind"] == .string("locate"))
        let expired = try life.wait(phone.id, locate) { $0.string("state") == "expired" }
        #expect(expired.string("state") == "expired", "\(expired.body)")
        #expect(shownDeliveries(expired).map(\.state) == ["sent"], "\(expired.body)")

        // Answer: the phone's report in reply to the sound.
        try answerCommand(life.connection, deviceToken: phone.token, command: sound, latitude: 59.33)
        let answered = try life.wait(phone.id, sound) { $0.string("state") == "answered" }
        #expect(answered.string("state") == "answered", "\(answered.body)")
        #expect(answered.body["answer"]?["fix"]?["latitude"] == .double(59.33), "\(answered.body)")

        // A retry waiting when the server stops (the push service asked for 600 s) is not lost: the
        // server started again hands the command to the channel that has not taken it, even though
        // the device's own report took it meanwhile (its answer carried the command).
        let slow = try life.device("slow", registration: endpoint("once-slow-1"))
        let waiting = try life.command(slow.id, "sound")
        let beforeStop = try life.wait(slow.id, waiting) { answer in
            shownDeliveries(answer).contains { $0.retryAt != nil }
        }
        #expect(shownDeliveries(beforeStop).map(\.state) == ["failed"], "\(beforeStop.body)")
        let report = try post(
            life.connection, "/api/find-my/report", token: slow.token,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(report.body["commands"]?[0]?["command_id"] == .string(waiting), "\(report.body)")
        _ = try life.wait(slow.id, waiting) { $0.string("state") == "sent" }
        #expect(try life.restart() == 0)
        let resumed = try life.wait(slow.id, waiting) { answer in
            shownDeliveries(answer).contains { $0.channel == "unifiedpush" && $0.state == "sent" }
        }
        #expect(
            shownDeliveries(resumed).map { "\($0.channel) \($0.state)" } == [
                "unifiedpush failed", "report-answer sent", "unifiedpush sent",
            ], "\(resumed.body)")
        #expect(life.pushes(waiting).first?["payload"]?["kind"] == .string("sound"))

        #expect(life.server.stop() == 0)
        let invalidated = try life.logLines().filter { $0.contains("push_token_invalidated") }
        #expect(invalidated.count == 2, "\(invalidated)")
        #expect(invalidated.allSatisfy { $0.contains("\"provider\":\"unifiedpush\"") }, "\(invalidated)")
    }
}
