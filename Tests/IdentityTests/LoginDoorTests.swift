import HTTP
import JSON
import Testing

@testable import Identity
@testable import Ingest

/// Logins and failed authentications: what a login must carry,
/// the per-name and per-address limits, the bound on password checks, and the 401 limit. Every
/// window runs on the door's manual clock.
@Suite struct LoginDoorTests {
    // MARK: login CSRF (item 7)

    @Test func aFormLoginWithoutItsCSRFFieldGetsNoSession() throws {
        let door = try Door()
        _ = try door.loggedInUser("nina")
        let form = door.send(
            "POST", "/login", headers: [("Content-Type", "application/x-www-form-urlencoded")],
            body: "name=nina&password=a+long+passphrase")
        #expect(form.status == 403 && form.errorCode == "csrf_field_missing", "\(form.status) \(form.body)")
        #expect(form.cookie(IdentityService.sessionCookieName) == nil)

        // The panel's form: the csrf field equals the login cookie (double submit).
        let panel = door.send(
            "POST", "/login",
            headers: [
                ("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", "findmy_login_csrf=abc123"),
            ], body: "name=nina&password=a+long+passphrase&csrf=abc123")
        #expect(panel.status == 303 && panel.header("Location") == "/find-my")
        #expect(panel.cookie(IdentityService.sessionCookieName) != nil)
        let mismatched = door.send(
            "POST", "/login",
            headers: [
                ("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", "findmy_login_csrf=abc123"),
            ], body: "name=nina&password=a+long+passphrase&csrf=abc124")
        #expect(mismatched.header("Location")?.hasPrefix("/login?error=expired_form") == true)
        #expect(mismatched.cookie(IdentityService.sessionCookieName) == nil)
    }

    @Test func aLoginThatIsNeitherJSONNorAFormIs415() throws {
        let door = try Door()
        _ = try door.loggedInUser("nina")
        let json = "{\"name\": \"nina\", \"password\": \"a long passphrase\"}"
        for type in ["text/plain", "text/plain; charset=utf-8", "multipart/form-data; boundary=x", nil]
            as [String?]
        {
            let answer = door.send(
                "POST", "/login", headers: type.map { [("Content-Type", $0)] } ?? [], body: json)
            #expect(answer.status == 415 && answer.errorCode == "unsupported_media_type", "\(type ?? "none")")
            #expect(answer.cookie(IdentityService.sessionCookieName) == nil)
        }
        let charset = door.send(
            "POST", "/login", headers: [("Content-Type", "application/json; charset=utf-8")], body: json)
        #expect(charset.status == 200)
    }

    @Test func aLoginFromAnotherOriginIsRefused() throws {
        let door = try Door()
        _ = try door.loggedInUser("nina")
        for origin in [
            "https://evil.example", "http://findmy.test:9999", "http://findmy.test.evil.example:8080",
        ] {
            let json = door.jsonLogin("nina", "a long passphrase", headers: [("Origin", origin)])
            #expect(json.status == 403 && json.errorCode == "cross_origin_request", "\(origin): \(json.body)")
            #expect(json.cookie(IdentityService.sessionCookieName) == nil)
            let form = door.send(
                "POST", "/login",
                headers: [
                    ("Content-Type", "application/x-www-form-urlencoded"),
                    ("Cookie", "findmy_login_csrf=abc123"),
                    ("Origin", origin),
                ], body: "name=nina&password=a+long+passphrase&csrf=abc123")
            #expect(form.status == 403 && form.cookie(IdentityService.sessionCookieName) == nil, "\(origin)")
        }
        // Our own origin, the same with another case, none at all, and the "null" a page with
        // Referrer-Policy: no-referrer makes browsers send on a form post (and sandboxed frames do).
        for origin in [Door.ownOrigin, "HTTP://FINDMY.TEST:8080", nil, "null"] as [String?] {
            let answer = door.jsonLogin(
                "nina", "a long passphrase", headers: origin.map { [("Origin", $0)] } ?? [])
            #expect(answer.status == 200, "\(origin ?? "none"): \(answer.body)")
        }
    }

