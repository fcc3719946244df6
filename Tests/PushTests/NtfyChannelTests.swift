import Commands
import JSON
import Testing

@testable import HTTPClient
@testable import Push

/// The ntfy channel's side that needs no server: which commands it carries, the message each
/// becomes, the request that carries it, and what each answer means (CommandNtfyEndToEndTests
/// sends them to a real `ntfy serve`).
@Suite struct NtfyChannelTests {
    final class Topics: NtfyTopicSource {
        let topics: [UInt64: (String, String)]
        init(_ topics: [UInt64: (String, String)]) { self.topics = topics }
        func ntfyTopic(deviceID: UInt64) -> (topicURL: String, deviceName: String)? {
            topics[deviceID].map { (topicURL: $0.0, deviceName: $0.1) }
        }
    }

    static func delivery(_ kind: CommandKind, message: String? = nil, phone: String? = nil) -> CommandDelivery
    {
        CommandDelivery(
            commandID: "3d1e5a8c-0b6f-4c1e-9a57-2f0d8b1c4e21", kind: kind, deviceID: 7, message: message,
            phone: phone)
    }

    @Test func everyKindButLocateHasTheDevicesTopic() {
        let channel = NtfyChannel(
            topics: Topics([7: ("https://ntfy.example/olga-phone", "Olga's phone")]),
            addressPolicy: AddressPolicy())
        defer { channel.close() }
        #expect(channel.name == "ntfy")
        for kind in [CommandKind.sound, .lost, .found] {
            #expect(
                channel.addresses(forDevice: 7, kind: kind, registrations: [])
                    == [ChannelAddress(provider: "ntfy", token: "https://ntfy.example/olga-phone")])
        }
        #expect(channel.addresses(forDevice: 7, kind: .locate, registrations: []).isEmpty)
        #expect(channel.addresses(forDevice: 8, kind: .sound, registrations: []).isEmpty)
    }

    @Test func soundAndLostRingAtMaxPriorityFoundAtTheDefault() throws {
        let sound = try #require(NtfyChannel.message(Self.delivery(.sound), deviceName: "Olga's phone"))
        #expect(sound.title == "Play sound on Olga's phone" && sound.priority == 5)
        #expect(sound.tags.hasPrefix("rotating_light"))
        let lost = try #require(
            NtfyChannel.message(
                Self.delivery(.lost, message: "Please bring it back", phone: "+49 30 1234567"),
                deviceName: "Olga's phone"))
        #expect(lost.priority == 5 && lost.tags.hasPrefix("warning") && lost.title == "Olga's phone is lost")
        #expect(lost.body == "Please bring it back\nCall +49 30 1234567")
        let silent = try #require(
            NtfyChannel.message(Self.delivery(.lost, message: "", phone: ""), deviceName: "tablet"))
        #expect(silent.body == "tablet was marked as lost.")
        let found = try #require(NtfyChannel.message(Self.delivery(.found), deviceName: "Olga's phone"))
        #expect(found.priority == 3 && found.title == "Olga's phone was found")
        #expect(NtfyChannel.message(Self.delivery(.locate), deviceName: "Olga's phone") == nil)
    }

    @Test func theRequestCarriesNtfysHeaders() {
        let request = NtfyMessage(
            title: "Play sound on Zoë's phone", tags: "rotating_light,findmy", priority: 5, body: "ring"
        )
        .request(topicURL: "https://ntfy.example/t", extraHeaders: ["X-Findmy-Command: c1"])
        #expect(request.url == "https://ntfy.example/t" && !request.isGet)
        #expect(
            request.headers == [
                "Content-Type: text/plain; charset=utf-8",
                // Not ASCII: RFC 2047, which ntfy decodes.
                "Title: =?UTF-8?B?UGxheSBzb3VuZCBvbiBab8OrJ3MgcGhvbmU=?=", "Tags: rotating_light,findmy",
                "Priority: 5", "X-Findmy-Command: c1",
            ])
        #expect(request.body == Array("ring".utf8))
        // The default priority is ntfy's own: no header.
        let plain = NtfyMessage(title: "t", tags: "", body: "b").request(topicURL: "http://n/t")
        #expect(plain.headers == ["Content-Type: text/plain; charset=utf-8", "Title: t"])
    }

    @Test func answersMapAsAWebhooksDo() {
        func outcome(_ result: Result<IncomingResponse, TransportFailure>) -> DeliveryOutcome {
            NtfyChannel.outcome(result, addressKey: "ntfy t", backoff: Backoff())
        }
        func response(_ status: Int, _ body: String = "", headers: [(String, String)] = []) -> Result<
            IncomingResponse, TransportFailure
        > {
            .success(
                IncomingResponse(
                    status: status, headers: headers.map { (name: $0.0, value: $0.1) },
                    body: Array(body.utf8),
                    httpMajorVersion: 1))
        }
        #expect(
            outcome(response(200, #"{"id":"MsUgQoytz94w","time":1796555457,"event":"message"}"#))
                == .sent(providerID: "MsUgQoytz94w"))
        #expect(outcome(response(200, "not json")) == .sent(providerID: nil))
        #expect(
            outcome(response(429, headers: [("retry-after", "7")]))
                == .retry(afterSeconds: 7, reason: "ntfy server answered 429"))
        #expect(outcome(response(503)) == .retry(afterSeconds: 2, reason: "ntfy server answered 503"))
        // A refusal is not quoted: the body may be anyone's words.
        #expect(outcome(response(403, "secret internal page")) == .failed(reason: "ntfy server answered 403"))
        #expect(
            outcome(.failure(TransportFailure(message: "Connection refused")))
                == .retry(afterSeconds: 2, reason: "ntfy server unreachable: Connection refused"))
        #expect(
            outcome(
                .failure(
                    TransportFailure(message: "refused: 127.0.0.1 is not a public address", permanent: true)))
                == .failed(reason: "ntfy server not sent to: refused: 127.0.0.1 is not a public address"))
    }

    /// The address policy holds at send time: a topic on loopback is not connected to unless the
    /// operator allowed it.
    @Test func aLoopbackTopicIsRefusedWhenItIsSent() async {
        let channel = NtfyChannel(
            topics: Topics([7: ("http://127.0.0.1:9/t", "phone")]), addressPolicy: AddressPolicy())
        defer { channel.close() }
        let outcome = await withCheckedContinuation { continuation in
            channel.deliver(
                Self.delivery(.sound), to: ChannelAddress(provider: "ntfy", token: "http://127.0.0.1:9/t")
            ) {
                continuation.resume(returning: $0)
            }
        }
        guard case .failed(let reason) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        #expect(reason.contains("127.0.0.1") && reason.contains("loopback"), "\(reason)")
    }
}
