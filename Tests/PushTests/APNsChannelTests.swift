import Commands
import Crypto
import Foundation
import JSON
import Push
import PushFakeSupport
import Testing

/// The APNs channel against the fake APNs (HTTP/2 over TLS; it verifies each JWT with the key's
/// public half, the headers and the payload).
@Suite(.serialized) struct APNsChannelTests {
    static let team = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundle = "org.findmy.app"

    struct Setup {
        let fake: FakeProvider
        let tokens = TestTokens()
        let clock = TestClock(seconds: 1_800_000_000)
        let channel: APNsChannel

        init() throws {
            fake = try FakeProvider(
                "apns",
                [
                    "--team", APNsChannelTests.team, "--key-id", APNsChannelTests.keyID, "--bundle",
                    APNsChannelTests.bundle,
                ])
            let key = try PushSetup.apnsKey(fake.directory + "/AuthKey_\(APNsChannelTests.keyID).p8")
            var configuration = APNsConfiguration(
                teamID: APNsChannelTests.team, keyID: APNsChannelTests.keyID,
                bundleID: APNsChannelTests.bundle)
            configuration.productionURL = fake.baseURL
            configuration.sandboxURL = fake.baseURL
            configuration.caFile = fake.caFile
            channel = APNsChannel(configuration: configuration, key: key, tokens: tokens, clock: clock.now)
        }

        func stop() {
            channel.close()
            fake.stop()
        }

        func request(for delivery: CommandDelivery, count: Int = 1) -> [JSONObject] {
            fake.requests(atLeast: count) { $0["payload"]?["command_id"] == .string(delivery.commandID) }
        }
    }

    @Test func everyKindReachesTheFakeOnOneConnection() throws {
        let setup = try Setup()
        defer { setup.stop() }
        setup.tokens.register(
            device: 1, provider: "apns-location", token: "aaaa", topic: Self.bundle + ".location-query",
            environment: "sandbox")
        setup.tokens.register(
            device: 1, provider: "apns", token: "bbbb", topic: Self.bundle, environment: "sandbox")
        let channel = setup.channel
        #expect(channel.addresses(forDevice: 1).map(\.provider) == ["apns-location", "apns"])
        #expect(channel.addresses(forDevice: 1, kind: .sound).map(\.token) == ["bbbb"])
        #expect(channel.addresses(forDevice: 2).isEmpty)
        let location = channel.addresses(forDevice: 1)[0]
        let app = channel.addresses(forDevice: 1)[1]

        let locate = command(.locate)
        guard case .sent(let apnsID)? = deliverAndWait(channel, locate, to: location) else {
            Issue.record("locate not sent: \(setup.fake.allLines.suffix(3))")
            return
        }
        #expect(apnsID?.isEmpty == false)
        let located = setup.request(for: locate)
        #expect(located.count == 1)
        #expect(located.first?["push_type"] == .string("location"))
        #expect(located.first?["topic"] == .string(Self.bundle + ".location-query"))
        #expect(located.first?["apns_id"] == apnsID.map { .string($0) })

        let sound = command(.sound)
        #expect(deliverAndWait(channel, sound, to: app).map(isSent) == true)
        #expect(setup.request(for: sound).first?["payload"]?["aps"]?["sound"] == .string("default"))

        let lost = command(.lost, message: "Please return me", phone: "+49 30 1234567")
        #expect(deliverAndWait(channel, lost, to: app).map(isSent) == true)
        guard case .string(let body)? = setup.request(for: lost).first?["payload"]?["aps"]?["alert"]?["body"]
        else {
            Issue.record("no alert body")
            return
        }
        #expect(body.contains("Please return me") && body.contains("+49 30 1234567"))

        // Without a location token: a background push alone, and the alert asking to open the app
        // only as the follow-up the dispatcher delivers if the command is still unanswered.
        var fallback = command(.locate)
        guard
            case .sentWithFollowUp(let backgroundID, let afterSeconds)? = deliverAndWait(
                channel, fallback, to: app)
        else {
            Issue.record("a locate without a location token must ask for a follow-up")
            return
        }
        #expect(afterSeconds == 30)
        let background = setup.request(for: fallback)
        #expect(background.map { $0["push_type"] } == [.string("background")])
        #expect(background.first?["apns_id"] == backgroundID.map { .string($0) })
        fallback.followUp = true
        #expect(deliverAndWait(channel, fallback, to: app).map(isSent) == true)
        #expect(
            setup.request(for: fallback, count: 2).map { $0["push_type"] } == [
                .string("background"), .string("alert"),
            ])