    @Test func aConfiguredPublicURLIsOurOriginBehindAProxyThatChangesHost() throws {
        let door = try Door { $0.publicURL = "https://findmy.example.org/" }
        _ = try door.loggedInUser("nina")
        func login(origin: String, host: String) -> Door.Answer {
            door.send(
                "POST", "/login", headers: [("Content-Type", "application/json"), ("Origin", origin)],
                body: "{\"name\": \"nina\", \"password\": \"a long passphrase\"}", host: host)
        }
        #expect(login(origin: "https://findmy.example.org", host: "127.0.0.1:8080").status == 200)
        #expect(login(origin: "https://findmy.example.org:443", host: "127.0.0.1:8080").status == 200)
        #expect(login(origin: "http://findmy.example.org", host: "127.0.0.1:8080").status == 403)
        #expect(login(origin: "https://evil.example.org", host: "127.0.0.1:8080").status == 403)
    }

    /// Logging out ends a session, which another site must not be able to do to a user either: a
    /// logout that the cookie carries needs the session's CSRF token, in the form or the header.
    @Test func aLogoutWithTheCookieAloneEndsNothing() throws {
        let door = try Door()
        let nina = try door.loggedInUser("nina")
        let cookie = ("Cookie", "\(IdentityService.sessionCookieName)=\(nina.cookie)")
        let phone = try door.enrol(nina.token)
        func sessionLives() -> Bool {
            door.send("GET", "/api/find-my/devices/\(phone.id)/shares", headers: [cookie]).status == 200
        }

        for (type, body) in [("text/plain", ""), ("application/json", "{}"), (nil, "")] as [(String?, String)]
        {
            let refused = door.send(
                "POST", "/logout", headers: [cookie] + (type.map { [("Content-Type", $0)] } ?? []), body: body
            )
            #expect(refused.status == 403 && refused.errorCode == "csrf_token_missing", "\(type ?? "none")")
        }
        let wrong = door.send("POST", "/logout", headers: [cookie, ("X-CSRF-Token", "forged")])
        #expect(wrong.status == 403 && wrong.errorCode == "csrf_token_invalid")
        let foreign = door.send(
            "POST", "/logout",
            headers: [cookie, ("X-CSRF-Token", nina.csrf), ("Origin", "http://findmy.test:9999")])
        #expect(foreign.status == 403 && foreign.errorCode == "cross_origin_request")
        #expect(sessionLives())

        let out = door.send("POST", "/logout", headers: [cookie, ("X-CSRF-Token", nina.csrf)])
        #expect(out.status == 200)
        #expect(!sessionLives())
        // Without a live session there is nothing to protect: the cookie is cleared either way.
        #expect(door.send("POST", "/logout", headers: [cookie]).status == 200)
        #expect(door.send("POST", "/logout").status == 200)
    }

    /// The panel's forms carry the session's CSRF token; a post from another site's page is refused
    /// even with it, now that panel pages make browsers send their real Origin (same-origin policy).
    @Test func aPanelFormFromAnotherOriginDoesNotMatch() throws {
        let door = try Door()
        let nina = try door.loggedInUser("nina")
        func form(_ origin: String?) -> HTTPRequest {
            var headers = HTTPHeaders()
            headers.add("Host", Door.host)
            headers.add("Cookie", "\(IdentityService.sessionCookieName)=\(nina.cookie)")
            if let origin { headers.add("Origin", origin) }
            return HTTPRequest(method: "POST", target: "/find-my/account/password", headers: headers)
        }
        // What the gate hands a page: the caller and its session's CSRF token.
        func matches(_ request: HTTPRequest, sent: String) throws -> Bool {
            door.service.formCSRFMatches(request, try door.service.resolveCaller(request), sent: sent)
        }
        for origin in [Door.ownOrigin, nil, "null"] as [String?] {
            #expect(try matches(form(origin), sent: nina.csrf), "\(origin ?? "none")")
        }
        #expect(try !matches(form(nil), sent: "forged"))
        for origin in ["http://findmy.test:9999", "https://evil.example"] {
            #expect(try !matches(form(origin), sent: nina.csrf), "\(origin)")
        }
    }

