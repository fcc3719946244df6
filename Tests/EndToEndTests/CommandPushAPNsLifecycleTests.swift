import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// The rest of APNs' lifecycle through `findmy serve` (CommandPushEndToEndTests has sent and a
/// dead token): a 429 with Retry-After retried and then sent; a locate to a phone without a
/// location-push token goes as a background push, the alert asking to open the app follows
/// once the wait (`--apns-alert-after-seconds`) is over and nobody answered, and the locate
/// expires; no alert follows one the app answered within the wait; a sound answered by the phone's report; a token of another app (400
/// DeviceTokenNotForTopic) failed with what to check, and kept.
@Suite(.serialized) struct CommandPushAPNsLifecycleTests {
    static let team = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundle = "org.findmy.app"

    @Test func retriedAlertAfterTheWaitExpiredAnsweredAndAnotherAppsToken() throws {
        let life = try PushLifecycle(
            "apns", ["--team", Self.team, "--key-id", Self.keyID, "--bundle", Self.bundle]
        ) { fake in
            [
                "--apns-key-file", fake.directory + "/AuthKey_\(Self.keyID).p8", "--apns-key-id", Self.keyID,
                "--apns-team-id", Self.team, "--apns-bundle-id", Self.bundle, "--apns-url", fake.baseURL,
                "--apns-sandbox-url", fake.baseURL, "--apns-alert-after-seconds", "3",
                "--command-locate-expiry-seconds", "6",
            ]
        }
        defer { life.stop() }
        func apns(_ token: String) -> String {
            "{\"provider\": \"apns\", \"token\": \"\(token)\", \"topic\": \"\(Self.bundle)\", \"environment\": \"production\"}"
        }
        let phone = try life.device("phone", registration: apns("cafe01"))
        let flaky = try life.device("flaky", registration: apns("once-busy-1"))
        let other = try life.device("other-app", registration: apns("wrong-topic"))
        let quick = try life.device("answers-quickly", registration: apns("cafe02"))

        // Retry: 429 with Retry-After 1 once, then accepted with APNs' id.
        let retried = try life.command(flaky.id, "sound")
        let afterRetry = try life.wait(flaky.id, retried) { answer in
            shownDeliveries(answer).contains { $0.state == "sent" }
        }
        let steps = shownDeliveries(afterRetry)
        #expect(steps.map(\.state) == ["failed", "sent"], "\(afterRetry.body)")
        #expect(
            steps.first?.detail == "APNs 429 TooManyRequests" && steps.first?.retryAt != nil,
            "\(afterRetry.body)")
        let apnsID = life.pushes(retried).first.flatMap { try? $0["apns_id"]?.stringValue }
        #expect(apnsID != nil && steps.last?.detail == apnsID, "\(afterRetry.body)")
        #expect(afterRetry.string("state") == "sent")

        // A locate without a location-push token that the background push makes the app answer:
        // no alert follows.
        let answeredLocate = try life.command(quick.id, "locate")
        #expect(life.pushes(answeredLocate).map { $0["push_type"] } == [.string("background")])
        try answerCommand(life.connection, deviceToken: quick.token, command: answeredLocate, latitude: 48.85)
        let quickAnswer = try life.wait(quick.id, answeredLocate) { $0.string("state") == "answered" }
        #expect(quickAnswer.string("state") == "answered", "\(quickAnswer.body)")

        // One nobody answers: the background push, then (unanswered after 3 s) the alert; then the
        // locate expires (6 s on this server).
        let locate = try life.command(phone.id, "locate")
        let pushes = life.pushes(locate, count: 2)
        #expect(pushes.map { $0["push_type"] } == [.string("background"), .string("alert")], "\(pushes)")
        let expired = try life.wait(phone.id, locate) { $0.string("state") == "expired" }
        #expect(expired.string("state") == "expired", "\(expired.body)")
        // This alert was due after the answered locate's would have been: that one never went.
        #expect(
            life.fake.requests.filter { pushCommandID($0) == answeredLocate }.map { $0["push_type"] } == [
                .string("background")
            ])
        let ids = pushes.compactMap { try? $0["apns_id"]?.stringValue }
        #expect(shownDeliveries(expired).map(\.detail) == ids && ids.count == 2, "\(expired.body)")

        // Answer: the phone's report in reply to a sound.
        let sound = try life.command(phone.id, "sound")
        _ = try life.wait(phone.id, sound) { $0.string("state") == "sent" }
        try answerCommand(life.connection, deviceToken: phone.token, command: sound, latitude: 52.37)
        let answered = try life.wait(phone.id, sound) { $0.string("state") == "answered" }
        #expect(answered.string("state") == "answered", "\(answered.body)")
        #expect(answered.body["answer"]?["fix"]?["latitude"] == .double(52.37), "\(answered.body)")

        // Another app's token: failed, saying what to check; not dead (the topic is ours to fix).
        let wrong = try life.command(other.id, "sound")
        let failed = try life.wait(other.id, wrong) { $0.string("state") == "failed" }
        let shown = shownDeliveries(failed)
        #expect(shown.count == 1 && shown.first?.addressDead == false, "\(failed.body)")
        #expect(
            shown.first?.detail.hasPrefix("APNs 400 DeviceTokenNotForTopic") == true
                && shown.first?.detail.contains("--apns-bundle-id") == true, "\(failed.body)")

        #expect(life.server.stop() == 0)
        #expect(try life.logLines().filter { $0.contains("push_token_invalidated") }.isEmpty)
    }
}
