import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Testing

/// A device its owner removed is not brought back by the phone's next MQTT message (its topic
/// derives the same UUID): the messages are acknowledged and dropped, one log line per topic per
/// window, across restarts, until the owner enrols the topic's UUID again.
@Suite struct OwnTracksMQTTRemovedTests {
    static func occurrences(_ text: String, _ needle: String) -> Int {
        text.components(separatedBy: needle).count - 1
    }

    @Test func aRemovedTopicDeviceStaysRemovedUntilItsOwnerEnrolsItAgain() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-removed")
        let alice = try addUser("alice", data: data.path)
        var server = try OwnTracksMQTTTests.server(data.path, broker)
        // Whichever server runs when the test ends, failing or not, is stopped.
        defer { stopIfRunning(server) }
        let topic = "owntracks/alice/phone"
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 44.1))
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 1 })
        var connection = HTTPConnection(address: server.address)
        let enrolment = try #require(
            try dumpLog(data.path).records.first { $0["type"] == .string("device_enrolled") })
        let phoneID = try #require(try enrolment["device"]?.int64Value)
        let removed = try connection.send(
            "DELETE", "/api/find-my/devices/\(phoneID)", headers: [("Authorization", "Bearer \(alice)")],
            body: [])
        #expect(removed.status == 200)

        // Two messages after the removal: acknowledged (not redelivered forever), not stored, one line.
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 44.2))
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 44.3))
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 3 })
        #expect(Self.occurrences(server.process.standardError, "\"mqtt_removed_device\"") == 1)
        let metrics = try connection.send("GET", "/metrics", headers: [], body: [])
        #expect(
            String(decoding: metrics.body, as: UTF8.self).contains(
                "findmy_mqtt_messages_dropped_total{reason=\"removed_device\"} 2"))
        #expect(server.stop() == 0)

        // After a restart (the registry from its snapshot or the log) it is still removed.
        server = try OwnTracksMQTTTests.server(data.path, broker)
        #expect(
            server.process.standardError.contains("\"from_snapshot\":true"),
            "the removal came from the snapshot")
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 44.4))
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 1 })
        let line = try #require(
            server.process.standardError.split(separator: "\n").first {
                $0.contains("\"mqtt_removed_device\"")
            })
        let uuid = try #require(try JSONParser.parse(Array(line.utf8))["device_uuid"]?.stringValue)
        for latitude in [44.2, 44.3, 44.4] {
            #expect(try OwnTracksMQTTTests.batches(data.path, latitude: latitude).isEmpty, "\(latitude)")
        }

        // The owner enrols the topic's UUID again (docs/clients.md): the next message is stored.
        connection = HTTPConnection(address: server.address)
        let enrolled = try post(
            connection, "/api/find-my/devices", token: alice,
            body: "{\"device_uuid\": \"\(uuid)\", \"name\": \"phone\", \"platform\": \"owntracks\"}")
        #expect(enrolled.status == 201, "\(enrolled.body)")
        try broker.publish(topic: topic, OwnTracksMQTTTests.location(latitude: 44.5))
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 2 })
        #expect(server.stop() == 0)
        #expect(try OwnTracksMQTTTests.batches(data.path, latitude: 44.5).count == 1)
        let records = try dumpLog(data.path).records
        #expect(records.filter { $0["type"] == .string("device_enrolled") }.count == 2)
    }

    @Test func aTransitionOnlyMessageAppendsTheTransitionAndNoEmptyBatch() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-transition")
        _ = try addUser("alice", data: data.path)
        let server = try OwnTracksMQTTTests.server(data.path, broker)
        defer { stopIfRunning(server) }
        let tst = Int(Date().timeIntervalSince1970) - 100
        let transition =
            "{\"_type\":\"transition\",\"event\":\"leave\",\"desc\":\"work\",\"t\":\"c\",\"tst\":\(tst),"
            + "\"wtst\":\(tst - 1000),\"lat\":47.15,\"lon\":13.4,\"acc\":20,\"rid\":\"r2\",\"tid\":\"ph\"}"
        try broker.publish(topic: "owntracks/alice/phone/event", transition)
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 1 })
        // The same message again (a resend) while the server runs: not appended a second time.
        try broker.publish(topic: "owntracks/alice/phone/event", transition)
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 2 })
        #expect(server.stop() == 0)
        let (records, batches) = try dumpLog(data.path)
        #expect(records.filter { $0["type"] == .string("region_transition") }.count == 1)
        #expect(batches.isEmpty, "no fix batch for a message without fixes: \(batches.count)")
    }
}

/// Stops a server the test may have stopped already (a test that fails half-way must not leave
/// one running); a server that ended is left alone, its pid may be another process's now.
func stopIfRunning(_ server: ServerProcess) {
    if server.process.process.isRunning { server.stop() }
}
