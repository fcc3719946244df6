import Commands
import Crypto
import Foundation
import HTTPClient
import JSON
import Push
import PushFakeSupport
import Testing

/// The UnifiedPush channel against a fake push service that DECRYPTS what it receives with Python's
/// cryptography (an implementation independent of ours) and verifies the VAPID JWT.
@Suite(.serialized) struct UnifiedPushChannelTests {
    struct Setup {
        let fake: FakeProvider
        let tokens = TestTokens()
        let channel: UnifiedPushChannel
        let vapidKey: PrivateKey
        let publicKey: [UInt8]
        let authSecret: [UInt8]
        let dataDirectory: String

        /// The fake listens on loopback, which the channel refuses unless `allowLoopback`.
        init(allowLoopback: Bool = true) throws {
            fake = try FakeProvider("unifiedpush")
            guard
                case .object(let keys) = try JSONParser.parse(
                    Array(try Data(contentsOf: URL(fileURLWithPath: fake.directory + "/subscription.json")))),
                case .string(let p256dh)? = keys["p256dh"], case .string(let auth)? = keys["auth"],
                let publicKey = Base64URL.decode(p256dh), let authSecret = Base64URL.decode(auth)
            else { throw FakeFailure("no subscription.json") }
            self.publicKey = publicKey
            self.authSecret = authSecret
            dataDirectory = fake.directory + "/data"
            try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
            vapidKey = try PushSetup.vapidKey(dataDirectory + "/vapid-key.pem")
            var configuration = UnifiedPushConfiguration(contact: "mailto:admin@findmy.example")
            configuration.caFile = fake.caFile
            if allowLoopback {
                configuration.addressPolicy = AddressPolicy(allowed: [AddressRange("127.0.0.0/8")!])
            }
            channel = UnifiedPushChannel(configuration: configuration, vapidKey: vapidKey, tokens: tokens)
        }

        func stop() {
            channel.close()
            fake.stop()
        }

        func register(_ path: String, device: UInt64 = 3) -> ChannelAddress {
            let endpoint = fake.baseURL + path
            tokens.register(
                device: device, provider: "unifiedpush", token: endpoint, publicKey: publicKey,
                authSecret: authSecret)
            return ChannelAddress(provider: "unifiedpush", token: endpoint)
        }
    }

    @Test func theFakeDecryptsWhatWeSend() throws {
        let setup = try Setup()
        defer { setup.stop() }
        let address = setup.register("/up/device3?up=1")
        #expect(setup.channel.addresses(forDevice: 3) == [address])
        let lost = command(.lost, device: 3, message: "Gefunden? Bitte anrufen", phone: "+49 30 1234567")
        guard case .sent(let location)? = deliverAndWait(setup.channel, lost, to: address) else {
            Issue.record("not sent: \(setup.fake.allLines.suffix(3))")
            return
        }
        #expect(location?.hasPrefix(setup.fake.baseURL + "/m/") == true)
        let received = setup.fake.requests { $0["payload"]?["command_id"] == .string(lost.commandID) }.first
        #expect(received?["payload"]?["kind"] == .string("lost"))
        #expect(received?["payload"]?["message"] == .string("Gefunden? Bitte anrufen"))
        #expect(received?["vapid_k"] == .string(Base64URL.encode(setup.vapidKey.publicPoint)))
        #expect(received?["headers"]?["ttl"] == .string("604800"))
    }

    @Test func goneEndpointsAreDeadAndABusyServiceIsRetried() throws {
        let setup = try Setup()
        defer { setup.stop() }
        #expect(
            deliverAndWait(setup.channel, command(.locate, device: 3), to: setup.register("/up/dead"))
                == .addressDead(reason: "push service 410"))
        #expect(
            deliverAndWait(
                setup.channel, command(.locate, device: 4), to: setup.register("/up/gone", device: 4))
                == .addressDead(reason: "push service 404"))
        #expect(
            deliverAndWait(
                setup.channel, command(.locate, device: 5), to: setup.register("/up/busy", device: 5))
                == .retry(afterSeconds: 5, reason: "push service 429"))
    }

    /// An endpoint is a URL a device chose: by default a loopback address (here the fake's) is refused
    /// on the address libcurl is about to connect to, and nothing reaches it.
    @Test func anEndpointOnANonPublicAddressIsNotConnectedTo() throws {
        let setup = try Setup(allowLoopback: false)
        defer { setup.stop() }
        let outcome = deliverAndWait(
            setup.channel, command(.locate, device: 3), to: setup.register("/up/device3"))
        guard case .failed(let reason)? = outcome else {
            Issue.record("not refused: \(String(describing: outcome))")
            return
        }
        #expect(
            reason.hasPrefix(
                "push service not sent to: refused: 127.0.0.1 is not a public address (loopback)"))
        #expect(setup.fake.requests.isEmpty)
    }

    @Test func theVAPIDKeyIsMadeOnceAndKept() throws {
        let setup = try Setup()
        defer { setup.stop() }
        let path = setup.dataDirectory + "/vapid-key.pem"
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600)
        #expect(try PushSetup.vapidKey(path).publicPoint == setup.vapidKey.publicPoint)
    }
}