    // MARK: per-address limit, capacity (item 4b)

    @Test func aFloodOfRandomNamesFromOneAddressDoesNotLockOutTheUserElsewhere() throws {
        let door = try Door {
            $0.loginAttemptsPerAddressPerMinuteMax = 4
            $0.loginAttemptsPerMinuteMax = 3
        }
        _ = try door.loggedInUser("nina")
        let flooder = "203.0.113.66:50000"
        var statuses: [Int] = []
        for index in 0..<40 {
            let answer = door.jsonLogin("random-\(index)", "guess \(index)", from: flooder)
            statuses.append(answer.status)
            if answer.status == 429 {
                #expect(answer.errorCode == "too_many_attempts_from_address")
                #expect(answer.header("Retry-After").flatMap { Int($0) } == 60)
            }
        }
        // The first four were checked (and wrong); the rest refused before any password check.
        #expect(statuses == Array(repeating: 401, count: 4) + Array(repeating: 429, count: 36))
        // The flood targeted the real name too, from the same address: refused without counting.
        #expect(door.jsonLogin("nina", "a long passphrase", from: flooder).status == 429)
        // nina, elsewhere, logs in.
        let nina = door.jsonLogin("nina", "a long passphrase", from: "198.51.100.7:41000")
        #expect(nina.status == 200, "\(nina.body)")
    }

