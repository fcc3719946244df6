import HTTP
import Postgres
import Testing

@testable import Identity
@testable import ReadAPI

/// The read routes take the reader and the device from the gate: one lookup of the
/// credential per request, and no second visibility check in the handler. The database here is
/// one that cannot be reached, as when PostgreSQL is down: every read then answers 503, after the
/// caller was resolved, and resolved once.
@Suite struct ReadCallerOnceTests {
    @Test func everyReadRouteLooksTheCredentialUpOnce() throws {
        let scratch = try ScratchIdentity()
        defer { scratch.close() }
        let identity = scratch.identity
        let olga = try identity.createUser(name: "olga", role: .member)
        let ada = try identity.createUser(name: "ada", role: .admin)
        try scratch.enrol(deviceID: 7, userID: olga.userID)
        try scratch.enrol(deviceID: 8, userID: ada.userID)
        let pool = PostgresPool(conninfo: "host=\(scratch.directory)/no-postgres-here port=1")
        defer { pool.close() }
        let reads = ReadService(identity: identity, pool: pool, projectedEnd: { 0 })
        var builder = GuardedRouter(service: identity, listener: .api)
        reads.addRoutes(to: &builder)
        let router = try builder.build()

        let calls: [(path: String, token: String, status: Int)] = [
            ("/api/find-my/devices", olga.token, 503),
            ("/api/find-my/devices/7", olga.token, 503),
            ("/api/find-my/devices/7/locations", olga.token, 503),
            ("/api/find-my/devices/7/arrivals?limit=5", olga.token, 503),
            // Another user's device: the 404 of a missing one, decided by the gate alone.
            ("/api/find-my/devices/8/locations", olga.token, 404),
            ("/api/find-my/admin/devices", ada.token, 503),
        ]
        for call in calls {
            var headers = HTTPHeaders()
            headers.add("Authorization", "Bearer \(call.token)")
            let request = HTTPRequest(method: "GET", target: call.path, headers: headers)
            let before = identity.sessions.lookups.count
            let response = router.respond(to: request).response
            let lookups = identity.sessions.lookups.count - before
            #expect(response.status == call.status, "\(call.path)")
            #expect(lookups == 1, "GET \(call.path) looked its credential up \(lookups) times")
        }
    }
}
