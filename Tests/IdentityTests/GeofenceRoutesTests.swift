import Events
import Foundation
import Geofences
import JSON
import Testing

@testable import Identity

/// The geofence definitions through the guarded router (docs/geofences.md, "API"): a fence is its
/// owner's alone, names only devices its owner can see, and every refusal says what was wrong.
@Suite struct GeofenceRoutesTests {
    func fenceBody(_ devices: [UInt64], radius: Double = 150, name: String = "home") -> String {
        "{\"name\": \"\(name)\", \"latitude\": 52.52, \"longitude\": 13.405, \"radius_m\": \(radius), "
            + "\"device_ids\": [\(devices.map(String.init).joined(separator: ", "))]}"
    }

    func auth(_ token: String) -> [(String, String)] {
        [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
    }

    @Test func anOwnerDefinesReadsReplacesAndDeletesAFence() throws {
        let door = try Door()
        let anna = try door.loggedInUser("anna")
        let phone = try door.enrol(anna.token)
        let created = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token), body: fenceBody([phone.id]))
        #expect(created.status == 201)
        let id = try #require(try created.body["geofence_id"]?.int64Value)

        let one = door.send("GET", "/api/find-my/geofences/\(id)", headers: auth(anna.token))
        #expect(one.status == 200)
        #expect(try one.body["name"]?.stringValue == "home")
        #expect(try one.body["radius_m"]?.doubleValue == 150)
        #expect(try one.body["device_ids"]?.arrayValue.map { try $0.int64Value } == [Int64(phone.id)])

        let replaced = door.send(
            "PUT", "/api/find-my/geofences/\(id)", headers: auth(anna.token),
            body: fenceBody([phone.id], radius: 300, name: "home, wider"))
        #expect(replaced.status == 200)
        #expect(try replaced.body["radius_m"]?.doubleValue == 300)
        let list = door.send("GET", "/api/find-my/geofences", headers: auth(anna.token))
        #expect(try list.body["geofences"]?.arrayValue.map { try $0["name"]?.stringValue } == ["home, wider"])

        #expect(door.send("DELETE", "/api/find-my/geofences/\(id)", headers: auth(anna.token)).status == 200)
        let gone = door.send("GET", "/api/find-my/geofences/\(id)", headers: auth(anna.token))
        #expect(gone.status == 404 && gone.errorCode == "geofence_not_found")
        // Ids are never given again: the next fence gets a new one.
        let next = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token), body: fenceBody([phone.id]))
        #expect(try next.body["geofence_id"]?.int64Value == id + 1)
    }

    @Test func someoneElsesFenceAnswersLikeOneThatDoesNotExist() throws {
        let door = try Door()
        let anna = try door.loggedInUser("anna")
        let ben = try door.loggedInUser("ben", role: .admin)
        let phone = try door.enrol(anna.token)
        let created = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token), body: fenceBody([phone.id]))
        let id = try #require(try created.body["geofence_id"]?.int64Value)
        let missing = door.send("GET", "/api/find-my/geofences/\(id + 100)", headers: auth(ben.token))
        #expect(missing.status == 404)
        for (method, body) in [("GET", ""), ("PUT", fenceBody([phone.id])), ("DELETE", "")] {
            let answer = door.send(
                method, "/api/find-my/geofences/\(id)", headers: auth(ben.token), body: body)
            #expect(answer.status == 404, "\(method)")
            #expect(answer.response.body == missing.response.body, "\(method)")
        }
        let list = door.send("GET", "/api/find-my/geofences", headers: auth(ben.token))
        #expect(try list.body["geofences"]?.arrayValue.isEmpty == true)
        // Still there, unchanged, for its owner.
        #expect(door.send("GET", "/api/find-my/geofences/\(id)", headers: auth(anna.token)).status == 200)
    }

    @Test func aFenceNamesOnlyDevicesItsOwnerCanSee() throws {
        let door = try Door()
        let anna = try door.loggedInUser("anna")
        let ben = try door.loggedInUser("ben")
        let annasPhone = try door.enrol(anna.token)
        let bensPhone = try door.enrol(ben.token)
        let refused = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token),
            body: fenceBody([annasPhone.id, bensPhone.id]))
        #expect(refused.status == 400 && refused.errorCode == "device_not_found")
        #expect(door.service.store.registry.read { $0.registry.geofences.fences.isEmpty })
        // Shared with her: now she may name it.
        let share = door.send(
            "POST", "/api/find-my/devices/\(bensPhone.id)/shares", headers: auth(ben.token),
            body: "{\"user\": \"anna\"}")
        #expect(share.status == 201)
        let created = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token),
            body: fenceBody([annasPhone.id, bensPhone.id]))
        #expect(created.status == 201)
    }

    @Test func badDefinitionsAreRefusedWithTheReason() throws {
        let door = try Door()
        let anna = try door.loggedInUser("anna")
        let phone = try door.enrol(anna.token)
        let cases: [(String, String)] = [
            (fenceBody([phone.id], radius: 5), "out_of_range"),
            (fenceBody([phone.id], radius: 100_001), "out_of_range"),
            (fenceBody([]), "invalid_field"),
            (fenceBody([phone.id], name: ""), "invalid_field"),
            (
                "{\"name\": \"x\", \"latitude\": 91, \"longitude\": 0, \"radius_m\": 50, \"device_ids\": [\(phone.id)]}",
                "out_of_range"
            ),
            ("{\"name\": \"x\", \"latitude\": 0, \"longitude\": 0, \"radius_m\": 50}", "missing_field"),
            (
                "{\"name\": \"x\", \"latitude\": \"0\", \"longitude\": 0, \"radius_m\": 50, \"device_ids\": [1]}",
                "wrong_type"
            ),
            (
                fenceBody([phone.id]).replacingOccurrences(of: "}", with: ", \"colour\": \"red\"}"),
                "unknown_field"
            ),
            ("not json", "malformed_json"),
        ]
        for (body, code) in cases {
            let answer = door.send("POST", "/api/find-my/geofences", headers: auth(anna.token), body: body)
            #expect(answer.status == 400, "\(body)")
            #expect(answer.errorCode == code, "\(body)")
            #expect((try? answer.body["error"]?["message"]?.stringValue)?.isEmpty == false)
        }
        #expect(door.service.store.registry.read { $0.registry.geofences.fences.isEmpty })
    }

    @Test func aUserHasAtMostTheFencesOfTheLimit() throws {
        let door = try Door()
        let anna = try door.loggedInUser("anna")
        let phone = try door.enrol(anna.token)
        for _ in 0..<GeofenceLimits.geofencesPerUserMax {
            let answer = door.send(
                "POST", "/api/find-my/geofences", headers: auth(anna.token), body: fenceBody([phone.id]))
            #expect(answer.status == 201)
        }
        let over = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token), body: fenceBody([phone.id]))
        #expect(over.status == 409 && over.errorCode == "too_many_geofences")
        // Replacing one is not a new one.
        let first = door.send(
            "PUT", "/api/find-my/geofences/1", headers: auth(anna.token),
            body: fenceBody([phone.id], radius: 40))
        #expect(first.status == 200)
    }
}
