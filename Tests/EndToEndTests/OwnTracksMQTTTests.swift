import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Testing

/// OwnTracks in MQTT mode against a real Debian mosquitto: a QoS 1 message is acknowledged to the
/// broker only once it is durable in the log, with a persistent session, so a crash between
/// receipt and durability means redelivery (and the fix stored once), and messages published
/// while findmy is down arrive when it starts.
@Suite struct OwnTracksMQTTTests {
    /// An OwnTracks location message as the app publishes it (`vel` km/h, `tst` epoch seconds).
    static func location(latitude: Double, secondsAgo: Int = 60) -> String {
        let tst = Int(Date().timeIntervalSince1970) - secondsAgo
        return
            "{\"_type\":\"location\",\"lat\":\(latitude),\"lon\":13.405,\"tst\":\(tst),\"acc\":12,\"batt\":81,\"bs\":1,\"vel\":36,\"t\":\"u\",\"tid\":\"ph\",\"topic\":\"owntracks/alice/phone\"}"
    }

    static func server(
        _ data: String, _ broker: Mosquitto, projector: Bool = false, hold: String? = nil,
        login: [String] = [], subscribed: Bool = true, url: String? = nil, extra: [String] = []
    ) throws -> ServerProcess {
        var arguments = ["--mqtt-url", url ?? "mqtt://127.0.0.1:\(broker.port)"] + login + extra
        if projector { arguments += ["--projector", "on"] }
        let server = try ServerProcess(
            data: data, extraArguments: arguments,
            environment: hold.map { ["FINDMY_TEST_MQTT_HOLD": $0] } ?? [:])
        // Subscribed: from here on the broker keeps what is published for findmy's session.
        guard subscribed else { return server }
        guard waitUntil(timeoutSeconds: 60, { (try? mqttHealth(server)["subscribed"]) == .bool(true) }) else {
            throw TestFailure("findmy did not subscribe: \(server.process.standardError)")
        }
        return server
    }

    static func mqttHealth(_ server: ServerProcess) throws -> JSONValue {
        let answer = try get(HTTPConnection(address: server.address), "/healthz", token: nil)
        return answer.body["mqtt"] ?? .null
    }

    static func count(_ server: ServerProcess, _ member: String) -> Int64? {
        try? mqttHealth(server)[member]?.int64Value
    }

    /// The fix batches of the log with a fix at `latitude`.
    static func batches(_ data: String, latitude: Double) throws -> [DumpedBatch] {
        try dumpLog(data).batches.filter { batch in
            batch.fixes.contains { (try? $0["latitude"]?.doubleValue) == latitude }
        }
    }

