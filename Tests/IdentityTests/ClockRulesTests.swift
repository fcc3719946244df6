import HTTP
import JSON
import Testing

@testable import Identity
@testable import Ingest

/// The rules that depend on the wall clock, on the door's manual clock: a share that expires by
/// itself and a session that ends when idle or too old. Each instant is set by the test, so the
/// outcome does not depend on how fast the machine runs (the end-to-end tests check only the
/// wiring, without waiting for a real clock).
@Suite struct ClockRulesTests {
    /// The door's routes plus a stand-in for the read API's `GET /api/find-my/devices/{id}` (a
    /// `.viewer` route: the gate decides, with the registry's visibility rule, before any handler).
    struct ReadDoor {
        let door: Door
        let router: Router

        init(_ configure: (inout IngestLimits) -> Void = { _ in }) throws {
            door = try Door(configure)
            var builder = GuardedRouter(service: door.service, listener: .api)
            door.ingest.addRoutes(to: &builder)
            door.service.addAccountRoutes(to: &builder)
            builder.add("GET", "/api/find-my/devices/{id}") { _, _ in .json("{\"read\": true}") }
            router = try builder.build()
        }

        func read(_ target: String, token: String) -> Door.Answer {
            var headers = HTTPHeaders()
            headers.add("Host", Door.host)
            headers.add("Authorization", "Bearer \(token)")
            let request = HTTPRequest(
                method: "GET", target: target, headers: headers, body: [], remoteAddress: "192.0.2.10:40000")
            return Door.Answer(response: router.respond(to: request).response)
        }
    }

    @Test func aShareWorksUntilItsTimeAndThenStopsByItself() throws {
        let reads = try ReadDoor()
        let door = reads.door
        let olga = try door.loggedInUser("olga")
        let mia = try door.loggedInUser("mia")
        let device = try door.enrol(olga.token)
        let until = door.clock.nowMicros + 60_000_000
        let granted = door.send(
            "POST", "/api/find-my/devices/\(device.id)/shares",
            headers: [("Authorization", "Bearer \(olga.token)"), ("Content-Type", "application/json")],
            body: "{\"user\": \"mia\", \"until\": \"\(RFC3339.formatMicros(until))\"}")
        #expect(granted.status == 201, "\(granted.body)")
        func listing() -> JSONValue? {
            door.send(
                "GET", "/api/find-my/devices/\(device.id)/shares",
                headers: [("Authorization", "Bearer \(olga.token)")]
            ).body["shares"]?[0]
        }
        let missing = reads.read("/api/find-my/devices/999999", token: mia.token)
        #expect(missing.status == 404 && missing.errorCode == "device_not_found")

        // A second before `until`: mia reads it, and olga's listing says the share is active.
        door.clock.advance(seconds: 59)
        #expect(reads.read("/api/find-my/devices/\(device.id)", token: mia.token).status == 200)
        #expect(door.service.visibleDevices(to: mia.userID).map(\.deviceID) == [device.id])
        #expect(listing()?["active"] == .bool(true))

        // At `until` (exclusive) it has stopped, with no event: the answer is that of a device
        // that does not exist, body included; the owner still lists it, as inactive.
        door.clock.advance(seconds: 1)
        let expired = reads.read("/api/find-my/devices/\(device.id)", token: mia.token)
        #expect(expired.status == 404 && expired.response.body == missing.response.body)
        #expect(door.service.visibleDevices(to: mia.userID).isEmpty)
        #expect(listing()?["active"] == .bool(false))
        #expect(reads.read("/api/find-my/devices/\(device.id)", token: olga.token).status == 200)

        // An `until` that is not in the server's future is refused.
        let past = door.send(
            "POST", "/api/find-my/devices/\(device.id)/shares",
            headers: [("Authorization", "Bearer \(olga.token)"), ("Content-Type", "application/json")],
            body: "{\"user\": \"mia\", \"until\": \"\(RFC3339.formatMicros(door.clock.nowMicros))\"}")
        #expect(past.status == 400 && past.errorCode == "invalid_until")
    }

    /// `GET` of the device's shares with the session cookie: 200 while the session lives.
    func useSession(_ door: Door, _ user: Door.LoggedIn, _ deviceID: UInt64) -> Door.Answer {
        door.send(
            "GET", "/api/find-my/devices/\(deviceID)/shares",
            headers: [("Cookie", "\(IdentityService.sessionCookieName)=\(user.cookie)")])
    }

    @Test func aSessionEndsWhenIdleForLongerThanTheIdleLimit() throws {
        let door = try Door {
            $0.sessionIdleSecondsMax = 120
            $0.sessionAgeSecondsMax = 3_600
        }
        let nina = try door.loggedInUser("nina")
        let device = try door.enrol(nina.token)
        // Each use restarts the idle time: three uses 119 s apart keep it alive past 120 s in all.
        for _ in 0..<3 {
            door.clock.advance(seconds: 119)
            #expect(useSession(door, nina, device.id).status == 200)
        }
        door.clock.advance(seconds: 120)
        let ended = useSession(door, nina, device.id)
        #expect(ended.status == 401 && ended.errorCode == "invalid_session", "\(ended.body)")
        // The API token is not a session: it still works.
        let byToken = door.send(
            "GET", "/api/find-my/devices/\(device.id)/shares",
            headers: [("Authorization", "Bearer \(nina.token)")])
        #expect(byToken.status == 200)
    }

    @Test func aSessionEndsAtItsAgeLimitHoweverOftenItIsUsed() throws {
        let door = try Door {
            $0.sessionIdleSecondsMax = 120
            $0.sessionAgeSecondsMax = 300
        }
        let nina = try door.loggedInUser("nina")
        let device = try door.enrol(nina.token)
        for _ in 0..<2 {
            door.clock.advance(seconds: 100)
            #expect(useSession(door, nina, device.id).status == 200)
        }
        door.clock.advance(seconds: 99)
        #expect(useSession(door, nina, device.id).status == 200)
        door.clock.advance(seconds: 1)
        let ended = useSession(door, nina, device.id)
        #expect(ended.status == 401 && ended.errorCode == "invalid_session", "\(ended.body)")
        // A new login starts a new session.
        let again = door.jsonLogin("nina", "a long passphrase")
        #expect(again.status == 200 && again.cookie(IdentityService.sessionCookieName) != nil)
    }
}
