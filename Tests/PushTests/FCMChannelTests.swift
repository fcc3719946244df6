import Commands
import Crypto
import Foundation
import JSON
import Push
import PushFakeSupport
import Testing

/// The FCM channel against the fake OAuth 2.0 token endpoint and FCM HTTP v1 (the fake verifies
/// the RS256 assertion with the service account's public half).
@Suite(.serialized) struct FCMChannelTests {
    struct Setup {
        let fake: FakeProvider
        let tokens = TestTokens()
        let clock = TestClock(seconds: 1_800_000_000)
        let channel: FCMChannel

        init() throws {
            fake = try FakeProvider(
                "fcm", ["--project", "findmy-test", "--client-email", "push@findmy-test.iam.example"])
            let account = try PushSetup.fcmServiceAccount(fake.directory + "/service-account.json")
            var configuration = FCMConfiguration(account: account)
            configuration.baseURL = fake.baseURL
            configuration.caFile = fake.caFile
            channel = FCMChannel(configuration: configuration, tokens: tokens, clock: clock.now)
        }

        func stop() {
            channel.close()
            fake.stop()
        }

        /// Token fetches seen, once at least `atLeast` are (the fetch is answered before it is read here).
        func tokenFetches(atLeast count: Int) -> Int {
            fake.requests(atLeast: count) { $0["path"] == .string("/token") }.count
        }
    }

    @Test func aHighPriorityDataMessageWithOneCachedAccessToken() throws {
        let setup = try Setup()
        defer { setup.stop() }
        setup.tokens.register(device: 2, provider: "fcm", token: "fcm-token-1")
        #expect(
            setup.channel.addresses(forDevice: 2) == [ChannelAddress(provider: "fcm", token: "fcm-token-1")])
        let address = setup.channel.addresses(forDevice: 2)[0]
        let lost = command(.lost, device: 2, message: "Lost phone", phone: "+1 555 0100")
        guard case .sent(let name)? = deliverAndWait(setup.channel, lost, to: address) else {
            Issue.record("not sent: \(setup.fake.allLines.suffix(3))")
            return
        }
        #expect(name?.hasPrefix("projects/findmy-test/messages/") == true)
        let sent = setup.fake.requests { $0["token"] == .string("fcm-token-1") }.first
        #expect(sent?["data"]?["kind"] == .string("lost"))
        #expect(sent?["data"]?["phone"] == .string("+1 555 0100"))
        for _ in 0..<5 {
            #expect(
                deliverAndWait(setup.channel, command(.locate, device: 2), to: address).map(isSent) == true)
        }
        #expect(setup.tokenFetches(atLeast: 1) == 1)
        // Near the end of its hour the access token is replaced.
        setup.clock.advance(seconds: 3599 - 200)
        #expect(deliverAndWait(setup.channel, command(.locate, device: 2), to: address).map(isSent) == true)
        #expect(setup.tokenFetches(atLeast: 2) == 2)
        // A token FCM no longer takes (401) is fetched again once, and the message still goes.
        try setup.fake.command("revoke-tokens")
        #expect(deliverAndWait(setup.channel, command(.sound, device: 2), to: address).map(isSent) == true)
        #expect(setup.tokenFetches(atLeast: 3) == 3)
        #expect(setup.channel.connectionsOpened == 1)
    }

    @Test func unregisteredIsDeadAndQuotaIsRetriedAfterRetryAfter() throws {
        let setup = try Setup()
        defer { setup.stop() }
        #expect(
            deliverAndWait(
                setup.channel, command(.locate), to: ChannelAddress(provider: "fcm", token: "dead"))
                == .addressDead(reason: "FCM 404 UNREGISTERED"))
        #expect(
            deliverAndWait(
                setup.channel, command(.locate), to: ChannelAddress(provider: "fcm", token: "busy"))
                == .retry(afterSeconds: 9, reason: "FCM 429 QUOTA_EXCEEDED"))
        #expect(
            deliverAndWait(
                setup.channel, command(.locate), to: ChannelAddress(provider: "fcm", token: "unavailable"))
                == .retry(afterSeconds: 11, reason: "FCM 503 UNAVAILABLE"))
    }

    /// 400 INVALID_ARGUMENT with only an FcmError detail: the token is not a valid FCM token, which
    /// Google says never becomes valid: dead. With a google.rpc.BadRequest field violation: our
    /// message was refused, the token is fine: failed, naming the field. With neither: failed.
    @Test func invalidArgumentIsADeadTokenOrARefusedMessageByItsDetails() throws {
        let setup = try Setup()
        defer { setup.stop() }
        #expect(
            deliverAndWait(
                setup.channel, command(.locate), to: ChannelAddress(provider: "fcm", token: "invalid"))
                == .addressDead(
                    reason:
                        "FCM 400 INVALID_ARGUMENT: not a valid FCM registration token (The registration token is not a valid FCM registration token); the app registers a new one when it next runs, or check that it uses this Firebase project"
                ))
        #expect(
            deliverAndWait(
                setup.channel, command(.locate), to: ChannelAddress(provider: "fcm", token: "bad-payload"))
                == .failed(
                    reason:
                        "FCM 400 INVALID_ARGUMENT: FCM refused the message (message.data[0].value: Invalid value at 'message.data[0].value' (TYPE_STRING), 12); the token is kept. This is a findmy bug: please report it"
                ))
        // Neither detail: nothing says the token is at fault.
        #expect(
            deliverAndWait(
                setup.channel, command(.locate), to: ChannelAddress(provider: "fcm", token: "invalid-bare"))
                == .failed(
                    reason:
                        "FCM 400 INVALID_ARGUMENT: Request contains an invalid argument. (the token is kept)")
        )
    }

    @Test func aServiceAccountFileOthersCanReadIsRefused() throws {
        let fake = try FakeProvider("fcm", ["--project", "p", "--client-email", "e@example"])
        defer { fake.stop() }
        let path = fake.directory + "/service-account.json"
        chmod(path, 0o640)
        #expect(throws: PushSetupError.keyFile(.tooOpen(path: path, mode: 0o100640))) {
            try PushSetup.fcmServiceAccount(path)
        }
        chmod(path, 0o600)
        #expect(try PushSetup.fcmServiceAccount(path).projectID == "p")
    }
}