    @Test func aServerKilledBetweenReceiptAndDurabilityGetsTheMessageAgainAndStoresItOnce() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-crash")
        let alice = try addUser("alice", data: data.path)
        var server = try Self.server(data.path, broker, projector: true, hold: "before-append")
        try broker.publish(topic: "owntracks/alice/phone", Self.location(latitude: 48.1))
        // Received and enrolled, not appended: this is the moment to die.
        #expect(
            waitUntil(timeoutSeconds: 120) { server.process.standardError.contains("\"mqtt_test_hold\"") })
        server.kill9()
        #expect(try Self.batches(data.path, latitude: 48.1).isEmpty)

        server = try Self.server(data.path, broker, projector: true)
        defer { server.stop() }
        // Acknowledged to the broker only once durable: from here on the fix must be in the log.
        #expect(waitUntil(timeoutSeconds: 120) { Self.count(server, "acknowledgements_sent") == 1 })
        #expect(try Self.batches(data.path, latitude: 48.1).count == 1)
        try waitForProjector(data.path)
        let connection = HTTPConnection(address: server.address)
        let devices = try get(connection, "/api/find-my/devices", token: alice)
        let phones = try devices.body["devices"]!.arrayValue
        #expect(phones.count == 1)
        #expect(phones.first?["name"] == .string("phone"))
        let phoneID = try #require(try phones.first?["id"]?.int64Value)
        let history = try get(connection, "/api/find-my/devices/\(phoneID)/locations", token: alice)
        let latitudes = try history.body["locations"]!.arrayValue.map { try $0["latitude"]!.doubleValue }
        #expect(latitudes == [48.1], "the redelivered fix is in history exactly once")
        #expect(try Self.batches(data.path, latitude: 48.1).count == 1)
    }

    @Test func aMessageDurableButNotAcknowledgedWhenTheServerDiesIsStoredOnce() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-crash-ack")
        _ = try addUser("alice", data: data.path)
        var server = try Self.server(data.path, broker, hold: "before-ack")
        try broker.publish(topic: "owntracks/alice/phone", Self.location(latitude: 48.2))
        #expect(
            waitUntil(timeoutSeconds: 120) { server.process.standardError.contains("\"mqtt_test_hold\"") })
        // Durable, and the PUBACK never sent: the broker must deliver it again.
        #expect(try Self.batches(data.path, latitude: 48.2).count == 1)
        server.kill9()

        server = try Self.server(data.path, broker)
        #expect(waitUntil(timeoutSeconds: 120) { Self.count(server, "acknowledgements_sent") == 1 })
        #expect(Self.count(server, "messages_received") == 1)
        #expect(server.stop() == 0)
        #expect(try Self.batches(data.path, latitude: 48.2).count == 1, "the redelivery is a duplicate")
    }

    @Test func messagesPublishedWhileTheServerIsDownArriveWhenItStarts() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-away")
        _ = try addUser("alice", data: data.path)
        // The first start makes the session; a clean stop keeps it with the broker.
        let first = try Self.server(data.path, broker)
        #expect(first.stop() == 0)

        let latitudes = [47.1, 47.2, 47.3]
        let messages = latitudes.enumerated().map { Self.location(latitude: $1, secondsAgo: 300 - $0) }
        for message in messages { try broker.publish(topic: "owntracks/alice/phone", message) }
        let resent = messages[2]
        // Nobody called "mallory" in findmy: acknowledged, counted, nothing enrolled.
        try broker.publish(topic: "owntracks/mallory/phone", Self.location(latitude: 47.9))
        // The same message again (a phone resending after a lost PUBACK): stored once.
        try broker.publish(topic: "owntracks/alice/phone", resent)
        // A region transition, which the app publishes on the device's topic + /event.
        let tst = Int(Date().timeIntervalSince1970) - 200
        try broker.publish(
            topic: "owntracks/alice/phone/event",
            "{\"_type\":\"transition\",\"event\":\"enter\",\"desc\":\"home\",\"t\":\"c\",\"tst\":\(tst),"
                + "\"wtst\":\(tst - 1000),\"lat\":47.15,\"lon\":13.4,\"acc\":20,\"rid\":\"r1\",\"tid\":\"ph\"}"
        )

        let second = try Self.server(data.path, broker)
        #expect(waitUntil(timeoutSeconds: 120) { Self.count(second, "acknowledgements_sent") == 6 })
        #expect(Self.count(second, "unknown_user_messages") == 1)
        let metrics = try HTTPConnection(address: second.address).send(
            "GET", "/metrics", headers: [], body: [])
        let text = String(decoding: metrics.body, as: UTF8.self)
        #expect(text.contains("findmy_mqtt_messages_dropped_total{reason=\"unknown_user\"} 1"))
        // Three locations; the transition is a place, with no fix batch beside it.
        #expect(text.contains("findmy_batches_total{protocol=\"owntracks-mqtt\"} 3"))
        #expect(second.stop() == 0)

        let (records, batches) = try dumpLog(data.path)
        for latitude in latitudes {
            #expect(try Self.batches(data.path, latitude: latitude).count == 1, "latitude \(latitude)")
        }
        #expect(!batches.contains { $0.fixes.contains { (try? $0["latitude"]?.doubleValue) == 47.9 } })
        let enrolled = records.filter { $0["type"] == .string("device_enrolled") }
        #expect(enrolled.count == 1, "one device, alice's phone: \(enrolled)")
        let transitions = records.filter { $0["type"] == .string("region_transition") }
        #expect(transitions.count == 1)
        #expect(transitions.first?["region"] == .string("home"))
        #expect(
            transitions.first?["device"] != nil && transitions.first?["device"] == enrolled.first?["device"])
        // Every fix speaks the app's units converted: 36 km/h is 10 m/s.
        let fix = try #require(batches.first?.fixes.first)
        #expect(fix["speed_mps"] == .double(10) || fix["speed_mps"] == .integer(10))
    }

    @Test func theBrokerLoginAndItsACLDecideWhoseDeviceAMessageIs() throws {
        let acl = """
            pattern readwrite owntracks/%u/#
            user findmy
            topic read owntracks/#

            """
        let broker = try Mosquitto(
            logins: ["findmy": "subscriber-secret", "alice": "alice-secret"], acl: acl)
        let data = ScratchDirectory("findmy-mqtt-acl")
        _ = try addUser("alice", data: data.path)
        _ = try addUser("bob", data: data.path)
        let passwordFile = data.path + "/mqtt-password"

        // A wrong password: refused by the broker, said in /healthz, retried; nothing else stops.
        try "not-the-password\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let login = ["--mqtt-username", "findmy", "--mqtt-password-file", passwordFile]
        let refused = try Self.server(data.path, broker, login: login, subscribed: false)
        #expect(
            waitUntil(timeoutSeconds: 120) {
                (try? Self.mqttHealth(refused)["last_error"]?.stringValue)?.contains(
                    "check the login and password") == true
            }, "\((try? Self.mqttHealth(refused)) ?? .null)")
        #expect(refused.stop() == 0)

        try "subscriber-secret\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let server = try Self.server(data.path, broker, login: login)
        // alice's login may publish under owntracks/alice/ only: her message on bob's topic never
        // reaches findmy, so no device of bob's is made from it.
        try broker.publish(
            topic: "owntracks/bob/phone", Self.location(latitude: 46.2), login: ("alice", "alice-secret"))
        try broker.publish(
            topic: "owntracks/alice/phone", Self.location(latitude: 46.1), login: ("alice", "alice-secret"))
        #expect(waitUntil(timeoutSeconds: 120) { Self.count(server, "acknowledgements_sent") == 1 })
        #expect(server.stop() == 0)

        let (records, batches) = try dumpLog(data.path)
        let enrolled = records.filter { $0["type"] == .string("device_enrolled") }
        #expect(enrolled.count == 1)
        #expect(batches.count == 1)
        #expect(try Self.batches(data.path, latitude: 46.1).count == 1)
        #expect(try Self.batches(data.path, latitude: 46.2).isEmpty)
    }

    @Test func anMQTTSettingFindmyCannotHonourStopsTheStartWithAMessage() throws {
        let data = ScratchDirectory("findmy-mqtt-usage")
        let cases: [(arguments: [String], says: String)] = [
            (["--mqtt-url", "http://127.0.0.1:1883"], "must be mqtt://HOST"),
            (["--mqtt-url", "mqtt://127.0.0.1", "--mqtt-ca-file", "/etc/hostname"], "use an mqtts:// URL"),
            (["--mqtt-url", "mqtts://127.0.0.1", "--mqtt-ca-file", data.path + "/none.pem"], "cannot read"),
            (["--mqtt-url", "mqtt://user@127.0.0.1"], "--mqtt-username"),
            (
                ["--mqtt-url", "mqtt://127.0.0.1:1883", "--mqtt-topic", "owntracks/#"],
                "two single-level wildcards"
            ),
        ]
        for (arguments, says) in cases {
            let result = try FindmyProcess.run(
                ["serve", "--data-dir", data.path, "--projector", "off"] + arguments)
            #expect(result.status == 2, "\(arguments)")
            #expect(result.error.contains(says), "\(arguments): \(result.error)")
        }
    }
}
