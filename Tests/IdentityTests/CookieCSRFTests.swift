import HTTP
import JSON
import Testing

@testable import Identity
@testable import Ingest

/// The session cookie on the JSON API: a state-changing `/api/` request that the
/// `findmy_session` cookie authenticates needs the session's CSRF token in `X-CSRF-Token`, and an
/// `Origin`, when sent, of this server. Bearer tokens and reads are unaffected.
@Suite struct CookieCSRFTests {
    static func changesState(_ method: String) -> Bool { !["GET", "HEAD", "OPTIONS"].contains(method) }

    /// Every state-changing API route of the table, so that a route added later is covered too.
    /// Not `.appDeviceOrBody` routes: the gate takes no credential of theirs from the cookie and
    /// passes them on for the handler to read the body's token (Tests/EndToEndTests/
    /// OverlandOsmAndTests.swift checks that a cookie alone stores nothing there).
    static var stateChangingAPIRoutes: [RouteKey] {
        RoutePermissions.table.keys.filter {
            changesState($0.method) && $0.pattern.hasPrefix("/api/")
                && RoutePermissions.table[$0] != .appDeviceOrBody
        }
        .sorted { $0.description < $1.description }
    }

    static func path(_ pattern: String, device: UInt64) -> String {
        pattern.replacingOccurrences(of: "{id}", with: "\(device)")
            .replacingOccurrences(of: "{user}", with: "mallory")
            .replacingOccurrences(of: "{name}", with: "mallory")
    }

    /// A body the route's handler accepts (an empty object for routes this test does not know).
    static func body(_ key: RouteKey) -> String {
        switch (key.method, key.pattern) {
        case ("POST", "/api/find-my/devices"):
            "{\"device_uuid\": \"0b7e5a2c-3f1d-4c56-9a8e-2d4f6b8c0e11\", \"name\": \"tablet\", \"platform\": \"ios\", \"model\": \"\"}"
        case ("POST", "/api/find-my/devices/{id}/shares"): "{\"user\": \"mallory\"}"
        case ("PUT", "/api/find-my/devices/{id}/retention"): "{\"days\": 7}"
        default: "{}"
        }
    }

    /// Routes of the table that the ingest routers do not serve (another module's) get a handler
    /// that answers 200 behind the same gate: the rule is the gate's, whoever serves the route.
    static func router(for door: Door) throws -> Router {
        var builder = GuardedRouter(service: door.service, listener: .api)
        for key in stateChangingAPIRoutes {
            let probe = HTTPRequest(method: key.method, target: path(key.pattern, device: 1))
            let served = door.router.respond(to: probe)
            if served.routeName == key.pattern && served.response.status != 405 {
                continue
            }
            builder.add(key.method, key.pattern) { _, _ in .json("{\"stub\": true}") }
        }
        return try builder.build()
    }

