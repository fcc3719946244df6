import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// Commands through `findmy serve` to the fake OAuth 2.0 token endpoint and FCM HTTP v1
/// (ops/tests/fake_push.py verifies the RS256 assertion with the service account's public half,
/// the access token on every send, and the data message): sent with FCM's message name, a token
/// FCM calls UNREGISTERED or not a valid token ended, a 503 with Retry-After retried and then sent,
/// a locate nobody answers expired, a sound answered by the phone's report.
@Suite(.serialized) struct CommandPushFCMEndToEndTests {
    @Test func sentDeadRetriedExpiredAndAnswered() throws {
        let project = "findmy-e2e"
        let life = try PushLifecycle(
            "fcm", ["--project", project, "--client-email", "push@findmy-e2e.iam.example"]
        ) { fake in
            [
                "--fcm-service-account-file", fake.directory + "/service-account.json", "--fcm-url",
                fake.baseURL,
                "--command-locate-expiry-seconds", "5",
            ]
        }
        defer { life.stop() }
        func fcm(_ token: String) -> String { "{\"provider\": \"fcm\", \"token\": \"\(token)\"}" }
        let phone = try life.device("phone", registration: fcm("fcm-phone-1"))
        let old = try life.device("old-phone", registration: fcm("dead"))
        let stranger = try life.device("reinstalled", registration: fcm("invalid"))
        let flaky = try life.device("flaky", registration: fcm("once-unavailable-1"))

        // Sent: the data message reaches FCM with the command id; the delivery names FCM's message.
        let sound = try life.command(phone.id, "sound")
        let pushed = life.pushes(sound)
        #expect(
            pushed.count == 1 && pushed.first?["data"]?["kind"] == .string("sound"),
            "\(life.fake.allLines.suffix(5))")
        let name = try #require(pushed.first.flatMap { try? $0["name"]?.stringValue })
        #expect(name.hasPrefix("projects/\(project)/messages/"))
        let sent = try life.wait(phone.id, sound) { $0.string("state") == "sent" }
        #expect(sent.string("state") == "sent", "\(sent.body)")
        #expect(
            shownDeliveries(sent) == [
                ShownDelivery(channel: "fcm", state: "sent", detail: name, retryAt: nil, addressDead: false)
            ], "\(sent.body)")

        // Dead: 404 UNREGISTERED, and 400 INVALID_ARGUMENT with only FCM's own detail, end the token.
        for (device, reason) in [(old, "FCM 404 UNREGISTERED"), (stranger, "FCM 400 INVALID_ARGUMENT")] {
            let command = try life.command(device.id, "sound")
            let failed = try life.wait(device.id, command) { $0.string("state") == "failed" }
            #expect(failed.string("state") == "failed", "\(failed.body)")
            let shown = shownDeliveries(failed)
            #expect(
                shown.count == 1 && shown[0].channel == "fcm" && shown[0].detail.hasPrefix(reason)
                    && shown[0].addressDead && shown[0].retryAt == nil, "\(failed.body)")
        }

        // Retry: 503 with Retry-After 1 once, then accepted; the owner sees both steps.
        let retried = try life.command(flaky.id, "sound")
        let afterRetry = try life.wait(flaky.id, retried) { answer in
            shownDeliveries(answer).contains { $0.state == "sent" }
        }
        let steps = shownDeliveries(afterRetry)
        #expect(steps.map(\.state) == ["failed", "sent"], "\(afterRetry.body)")
        #expect(
            steps.first?.detail == "FCM 503 UNAVAILABLE" && steps.first?.retryAt != nil, "\(afterRetry.body)")
        #expect(!(steps.first?.addressDead ?? true))
        #expect(afterRetry.string("state") == "sent")
        #expect(life.fake.allLines.contains { $0.hasPrefix("REFUSED ") && $0.contains("UNAVAILABLE") })
        #expect(life.pushes(retried).count == 1)

        // Expiry: a locate nobody answers (5 s on this server) ends as expired, after FCM took it.
        let locate = try life.command(phone.id, "locate")
        #expect(life.pushes(locate).first?["data"]?["kind"] == .string("locate"))
        let expired = try life.wait(phone.id, locate) { $0.string("state") == "expired" }
        #expect(expired.string("state") == "expired", "\(expired.body)")
        #expect(shownDeliveries(expired).map(\.state) == ["sent"], "\(expired.body)")
        #expect(expired.body["answer"] == .null)

        // Answer: the phone's report in reply to the sound.
        try answerCommand(life.connection, deviceToken: phone.token, command: sound, latitude: 47.37)
        let answered = try life.wait(phone.id, sound) { $0.string("state") == "answered" }
        #expect(answered.string("state") == "answered", "\(answered.body)")
        #expect(answered.body["answer"]?["fix"]?["latitude"] == .double(47.37), "\(answered.body)")

        // The log: both dead tokens invalidated (the dump names the reason, not the token), no other.
        #expect(life.server.stop() == 0)
        let invalidated = try life.logLines().filter { $0.contains("push_token_invalidated") }
        #expect(invalidated.count == 2, "\(invalidated)")
        #expect(invalidated.contains { $0.contains("FCM 404 UNREGISTERED") }, "\(invalidated)")
        #expect(invalidated.contains { $0.contains("FCM 400 INVALID_ARGUMENT") }, "\(invalidated)")
    }
}