    /// Guesses for a name from one address are limited for that address; the real user, from
    /// another one, still logs in (a lock-out needs several addresses).
    @Test func oneAddressGuessingANameDoesNotLockTheUserOut() throws {
        let door = try Door { $0.loginAttemptsPerMinuteMax = 5 }
        _ = try door.loggedInUser("bob")
        for attacker in ["203.0.113.66:50000", "203.0.113.67:50000"] {
            for _ in 0..<5 { #expect(door.jsonLogin("bob", "wrong password", from: attacker).status == 401) }
            let limited = door.jsonLogin("bob", "wrong password", from: attacker)
            #expect(limited.status == 429 && limited.errorCode == "too_many_attempts")
            #expect(limited.header("Retry-After") == "60")
        }
        let bob = door.jsonLogin("bob", "a long passphrase", from: "198.51.100.7:41000")
        #expect(bob.status == 200, "\(bob.body)")
    }

    @Test func failuresFromSeveralAddressesLimitTheNameEverywhereForAMinute() throws {
        let door = try Door {
            $0.loginFailuresPerNamePerMinuteMax = 6
            $0.loginFailureAddressesPerNameMin = 3
        }
        _ = try door.loggedInUser("bob")
        // Six failures from two addresses: not yet several.
        for attacker in ["203.0.113.1:1", "203.0.113.2:1"] {
            for _ in 0..<3 { #expect(door.jsonLogin("bob", "wrong password", from: attacker).status == 401) }
            door.clock.advance(seconds: 10)
        }
        #expect(door.jsonLogin("bob", "a long passphrase", from: "198.51.100.7:41000").status == 200)
        // One from a third address: the last six failures come from three addresses.
        #expect(door.jsonLogin("bob", "wrong password", from: "203.0.113.3:1").status == 401)
        let refused = door.jsonLogin("bob", "a long passphrase", from: "198.51.100.8:41000")
        #expect(refused.status == 429 && refused.errorCode == "too_many_attempts")
        // The oldest of those six (the second at 0 s) leaves the window at 60 s, 40 s from now.
        #expect(refused.header("Retry-After") == "40")
        #expect(door.jsonLogin("alice-not-bob", "wrong password", from: "198.51.100.8:41000").status == 401)
        door.clock.advance(seconds: 40)
        #expect(door.jsonLogin("bob", "a long passphrase", from: "198.51.100.8:41000").status == 200)
    }

    @Test func refusalsForCapacityDoNotCountAgainstTheName() throws {
        let door = try Door { $0.loginAttemptsPerMinuteMax = 4 }
        _ = try door.loggedInUser("nina")
        // Every password-check slot taken, as by a flood of logins in flight elsewhere.
        door.service.passwordChecksInFlight.store(
            door.service.limits.passwordChecksConcurrentMax, ordering: .relaxed)
        for index in 0..<10 {
            for name in ["nina", "nobody-\(index)"] {
                let busy = door.jsonLogin(name, "a long passphrase", from: "198.51.100.\(index):41000")
                #expect(busy.status == 503 && busy.errorCode == "busy" && busy.header("Retry-After") == "1")
            }
        }
        door.service.passwordChecksInFlight.store(0, ordering: .relaxed)
        // The slots free again: nina's four attempts a minute from her address (one spent on the
        // first login) are all still hers.
        #expect(door.jsonLogin("nina", "not it at all").status == 401)
        #expect(door.jsonLogin("nina", "not it either").status == 401)
        #expect(door.jsonLogin("nina", "a long passphrase").status == 200)
        #expect(door.jsonLogin("nina", "a long passphrase").status == 429)
    }

    @Test func thePerAddressWindowSlidesOnTheClock() throws {
        let door = try Door { $0.loginAttemptsPerAddressPerMinuteMax = 3 }
        _ = try door.loggedInUser("nina")
        let address = "203.0.113.9:1234"
        for _ in 0..<3 {
            #expect(door.jsonLogin("nina", "wrong password", from: address).status == 401)
            door.clock.advance(seconds: 10)
        }
        // Attempts at 0, 10 and 20 s; at 30 s the oldest leaves the window in 30 s. Another port
        // of the same address is the same client.
        let refused = door.jsonLogin("nina", "a long passphrase", from: "203.0.113.9:5678")
        #expect(refused.status == 429 && refused.errorCode == "too_many_attempts_from_address")
        #expect(refused.header("Retry-After") == "30")
        #expect(refused.cookie(IdentityService.sessionCookieName) == nil)
        door.clock.advance(seconds: 30)
        #expect(door.jsonLogin("nina", "a long passphrase", from: address).status == 200)
        #expect(door.jsonLogin("nina", "a long passphrase", from: address).status == 429)
    }

    @Test func anUnknownNameTakesAPasswordCheckLikeAKnownOne() throws {
        let door = try Door()
        _ = try door.loggedInUser("nina")
        door.service.passwordChecksInFlight.store(
            door.service.limits.passwordChecksConcurrentMax, ordering: .relaxed)
        let known = door.jsonLogin("nina", "wrong password", from: "198.51.100.1:1")
        let unknown = door.jsonLogin("nobody", "wrong password", from: "198.51.100.2:1")
        #expect(known.status == 503 && unknown.status == 503, "both wait for a slot: both would be hashed")
        door.service.passwordChecksInFlight.store(0, ordering: .relaxed)
        let wrong = door.jsonLogin("nina", "wrong password", from: "198.51.100.1:1")
        let missing = door.jsonLogin("nobody", "wrong password", from: "198.51.100.2:1")
        #expect(wrong.status == 401 && missing.status == 401 && wrong.response.body == missing.response.body)
    }

    @Test func behindATrustedProxyEachClientHasItsOwnAddress() throws {
        let door = try Door {
            $0.loginAttemptsPerAddressPerMinuteMax = 2
            $0.trustedProxies = ["10.0.0.2"]
            $0.loginAttemptsPerMinuteMax = 100
        }
        _ = try door.loggedInUser("nina")
        let proxy = "10.0.0.2:5000"
        func login(_ forwardedFor: String, from address: String = proxy) -> Int {
            door.jsonLogin(
                "nina", "wrong password", from: address, headers: [("X-Forwarded-For", forwardedFor)]
            ).status
        }
        // The proxy appends the client it saw; what the client wrote before that is not believed.
        #expect(login("198.51.100.1, 203.0.113.66") == 401)
        #expect(login("198.51.100.2, 203.0.113.66") == 401)
        #expect(login("203.0.113.66") == 429)
        #expect(login("198.51.100.7") == 401, "another client behind the same proxy")
        // From an address that is not a trusted proxy, the header is the client's own word.
        #expect(login("198.51.100.9", from: "192.0.2.77:1") == 401)
        #expect(login("198.51.100.10", from: "192.0.2.77:2") == 401)
        #expect(login("198.51.100.11", from: "192.0.2.77:3") == 429)
    }

    // MARK: failed authentications (item 12)

    @Test func unknownTokensFromOneAddressAreLimitedForThatAddressOnly() throws {
        let door = try Door { $0.authFailuresPerAddressPerMinuteMax = 3 }
        let nina = try door.loggedInUser("nina")
        let guesser = "203.0.113.50:3333"
        func list(_ headers: [(String, String)], from address: String) -> Door.Answer {
            door.send("GET", "/api/find-my/admin/users", headers: headers, from: address)
        }
        let bogus = ("Authorization", "Bearer " + String(repeating: "x", count: 43))
        #expect(list([bogus], from: guesser).errorCode == "invalid_token")
        door.clock.advance(seconds: 20)
        #expect(list([("Cookie", "findmy_session=ended")], from: guesser).errorCode == "invalid_session")
        // No credentials at all is not a guess: never counted.
        for _ in 0..<10 { #expect(list([], from: guesser).errorCode == "missing_token") }
        door.clock.advance(seconds: 20)
        #expect(list([bogus], from: guesser).status == 401)
        // The fourth within the minute: refused before any token is looked at, the right one too.
        let limited = list([bogus], from: guesser)
        #expect(limited.status == 429 && limited.errorCode == "too_many_auth_failures", "\(limited.body)")
        #expect(limited.header("Retry-After") == "20")
        let right = list([("Authorization", "Bearer \(nina.token)")], from: "203.0.113.50:4444")
        #expect(right.status == 429)
        // Another address is not affected, and login is not an authenticated route.
        #expect(list([("Authorization", "Bearer \(nina.token)")], from: "198.51.100.7:1").status == 403)
        #expect(door.jsonLogin("nina", "a long passphrase", from: guesser).status == 200)
        door.clock.advance(seconds: 20)
        #expect(list([("Authorization", "Bearer \(nina.token)")], from: guesser).status == 403)
    }
}

/// The sliding window itself, event in, decision out.
@Suite struct SlidingWindowLimitTests {
    @Test func refusesPastTheLimitUntilTheOldestEventLeavesTheWindow() {
        let limit = SlidingWindowLimit(eventsMax: 2, windowMicros: 10_000_000, keysMax: 10)
        #expect(limit.isEmpty)
        #expect(limit.admit("a", nowMicros: 1_000_000) == .allowed)
        #expect(limit.admit("a", nowMicros: 2_000_000) == .allowed)
        #expect(limit.admit("a", nowMicros: 3_000_000) == .refused(retryAfterSeconds: 8, firstInWindow: true))
        #expect(
            limit.admit("a", nowMicros: 4_000_000) == .refused(retryAfterSeconds: 7, firstInWindow: false))
        #expect(limit.check("b", nowMicros: 4_000_000) == .allowed)
        #expect(limit.admit("a", nowMicros: 11_000_001) == .allowed)
        // A window later, the table holds nothing again: checks no longer take the lock.
        #expect(limit.check("a", nowMicros: 40_000_000) == .allowed)
        #expect(limit.isEmpty)
    }

    @Test func aFullTableCountsNoNewKeyUntilOldOnesLeave() {
        let limit = SlidingWindowLimit(eventsMax: 1, windowMicros: 10_000_000, keysMax: 2)
        for key in ["a", "b"] { #expect(limit.admit(key, nowMicros: 1_000_000) == .allowed) }
        // "c" finds the table full of live keys: not counted, so never refused.
        #expect(limit.admit("c", nowMicros: 2_000_000) == .allowed)
        #expect(limit.admit("c", nowMicros: 2_000_001) == .allowed)
        #expect(limit.admit("a", nowMicros: 2_000_002) != .allowed)
        // Once "a" and "b" are out of the window, "c" is counted.
        #expect(limit.admit("c", nowMicros: 12_000_000) == .allowed)
        #expect(limit.admit("c", nowMicros: 12_000_001) != .allowed)
    }
}