    @Test func everyStateChangingAPIRouteRefusesACookieWithoutTheTokenOrFromAnotherOrigin() throws {
        let door = try Door { $0.loginAttemptsPerAddressPerMinuteMax = 1_000 }
        _ = try door.service.createUser(name: "mallory", role: .member)
        let routes = Self.stateChangingAPIRoutes
        #expect(routes.contains(RouteKey("POST", "/api/find-my/devices/{id}/shares")))
        #expect(routes.contains(RouteKey("POST", "/api/find-my/devices/{id}/erase")))
        let others = try Self.router(for: door)

        for (index, key) in routes.enumerated() {
            // A victim per route: a route may end what the next would use (a device, a token).
            let victim = try door.loggedInUser("victim-\(index)", role: .admin)
            #expect(victim.csrf.count >= 43, "the JSON login answers the session's CSRF token")
            let device = try door.enrol(victim.token)
            // Something for a revocation to remove, so that "nothing changed" means something.
            _ = try door.service.shareDevice(
                device.id, owner: victim.userID, withUser: "mallory", untilMicros: nil)
            let target = Self.path(key.pattern, device: device.id)
            func send(_ headers: [(String, String)], contentType: String = "application/json") -> Door.Answer
            {
                var fields = HTTPHeaders()
                fields.add("Host", Door.host)
                fields.add("Content-Type", contentType)
                for (name, value) in headers { fields.add(name, value) }
                let request = HTTPRequest(
                    method: key.method, target: target, headers: fields, body: Array(Self.body(key).utf8),
                    remoteAddress: "192.0.2.10:40000")
                let served = door.router.respond(to: request)
                if served.routeName == key.pattern && served.response.status != 405 {
                    return Door.Answer(response: served.response)
                }
                return Door.Answer(response: others.respond(to: request).response)
            }
            let cookie = ("Cookie", "findmy_session=\(victim.cookie)")
            let forged = String(repeating: "A", count: victim.csrf.count)
            let refused: [(String, [(String, String)], String, String)] = [
                ("cookie, no token", [cookie], "application/json", "csrf_token_missing"),
                ("cookie, text/plain, no token", [cookie], "text/plain", "csrf_token_missing"),
                (
                    "cookie, wrong token", [cookie, ("X-CSRF-Token", forged)], "application/json",
                    "csrf_token_invalid"
                ),
                (
                    "cookie, right token, another site",
                    [cookie, ("X-CSRF-Token", victim.csrf), ("Origin", "https://evil.example")],
                    "application/json", "cross_origin_request"
                ),
                (
                    "cookie, right token, another port of the same host",
                    [cookie, ("X-CSRF-Token", victim.csrf), ("Origin", "http://findmy.test:9999")],
                    "text/plain",
                    "cross_origin_request"
                ),
            ]
            // A device route never takes a cookie at all: 401, as before. An app's route neither
            // (its credentials are a device token in a header or the query).
            let permission = RoutePermissions.table[key]!
            let takesDeviceToken = permission == .device || permission == .appDevice
            for (label, headers, type, code) in refused {
                let end = door.service.store.writer.durableEnd
                let shares = door.service.shares(of: device.id).map(\.user)
                let answer = send(headers, contentType: type)
                let (status, expectedCode) =
                    permission == .device
                    ? (401, "invalid_token") : permission == .appDevice ? (401, "missing_token") : (403, code)
                #expect(answer.status == status, "\(key), \(label): \(answer.status) \(answer.body)")
                #expect(answer.errorCode == expectedCode, "\(key), \(label)")
                #expect(door.service.store.writer.durableEnd == end, "\(key), \(label): an event was written")
                #expect(door.service.shares(of: device.id).map(\.user) == shares, "\(key), \(label)")
            }
            // Bearer tokens are unaffected: no CSRF header, any Origin. (First: a route may end
            // the token it was called with, and a session outlives that.)
            let bearer = takesDeviceToken ? device.token : victim.token
            let withBearer = send([("Authorization", "Bearer \(bearer)"), ("Origin", "https://evil.example")])
            #expect(withBearer.status != 403 && withBearer.status != 401, "\(key): \(withBearer.body)")
            // With the token, from our own page, any other route reaches its handler.
            let allowed = send([cookie, ("X-CSRF-Token", victim.csrf), ("Origin", Door.ownOrigin)])
            #expect(allowed.status != 403, "\(key): \(allowed.body)")
            #expect(
                takesDeviceToken == (allowed.status == 401),
                "\(key): \(allowed.status) \(allowed.body)")
            // Without Origin (some clients send none) the token alone is enough.
            let noOrigin = send([cookie, ("X-CSRF-Token", victim.csrf)])
            #expect(noOrigin.status != 403, "\(key): \(noOrigin.body)")
        }
    }

    @Test func aShareToTheAttackerAndAnEraseNeedTheTokenAndReadsDoNot() throws {
        let door = try Door()
        let victim = try door.loggedInUser("victim")
        _ = try door.service.createUser(name: "mallory", role: .member)
        let device = try door.enrol(victim.token)
        let cookie = ("Cookie", "findmy_session=\(victim.cookie)")
        let end = door.service.store.writer.durableEnd

        // What a page on another port of the same host can send without a preflight.
        let share = door.send(
            "POST", "/api/find-my/devices/\(device.id)/shares",
            headers: [cookie, ("Content-Type", "text/plain"), ("Origin", "http://findmy.test:8081")],
            body: "{\"user\": \"mallory\"}")
        #expect(share.status == 403 && share.errorCode == "cross_origin_request", "\(share.body)")
        let erase = door.send(
            "POST", "/api/find-my/devices/\(device.id)/erase",
            headers: [cookie, ("Content-Type", "text/plain")],
            body: "{}")
        #expect(erase.status == 403 && erase.errorCode == "csrf_token_missing", "\(erase.body)")
        #expect(door.service.store.writer.durableEnd == end)
        #expect(door.service.shares(of: device.id).isEmpty)
        let message = (try? erase.body["error"]?["message"]?.stringValue) ?? ""
        #expect(message.contains("X-CSRF-Token"), "the refusal says what is missing: \(message)")

        // A read with the cookie needs nothing more.
        let list = door.send("GET", "/api/find-my/devices/\(device.id)/shares", headers: [cookie])
        #expect(list.status == 200 && list.body["shares"] == .array([]))

        // The panel's own page, with its token: the share is made.
        let own = door.send(
            "POST", "/api/find-my/devices/\(device.id)/shares",
            headers: [
                cookie, ("Content-Type", "application/json"), ("Origin", Door.ownOrigin),
                ("X-CSRF-Token", victim.csrf),
            ], body: "{\"user\": \"mallory\"}")
        #expect(own.status == 201, "\(own.body)")
        #expect(door.service.shares(of: device.id).map(\.user) == ["mallory"])
    }
}
