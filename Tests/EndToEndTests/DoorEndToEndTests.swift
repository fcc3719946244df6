import Foundation
import HTTPClient
import JSON
import Testing

/// The door over real HTTP against `findmy serve`: what another page
/// can send with the victim's session cookie, and what the log says about failed logins and
/// guessed tokens.
@Suite(.serialized) struct DoorEndToEndTests {
    func send(
        _ connection: HTTPConnection, _ method: String, _ target: String, headers: [(String, String)] = [],
        body: String = ""
    ) throws -> (answer: Answer, headers: [(name: String, value: String)]) {
        let response = try connection.send(
            method, target, headers: headers.map { (name: $0.0, value: $0.1) }, body: Array(body.utf8))
        return (
            Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null),
            response.headers
        )
    }

    @Test func aPageOnAnotherPortCannotShareOrEraseWithTheSessionCookie() throws {
        let data = ScratchDirectory("findmy-door-csrf")
        let victim = try addUser("victim", data: data.path)
        _ = try addUser("mallory", data: data.path)
        try setPassword("victim", "a long passphrase", data: data.path)
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let device = try #require(
            try enrol(connection, userToken: victim, uuid: UUID().uuidString).int("device_id"))

        let login = try send(
            connection, "POST", "/login", headers: [("Content-Type", "application/json")],
            body: "{\"name\": \"victim\", \"password\": \"a long passphrase\"}")
        #expect(login.answer.status == 200)
        let csrf = try #require(login.answer.string("csrf_token"))
        let setCookie = try #require(login.headers.first { $0.name.lowercased() == "set-cookie" }?.value)
        let cookie = ("Cookie", String(setCookie.split(separator: ";")[0]))
        let shares = "/api/find-my/devices/\(device)/shares"

        // What a page on another port of the same host sends: text/plain needs no preflight.
        let share = try send(
            connection, "POST", shares,
            headers: [cookie, ("Content-Type", "text/plain"), ("Origin", "http://127.0.0.1:1")],
            body: "{\"user\": \"mallory\"}")
        #expect(share.answer.status == 403 && share.answer.errorCode == "cross_origin_request")
        let erase = try send(
            connection, "POST", "/api/find-my/devices/\(device)/erase",
            headers: [cookie, ("Content-Type", "text/plain")], body: "{}")
        #expect(erase.answer.status == 403 && erase.answer.errorCode == "csrf_token_missing")
        let wrong = try send(
            connection, "POST", "/api/find-my/devices/\(device)/erase",
            headers: [cookie, ("Content-Type", "application/json"), ("X-CSRF-Token", "guess")], body: "{}")
        #expect(wrong.answer.status == 403 && wrong.answer.errorCode == "csrf_token_invalid")
        let listed = try send(connection, "GET", shares, headers: [cookie])
        #expect(listed.answer.status == 200 && listed.answer.body["shares"] == .array([]))

        // From the server's own origin, with the session's token: done.
        let own = try send(
            connection, "POST", shares,
            headers: [
                cookie, ("Content-Type", "application/json"), ("Origin", "http://\(server.address)"),
                ("X-CSRF-Token", csrf),
            ], body: "{\"user\": \"mallory\"}")
        #expect(own.answer.status == 201, "\(own.answer.body)")
        // A Bearer token needs neither, whatever the Origin.
        let revoked = try send(
            connection, "DELETE", shares + "/mallory",
            headers: [("Authorization", "Bearer \(victim)"), ("Origin", "https://evil.example")])
        #expect(revoked.answer.status == 200, "\(revoked.answer.body)")
    }

    @Test func failedLoginsAndGuessedTokensAreLoggedAndLimitedPerAddress() throws {
        let data = ScratchDirectory("findmy-door-log")
        _ = try addUser("nina", data: data.path)
        try setPassword("nina", "a long passphrase", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: [
                "--auth-failures-per-address-per-minute-max", "3",
                "--login-attempts-per-address-per-minute-max", "3",
            ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        func login(_ name: String) throws -> (answer: Answer, headers: [(name: String, value: String)]) {
            try send(
                connection, "POST", "/login", headers: [("Content-Type", "application/json")],
                body: "{\"name\": \"\(name)\", \"password\": \"not the password\"}")
        }

        // A name with a right-to-left override, longer than a log line keeps.
        let spoof = "mallory\u{202E}gnp.exe" + String(repeating: "x", count: 100)
        #expect(try login(spoof).answer.status == 401)

        let bogus = ("Authorization", "Bearer " + String(repeating: "x", count: 43))
        let enrolment = "{\"device_uuid\": \"\(UUID().uuidString)\", \"name\": \"p\", \"platform\": \"ios\"}"
        for _ in 0..<3 {
            let answer = try send(
                connection, "POST", "/api/find-my/devices", headers: [bogus], body: enrolment)
            #expect(answer.answer.status == 401 && answer.answer.errorCode == "invalid_token")
        }
        for _ in 0..<3 {
            let limited = try send(
                connection, "POST", "/api/find-my/devices", headers: [bogus], body: enrolment)
            #expect(limited.answer.status == 429 && limited.answer.errorCode == "too_many_auth_failures")
            let retryAfter = limited.headers.first { $0.name.lowercased() == "retry-after" }.flatMap {
                Int($0.value)
            }
            #expect(retryAfter.map { (1...60).contains($0) } == true)
        }
        #expect(try login("nina").answer.status == 401)
        #expect(try login("marker").answer.status == 401)
        let limitedLogin = try login("nina")
        #expect(
            limitedLogin.answer.status == 429
                && limitedLogin.answer.errorCode == "too_many_attempts_from_address")

        // Standard error is read as it arrives: wait for the marker, written after everything above.
        let deadline = Date().addingTimeInterval(30)
        while !server.process.standardError.contains("\"marker\""), Date() < deadline { usleep(20_000) }
        let events = server.process.standardError.split(separator: "\n").compactMap { line -> JSONValue? in
            try? JSONParser.parse(Array(line.utf8))
        }
        func lines(_ event: String) -> [JSONValue] { events.filter { $0["event"] == .string(event) } }
        let failed = lines("login_failed")
        #expect(failed.count == 3)
        let first = try #require(failed.first)
        let name = try #require(try? first["name"]?.stringValue)
        #expect(name.hasPrefix("mallory\u{FFFD}gnp.exe") && name.hasSuffix("…") && name.utf8.count <= 64 + 3)
        #expect(first["address"] == .string("127.0.0.1"))
        #expect(failed.dropFirst().map { $0["name"] } == [.string("nina"), .string("marker")])
        let limited = lines("auth_failures_limited")
        #expect(limited.count == 1, "once a window, not once a request")
        #expect(limited.first?["address"] == .string("127.0.0.1"))
    }

    /// Behind a trusted proxy (each client its own address): one address guessing bob's password
    /// is limited, bob from elsewhere logs in; guesses from several addresses limit the name
    /// everywhere.
    @Test func oneAddressCannotLockAUserOutButManyAddressesLimitTheName() throws {
        let data = ScratchDirectory("findmy-door-name")
        _ = try addUser("bob", data: data.path)
        try setPassword("bob", "a long passphrase", data: data.path)
        let server = try ServerProcess(data: data.path, extraArguments: ["--trusted-proxy", "127.0.0.1"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        func login(_ password: String, from client: String) throws -> Answer {
            try send(
                connection, "POST", "/login",
                headers: [("Content-Type", "application/json"), ("X-Forwarded-For", client)],
                body: "{\"name\": \"bob\", \"password\": \"\(password)\"}"
            ).answer
        }

        for _ in 0..<5 { #expect(try login("not the password", from: "203.0.113.66").status == 401) }
        let hammering = try login("not the password", from: "203.0.113.66")
        #expect(hammering.status == 429 && hammering.errorCode == "too_many_attempts", "\(hammering.body)")
        let bob = try login("a long passphrase", from: "198.51.100.7")
        #expect(bob.status == 200, "\(bob.body)")

        // Ten failures within the minute, from four addresses: the name is limited wherever it is tried.
        var statuses: [Int] = []
        for client in ["203.0.113.1", "203.0.113.2", "203.0.113.3"] {
            for _ in 0..<2 { statuses.append(try login("not the password", from: client).status) }
        }
        #expect(statuses == [401, 401, 401, 401, 401, 429])
        let everywhere = try login("a long passphrase", from: "198.51.100.8")
        #expect(everywhere.status == 429 && everywhere.errorCode == "too_many_attempts", "\(everywhere.body)")
    }
}
