import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Testing

/// A message larger than findmy reads (a phone's login publishing 10 MB on its own topic) is
/// acknowledged to the broker and recorded as a `too_large` rejection; the messages behind it are
/// stored, findmy's connection stays up, and the persistent session is not jammed across a restart.
@Suite struct OwnTracksMQTTOversizedTests {
    /// A card whose "photo" is ten times the 1 MiB findmy reads.
    static func oversizedCard(_ directory: ScratchDirectory) throws -> String {
        let path = directory.path + "/card.json"
        var card = Array(#"{"_type":"card","name":"Alice","face":""#.utf8)
        card += [UInt8](repeating: 0x41, count: 10_000_000)
        card += Array(#""}"#.utf8)
        try Data(card).write(to: URL(fileURLWithPath: path))
        return path
    }

    static func metric(_ server: ServerProcess, _ line: String) throws -> Bool {
        let metrics = try HTTPConnection(address: server.address).send(
            "GET", "/metrics", headers: [], body: [])
        return String(decoding: metrics.body, as: UTF8.self).split(separator: "\n").contains { $0 == line }
    }

    @Test func aMessageTooLargeToReadIsAcknowledgedRecordedOnceAndBlocksNothing() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-oversized")
        let files = ScratchDirectory("findmy-mqtt-oversized-files")
        let alice = try addUser("alice", data: data.path)
        let card = try Self.oversizedCard(files)
        let topic = "owntracks/alice/phone"
        var server = try OwnTracksMQTTTests.server(data.path, broker, projector: true)
        defer { stopIfRunning(server) }

        try broker.publish(topic: topic, file: card)
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 45.1))
        try #require(
            waitUntil(timeoutSeconds: 60) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 2 },
            "both messages acknowledged: \((try? OwnTracksMQTTTests.mqttHealth(server)) ?? .null)")
        #expect(OwnTracksMQTTTests.count(server, "connections") == 1, "the connection never dropped")
        #expect(OwnTracksMQTTTests.count(server, "oversized_messages") == 1)
        #expect(try Self.metric(server, "findmy_mqtt_messages_oversized_total 1"))
        #expect(server.process.standardError.contains("\"mqtt_message_too_large\""))
        #expect(try OwnTracksMQTTTests.batches(data.path, latitude: 45.1).count == 1)
        #expect(server.stop() == 0)

        // While findmy is stopped the session keeps the same card again and a location behind it;
        // the next start gets both, first thing.
        try broker.publish(topic: topic, file: card)
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 45.2))
        server = try OwnTracksMQTTTests.server(data.path, broker, projector: true)
        try #require(
            waitUntil(timeoutSeconds: 60) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 2 },
            "both messages acknowledged after the restart: \((try? OwnTracksMQTTTests.mqttHealth(server)) ?? .null)"
        )
        #expect(OwnTracksMQTTTests.count(server, "connections") == 1)
        #expect(try OwnTracksMQTTTests.batches(data.path, latitude: 45.2).count == 1)

        // What the owner sees: the two locations, and the card once, as a rejection.
        try waitForProjector(data.path)
        let connection = HTTPConnection(address: server.address)
        let devices = try get(connection, "/api/find-my/devices", token: alice).body["devices"]!.arrayValue
        #expect(devices.count == 1)
        let phoneID = try #require(try devices.first?["id"]?.int64Value)
        let arrivals = try get(connection, "/api/find-my/devices/\(phoneID)/arrivals", token: alice)
            .body["arrivals"]!.arrayValue
        let counts = try arrivals.map { try ($0["fix_count"]!.int64Value, $0["rejected_count"]!.int64Value) }
        #expect(counts.map { $0.0 } == [0, 1, 1], "\(arrivals)")
        #expect(counts.map { $0.1 } == [1, 0, 0], "\(arrivals)")
        #expect(arrivals.allSatisfy { $0["protocol"] == .string("owntracks-mqtt") })
        #expect(server.stop() == 0)

        let rejections = try dumpLog(data.path).records.filter { $0["type"] == .string("fix_batch") }
            .flatMap { try $0["rejected"]?.arrayValue ?? [] }
        #expect(rejections.count == 1)
        #expect(
            (try rejections.first?["reason"]?.stringValue)?.hasPrefix("too_large: ") == true, "\(rejections)")
    }
}
