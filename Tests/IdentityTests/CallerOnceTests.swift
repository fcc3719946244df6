import Foundation
import HTTP
import JSON
import Testing

@testable import Identity
@testable import Ingest

/// The gate resolves a request's caller once: the credential is looked up by its SHA-256
/// once per request, whatever the route, whether a bearer token or the session cookie (whose CSRF
/// token comes with it) sent it, and the handler works with the caller and the device the gate
/// found instead of resolving them again. Counted by the service's `CredentialLookups`.
@Suite struct CallerOnceTests {
    struct Call {
        var method: String
        var path: String
        var headers: [(String, String)]
        var body = ""
        var status: Int
    }

    @Test func everyIngestAndAccountRouteLooksTheCredentialUpOnce() throws {
        let door = try Door { $0.loginAttemptsPerAddressPerMinuteMax = 1_000 }
        let ada = try door.loggedInUser("ada", role: .admin)
        let nina = try door.loggedInUser("nina")
        _ = try door.service.createUser(name: "olga", role: .member)
        let phone = try door.enrol(nina.token)
        let bearer = [("Authorization", "Bearer \(nina.token)")]
        let device = [("Authorization", "Bearer \(phone.token)")]
        let cookie = [
            ("Cookie", "\(IdentityService.sessionCookieName)=\(nina.cookie)"), ("X-CSRF-Token", nina.csrf),
            ("Origin", Door.ownOrigin),
        ]
        let json = [("Content-Type", "application/json")]
        let shares = "/api/find-my/devices/\(phone.id)/shares"
        let now = RFC3339.formatMicros(door.clock.nowMicros)
        let report =
            "{\"batch_id\": \"\(UUID().uuidString)\", \"fixes\": [{\"latitude\": 52.52, \"longitude\": 13.405, \"accuracy_m\": 12, \"source\": \"significant\", \"recorded_at\": \"\(now)\"}]}"
        let calls = [
            Call(
                method: "POST", path: "/api/find-my/devices", headers: bearer,
                body:
                    "{\"device_uuid\": \"\(UUID().uuidString)\", \"name\": \"tablet\", \"platform\": \"ios\"}",
                status: 201),
            Call(
                method: "POST", path: "/api/find-my/push-tokens", headers: device,
                body: "{\"provider\": \"fcm\", \"token\": \"push-1\"}", status: 200),
            Call(
                method: "POST", path: "/api/find-my/reporting", headers: device, body: "{\"paused\": false}",
                status: 200),
            Call(method: "POST", path: "/api/find-my/report", headers: device, body: report, status: 200),
            Call(method: "POST", path: shares, headers: bearer, body: "{\"user\": \"olga\"}", status: 201),
            Call(method: "GET", path: shares, headers: bearer, status: 200),
            Call(method: "DELETE", path: shares + "/olga", headers: bearer, status: 200),
            // The session cookie: its CSRF token comes with the session, not from a second lookup.
            Call(
                method: "POST", path: shares, headers: cookie + json, body: "{\"user\": \"olga\"}",
                status: 201),
            Call(method: "GET", path: shares, headers: cookie, status: 200),
            Call(
                method: "PUT", path: "/api/find-my/devices/\(phone.id)/retention", headers: bearer,
                body: "{\"days\": 7}", status: 200),
            Call(
                method: "POST", path: "/api/find-my/devices/\(phone.id)/erase", headers: cookie + json,
                body: "{}", status: 200),
            // Someone else's device: the same 404 as a missing one, after the one lookup.
            Call(
                method: "GET", path: shares, headers: [("Authorization", "Bearer \(ada.token)")], status: 404),
            Call(
                method: "GET", path: "/api/find-my/admin/users",
                headers: [("Authorization", "Bearer \(ada.token)")], status: 200),
            Call(method: "POST", path: "/api/find-my/account/token", headers: cookie, status: 200),
            Call(method: "DELETE", path: "/api/find-my/devices/\(phone.id)", headers: cookie, status: 200),
        ]
        for call in calls {
            let before = door.service.sessions.lookups.count
            let answer = door.send(call.method, call.path, headers: call.headers, body: call.body)
            let lookups = door.service.sessions.lookups.count - before
            #expect(answer.status == call.status, "\(call.method) \(call.path): \(answer.body)")
            #expect(lookups == 1, "\(call.method) \(call.path) looked its credential up \(lookups) times")
        }
    }

    /// A program's logout (JSON, by the session cookie) checks the cookie's CSRF token and ends its
    /// session with one lookup too, not one for the check and another for the end.
    @Test func aJSONLogoutLooksTheSessionUpOnceAndEndsIt() throws {
        let door = try Door { $0.loginAttemptsPerAddressPerMinuteMax = 1_000 }
        let nina = try door.loggedInUser("nina")
        let cookie = [
            ("Cookie", "\(IdentityService.sessionCookieName)=\(nina.cookie)"), ("X-CSRF-Token", nina.csrf),
            ("Origin", Door.ownOrigin), ("Content-Type", "application/json"),
        ]
        let before = door.service.sessions.lookups.count
        let answer = door.send("POST", "/logout", headers: cookie, body: "{}")
        let lookups = door.service.sessions.lookups.count - before
        #expect(answer.status == 200, "\(answer.body)")
        #expect(lookups == 1, "POST /logout looked the session up \(lookups) times")
        let after = door.send("POST", "/api/find-my/account/token", headers: cookie)
        #expect(after.status == 401, "the session outlived its logout: \(after.body)")
    }
}
