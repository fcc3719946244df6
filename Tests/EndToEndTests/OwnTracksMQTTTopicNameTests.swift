import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Testing

/// A topic's device level is the device's name as it is: a name that is blank or that begins or
/// ends with white space enrols nothing; the message is acknowledged and counted as
/// `invalid_device_name`.
@Suite struct OwnTracksMQTTTopicNameTests {
    @Test func aBlankOrPaddedDeviceNameInATopicEnrolsNothing() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-mqtt-blank-name")
        _ = try addUser("alice", data: data.path)
        let server = try OwnTracksMQTTTests.server(data.path, broker)
        defer { stopIfRunning(server) }
        let refused = [" ", "   ", " phone", "phone ", "\u{3000}", "phone\u{00A0}"]
        for name in refused {
            try broker.publish(topic: "owntracks/alice/" + name, OwnTracksMQTTTests.location(latitude: 43.1))
        }
        try broker.publish(topic: "owntracks/alice/my phone", OwnTracksMQTTTests.location(latitude: 43.2))
        #expect(
            waitUntil(timeoutSeconds: 60) {
                OwnTracksMQTTTests.count(server, "acknowledgements_sent") == Int64(refused.count + 1)
            }, "\((try? OwnTracksMQTTTests.mqttHealth(server)) ?? .null)")
        let metrics = try HTTPConnection(address: server.address).send(
            "GET", "/metrics", headers: [], body: [])
        #expect(
            String(decoding: metrics.body, as: UTF8.self).contains(
                "findmy_mqtt_messages_dropped_total{reason=\"invalid_device_name\"} \(refused.count)"))
        #expect(server.stop() == 0)

        let (records, _) = try dumpLog(data.path)
        let names = try records.filter { $0["type"] == .string("device_enrolled") }.map {
            try $0["name"]?.stringValue
        }
        #expect(names == ["my phone"], "only the well-named device is enrolled")
        #expect(try OwnTracksMQTTTests.batches(data.path, latitude: 43.1).isEmpty)
        #expect(try OwnTracksMQTTTests.batches(data.path, latitude: 43.2).count == 1)
    }
}
