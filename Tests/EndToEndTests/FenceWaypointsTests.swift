import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Testing

/// The server's geofences reach an OwnTracks phone as a `setWaypoints` command in the answer to its
/// next HTTP message, once after each change (docs/geofence-notifications.md, "OwnTracks waypoints").
@Suite(.serialized) struct FenceWaypointsTests {
    func location(_ latitude: Double) -> [UInt8] {
        let tst = Int(Date().timeIntervalSince1970)
        return Array(
            "{\"_type\":\"location\",\"lat\":\(latitude),\"lon\":13.405,\"acc\":12,\"tst\":\(tst),\"tid\":\"px\"}"
                .utf8)
    }

    /// The `setWaypoints` commands of an OwnTracks answer.
    func waypointCommands(_ response: HTTPClientResponse) throws -> [JSONValue] {
        #expect(response.status == 200)
        return try JSONParser.parse(response.body).arrayValue.filter {
            (try? $0["action"]?.stringValue) == "setWaypoints"
        }
    }

    @Test func aPhoneGetsItsFencesOnceAfterEachChange() throws {
        let setup = try OwnTracksHTTPTests.Setup()
        defer { setup.stop() }
        let auth = OwnTracksHTTPTests.basic("jane", setup.janeDevice.token)
        func publish(_ latitude: Double) throws -> [JSONValue] {
            try waypointCommands(
                try OwnTracksHTTPTests.publish(setup.connection, location(latitude), auth: auth))
        }
        // No fence yet: nothing.
        #expect(try publish(52.52).isEmpty)
        let body =
            "{\"name\": \"Home\", \"latitude\": 52.52, \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(setup.janeDevice.id)]}"
        let created = try post(setup.connection, "/api/find-my/geofences", token: setup.janeToken, body: body)
        #expect(created.status == 201, "\(created.body)")
        let fenceID = try #require(created.int("geofence_id"))
        let first = try publish(52.5201)
        #expect(first.count == 1)
        let waypoint = try #require(try first.first?["waypoints"]?["waypoints"]?.arrayValue.first)
        #expect(try first.first?["_type"]?.stringValue == "cmd")
        #expect(try first.first?["waypoints"]?["_type"]?.stringValue == "waypoints")
        #expect(try waypoint["_type"]?.stringValue == "waypoint")
        #expect(try waypoint["desc"]?.stringValue == "Home")
        #expect(try waypoint["rad"]?.int64Value == 100)
        #expect(try waypoint["tst"]?.int64Value == fenceID)
        // Once: the next message's answer has none.
        #expect(try publish(52.5202).isEmpty)
        // Changed (renamed, wider): sent again, the same tst.
        let changed = try setup.connection.send(
            "PUT", "/api/find-my/geofences/\(fenceID)",
            headers: [("Authorization", "Bearer \(setup.janeToken)"), ("Content-Type", "application/json")],
            body: Array(
                body.replacingOccurrences(of: "\"Home\"", with: "\"Home sweet home\"")
                    .replacingOccurrences(of: "100", with: "150").utf8))
        #expect(changed.status == 200)
        let again = try publish(52.5203)
        let renamed = try #require(try again.first?["waypoints"]?["waypoints"]?.arrayValue.first)
        #expect(try renamed["desc"]?.stringValue == "Home sweet home")
        #expect(try renamed["rad"]?.int64Value == 150)
        #expect(try renamed["tst"]?.int64Value == fenceID)
        #expect(try publish(52.5204).isEmpty)
    }

    /// Over MQTT: the command is published on the phone's `<topic>/cmd` after its next message.
    @Test func anMQTTPhoneGetsItsFencesOnItsCommandTopic() throws {
        let broker = try Mosquitto()
        let data = ScratchDirectory("findmy-waypoints-mqtt")
        let alice = try addUser("alice", data: data.path)
        let server = try OwnTracksMQTTTests.server(data.path, broker, projector: true)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        try broker.publish(topic: "owntracks/alice/phone", OwnTracksMQTTTests.location(latitude: 48.1))
        var deviceID: Int64?
        _ = waitUntil(timeoutSeconds: 60) {
            deviceID = try? get(connection, "/api/find-my/devices", token: alice).body["devices"]?
                .arrayValue.first?["id"]?.int64Value
            return deviceID != nil
        }
        let device = try #require(deviceID)
        let created = try post(
            connection, "/api/find-my/geofences", token: alice,
            body:
                "{\"name\": \"Office\", \"latitude\": 48.1, \"longitude\": 13.405, \"radius_m\": 200, \"device_ids\": [\(device)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        let phone = try broker.subscribe(topic: "owntracks/alice/phone/cmd", count: 1)
        try broker.publish(topic: "owntracks/alice/phone", OwnTracksMQTTTests.location(latitude: 48.1001))
        #expect(waitUntil(timeoutSeconds: 60) { !phone.messages.isEmpty })
        let message = try #require(phone.messages.first)
        let payload = try JSONParser.parse(String(message.dropFirst("owntracks/alice/phone/cmd ".count)))
        #expect(try payload["action"]?.stringValue == "setWaypoints")
        #expect(try payload["waypoints"]?["waypoints"]?.arrayValue.first?["desc"]?.stringValue == "Office")
    }
}