        // A location token cannot ring.
        guard case .failed? = deliverAndWait(channel, command(.sound), to: location) else {
            Issue.record("sound to a location token must fail")
            return
        }
        #expect(setup.fake.requests.allSatisfy { $0["connection"] == .integer(1) })
        #expect(channel.connectionsOpened == 1)
    }

    @Test func deadTokensAreReportedDead() throws {
        let setup = try Setup()
        defer { setup.stop() }
        for (token, reason) in [
            ("dead-unregistered", "410 Unregistered"), ("dead-expired", "410 ExpiredToken"),
            ("dead-bad", "400 BadDeviceToken"),
        ] {
            let address = ChannelAddress(
                provider: "apns", token: token, topic: Self.bundle, environment: "production")
            #expect(
                deliverAndWait(setup.channel, command(.sound), to: address)
                    == .addressDead(reason: "APNs \(reason)"))
        }
    }

    /// Apple: DeviceTokenNotForTopic is not to be retried, and it is our topic that is wrong, not
    /// the token: failed with what to check, the token kept (one misconfiguration must not end
    /// every device's token).
    @Test func aTokenOfAnotherAppFailsNamingTheTopicAndIsKept() throws {
        let setup = try Setup()
        defer { setup.stop() }
        let address = ChannelAddress(
            provider: "apns", token: "wrong-topic", topic: Self.bundle, environment: "production")
        #expect(
            deliverAndWait(setup.channel, command(.sound), to: address)
                == .failed(
                    reason:
                        "APNs 400 DeviceTokenNotForTopic: the token belongs to another app than the topic \(Self.bundle): check --apns-bundle-id, or the topic the app registered the token with"
                ))
    }

    @Test func busyAndBrokenAreRetriedHonouringRetryAfter() throws {
        let setup = try Setup()
        defer { setup.stop() }
        let busy = ChannelAddress(
            provider: "apns", token: "busy", topic: Self.bundle, environment: "production")
        #expect(
            deliverAndWait(setup.channel, command(.sound), to: busy)
                == .retry(afterSeconds: 7, reason: "APNs 429 TooManyRequests"))
        let broken = ChannelAddress(
            provider: "apns", token: "broken", topic: Self.bundle, environment: "production")
        // No Retry-After: backoff per address, doubling.
        #expect(
            deliverAndWait(setup.channel, command(.sound), to: broken)
                == .retry(afterSeconds: 2, reason: "APNs 503 ServiceUnavailable"))
        #expect(
            deliverAndWait(setup.channel, command(.sound), to: broken)
                == .retry(afterSeconds: 4, reason: "APNs 503 ServiceUnavailable"))
    }

    /// Apple's clock decides when a provider token has expired: on 403 ExpiredProviderToken the
    /// channel signs a new one and sends again, and the command is still sent.
    @Test func anExpiredProviderTokenIsRenewedAndTheSendRepeated() throws {
        let setup = try Setup()
        defer { setup.stop() }
        let address = ChannelAddress(
            provider: "apns", token: "cccc", topic: Self.bundle, environment: "production")
        let first = command(.sound)
        #expect(deliverAndWait(setup.channel, first, to: address).map(isSent) == true)
        let firstIat = setup.request(for: first).first?["iat"]
        #expect(firstIat == .integer(1_800_000_000))
        // One minute later (the channel alone would keep its token for 40), Apple says it expired.
        try setup.fake.command("expire-before 1800000001")
        setup.clock.advance(seconds: 60)
        let second = command(.sound)
        #expect(deliverAndWait(setup.channel, second, to: address).map(isSent) == true)
        #expect(setup.request(for: second).first?["iat"] == .integer(1_800_000_060))
        #expect(setup.fake.allLines.contains { $0.contains("ExpiredProviderToken") })
        // Forty minutes on, a new token without being asked.
        setup.clock.advance(seconds: 40 * 60)
        let third = command(.sound)
        #expect(deliverAndWait(setup.channel, third, to: address).map(isSent) == true)
        #expect(setup.request(for: third).first?["iat"] == .integer(1_800_000_060 + 40 * 60))
    }

    @Test func aKeyFileOthersCanReadIsRefused() throws {
        let fake = try FakeProvider(
            "apns", ["--team", Self.team, "--key-id", Self.keyID, "--bundle", Self.bundle])
        defer { fake.stop() }
        let path = fake.directory + "/AuthKey_\(Self.keyID).p8"
        chmod(path, 0o644)
        #expect(throws: PushSetupError.keyFile(.tooOpen(path: path, mode: 0o100644))) {
            try PushSetup.apnsKey(path)
        }
        let message = String(describing: PushSetupError.keyFile(.tooOpen(path: path, mode: 0o100644)))
        #expect(message.contains("chmod 600") && !message.contains("BEGIN"))
        chmod(path, 0o600)
        #expect(throws: Never.self) { try PushSetup.apnsKey(path) }
    }
}

func isSent(_ outcome: DeliveryOutcome) -> Bool {
    if case .sent = outcome { return true }
    return false
}

/// A provider that cannot be reached is a retry, not a failure: the network comes back.
@Test func anUnreachableProviderIsRetried() throws {
    // A port nothing listens on: bound, then closed.
    let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) }
    }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe, $0, &length) }
    }
    close(probe)
    var configuration = APNsConfiguration(
        teamID: "TEAM123456", keyID: "KEY1234567", bundleID: "org.findmy.app")
    configuration.productionURL = "https://127.0.0.1:\(UInt16(bigEndian: address.sin_port))"
    let channel = APNsChannel(configuration: configuration, key: .generateP256(), tokens: TestTokens())
    defer { channel.close() }
    let address2 = ChannelAddress(
        provider: "apns", token: "dddd", topic: "org.findmy.app", environment: "production")
    guard case .retry(let after, let reason)? = deliverAndWait(channel, command(.sound), to: address2) else {
        Issue.record("an unreachable APNs must be a retry")
        return
    }
    #expect(after == 2 && reason.hasPrefix("APNs unreachable"))
}
