import HTTP
import Identity
import Synchronization
import Testing

@testable import ReadAPI

/// Who may read what follows a share's `until` on the identity service's clock, both in the
/// devices list's scope (`ReadAccess`) and in the gate of a device's routes (`.viewer`, which hands
/// the read API the device and who shared it): here a clock the test moves, so that expiry is
/// checked at its boundary and not by waiting.
@Suite struct ReadAccessClockTests {
    final class Clock: Sendable {
        let micros = Atomic<Int64>(1_800_000_000_000_000)
        var now: Int64 { micros.load(ordering: .relaxed) }
        func advance(micros delta: Int64) { micros.add(delta, ordering: .relaxed) }
    }

    @Test func aSharedDeviceLeavesTheReadersScopeAtItsUntil() throws {
        let clock = Clock()
        let scratch = try ScratchIdentity(clockMicros: { clock.now })
        defer { scratch.close() }
        let identity = scratch.identity
        let olga = try identity.createUser(name: "olga", role: .member)
        let mia = try identity.createUser(name: "mia", role: .member)
        try scratch.enrol(deviceID: 7, userID: olga.userID)
        _ = try identity.shareDevice(
            7, owner: olga.userID, withUser: "mia", untilMicros: clock.now + 60_000_000)
        let access = ReadAccess(identity: identity)
        // A device route as the read API registers it: the gate decides, the handler answers who shared it.
        var builder = GuardedRouter(service: identity, listener: .api)
        builder.add("GET", "/api/find-my/devices/{id}") { _, caller in
            .text(caller.device.flatMap(access.sharedBy) ?? "own")
        }
        let router = try builder.build()
        func read(_ userToken: String) -> HTTPResponse {
            var headers = HTTPHeaders()
            headers.add("Authorization", "Bearer \(userToken)")
            return router.respond(
                to: HTTPRequest(method: "GET", target: "/api/find-my/devices/7", headers: headers)
            )
            .response
        }

        clock.advance(micros: 59_999_999)
        #expect(access.scope(of: mia.userID).deviceIDs == [7])
        #expect(access.scope(of: mia.userID).sharedBy == [7: "olga"])
        #expect(read(mia.token).status == 200)
        #expect(read(mia.token).body == Array("olga".utf8))

        clock.advance(micros: 1)
        #expect(access.scope(of: mia.userID).deviceIDs.isEmpty)
        #expect(read(mia.token).status == 404)
        #expect(read(mia.token).body == APIError.deviceNotFound.response.body)
        // The owner is not affected.
        #expect(access.scope(of: olga.userID).deviceIDs == [7])
        #expect(read(olga.token).body == Array("own".utf8))
    }
}
