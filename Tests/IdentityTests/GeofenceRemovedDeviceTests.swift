import Events
import Foundation
import JSON
import Testing

@testable import Core
@testable import Identity

/// A removed device leaves every fence that named it (docs/geofences.md, "Retention and erasure"):
/// the fence's owner reads it without the device, and a PUT repeating that list is accepted.
@Suite struct GeofenceRemovedDeviceTests {
    func auth(_ token: String) -> [(String, String)] {
        [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
    }

    func body(_ devices: [Int64]) -> String {
        "{\"name\": \"home\", \"latitude\": 52.52, \"longitude\": 13.405, \"radius_m\": 150, \"device_ids\": [\(devices.map(String.init).joined(separator: ", "))]}"
    }

    @Test func aRemovedDeviceLeavesItsFences() throws {
        let door = try Door()
        let anna = try door.loggedInUser("anna")
        let phone = try door.enrol(anna.token)
        let tablet = try door.enrol(anna.token)
        let created = door.send(
            "POST", "/api/find-my/geofences", headers: auth(anna.token),
            body: body([Int64(phone.id), Int64(tablet.id)]))
        let id = try #require(try created.body["geofence_id"]?.int64Value)
        let removed = door.send("DELETE", "/api/find-my/devices/\(phone.id)", headers: auth(anna.token))
        #expect(removed.status == 200, "\(removed.body)")

        let read = door.send("GET", "/api/find-my/geofences/\(id)", headers: auth(anna.token))
        let listed = try read.body["device_ids"]?.arrayValue.map { try $0.int64Value } ?? []
        #expect(listed == [Int64(tablet.id)])
        let replaced = door.send(
            "PUT", "/api/find-my/geofences/\(id)", headers: auth(anna.token), body: body(listed))
        #expect(replaced.status == 200, "\(replaced.body)")
    }

    /// The fold itself, as replay and snapshots run it: removal from every fence, the others untouched.
    @Test func theRegistryFoldDropsTheDeviceFromEveryFence() {
        var book = GeofenceBook()
        for (id, devices) in [(1, [7, 8]), (2, [7]), (3, [8])] as [(UInt64, [UInt64])] {
            book.apply(
                .geofenceDefined(
                    GeofenceDefined(
                        geofenceID: id, ownerUserID: 1, name: "f\(id)", latitude: 0, longitude: 0,
                        radiusMeters: 50,
                        deviceIDs: devices)))
        }
        book.apply(.deviceRemoved(DeviceRemoved(deviceID: 7)))
        #expect(book.fences[1]?.deviceIDs == [8])
        #expect(book.fences[2]?.deviceIDs == [])
        #expect(book.fences[3]?.deviceIDs == [8])
    }
}
