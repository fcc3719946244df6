import Foundation
import HTTPClient
import JSON
import Testing

/// A user API token can be ended: `findmy user token NAME --rotate` (through the admin socket, or on
/// the log when no server runs), `POST /api/find-my/account/token` and the panel's account page each
/// issue a new token, and the earlier one is refused at once, after a restart too (the log replays
/// to the rotated token, never to the first).
@Suite(.serialized) struct TokenRotationTests {
    let pages = PanelPageTests()
    let phoneUUID = UUID().uuidString

    /// Whether `token` is a live user token: enrolling (always the same device) answers 200 or 201
    /// with one, 401 `invalid_token` without.
    func status(_ connection: HTTPConnection, _ token: String) throws -> (Int, String?) {
        let answer = try enrol(connection, userToken: token, uuid: phoneUUID)
        return (answer.status, answer.errorCode)
    }

    func expectLive(_ connection: HTTPConnection, _ token: String, _ what: String) throws {
        let (status, _) = try status(connection, token)
        #expect(status == 200 || status == 201, "\(what) should work, got \(status)")
    }

    func expectDead(_ connection: HTTPConnection, _ token: String, _ what: String) throws {
        let (status, code) = try status(connection, token)
        #expect(
            status == 401 && code == "invalid_token", "\(what) should be refused, got \(status) \(code ?? "")"
        )
    }

    /// `findmy user token NAME --rotate --json`: the user id and the new token.
    func rotateWithCLI(_ name: String, data: String) throws -> (userID: Int64, token: String) {
        let result = try FindmyProcess.run(["user", "token", name, "--rotate", "--json", "--data-dir", data])
        guard result.status == 0 else { throw TestFailure("user token --rotate failed: \(result.error)") }
        let document = try JSONParser.parse(result.output)
        return (try document["user_id"]!.int64Value, try document["token"]!.stringValue)
    }

    @Test func rotatingThroughTheCLIAndTheAPIEndsTheEarlierTokenAtOnceAndAfterARestart() throws {
        let data = ScratchDirectory("findmy-token-rotation")
        var server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let first = try addUser("alice", data: data.path)
        let bob = try addUser("bob", data: data.path)
        var connection = HTTPConnection(address: server.address)
        try expectLive(connection, first, "alice's first token")

        // Without --rotate the command explains why a token cannot be shown again.
        let refused = try FindmyProcess.run(["user", "token", "alice", "--data-dir", data.path])
        #expect(refused.status != 0)
        #expect(refused.error.contains("hash") && refused.error.contains("--rotate"), "\(refused.error)")
        let unknown = try FindmyProcess.run(["user", "token", "nobody", "--rotate", "--data-dir", data.path])
        #expect(unknown.status != 0 && unknown.error.contains("no user named 'nobody'"), "\(unknown.error)")
        let help = try FindmyProcess.run(["user", "--help"])
        #expect(help.output.contains("findmy user token NAME --rotate"))

        // Through the admin socket: the old token is refused at once, the new one works.
        let (aliceID, second) = try rotateWithCLI("alice", data: data.path)
        #expect(aliceID == 1 && second != first)
        try expectDead(connection, first, "the token before the CLI rotation")
        try expectLive(connection, second, "the token the CLI printed")
        try expectLive(connection, bob, "another user's token")

        // Through the API, with the token it replaces.
        let rotated = try post(connection, "/api/find-my/account/token", token: second, body: "")
        #expect(rotated.status == 200 && rotated.int("user_id") == aliceID, "\(rotated.body)")
        let third = try #require(rotated.string("token"))
        #expect(third != second)
        try expectDead(connection, second, "the token before the API rotation")
        try expectLive(connection, third, "the token the API answered")
        #expect(try post(connection, "/api/find-my/account/token", token: second, body: "").status == 401)
        #expect(
            try post(connection, "/api/find-my/account/token", token: third, body: "{\"x\": 1}").status == 400
        )

        // The log holds the rotations with their user, and no token.
        let dump = try dumpLog(data.path)
        let rotations = dump.records.filter { $0["type"] == .string("user_token_rotated") }
        #expect(rotations.count == 2 && rotations.allSatisfy { $0["user"] == .integer(aliceID) })
        let text = try FindmyProcess.run(["log", "dump", "--json", "--data-dir", data.path]).output
        #expect(![first, second, third].contains { text.contains($0) })

        // A restart replays the log: the latest token, and only it.
        #expect(server.stop() == 0)
        server = try ServerProcess(data: data.path)
        connection = HTTPConnection(address: server.address)
        try expectLive(connection, third, "the latest token after a restart")
        try expectDead(connection, first, "the first token after a restart")
        try expectDead(connection, second, "the CLI's token after a restart")
        try expectLive(connection, bob, "another user's token after a restart")

        // With no server running, the command appends to the log itself.
        #expect(server.stop() == 0)
        let (_, fourth) = try rotateWithCLI("alice", data: data.path)
        server = try ServerProcess(data: data.path)
        connection = HTTPConnection(address: server.address)
        try expectLive(connection, fourth, "the token rotated offline")
        try expectDead(connection, third, "the API's token after an offline rotation")
    }

    @Test func thePanelsAccountPageRotatesOnesOwnTokenAndShowsItOnce() throws {
        let data = ScratchDirectory("findmy-token-panel")
        let first = try addUser("alice", data: data.path)
        try setPassword("alice", "a long passphrase", data: data.path)
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let session = try PanelFormTests().logIn(connection, "alice", "a long passphrase")
        let account = try pages.request(connection, "GET", "/find-my/account", cookies: [session])
        #expect(account.status == 200 && account.body.contains("Rotate my API token"))
        let csrf = try pages.hiddenField("csrf", in: account.body)

        // Without the session's CSRF token, or with a wrong one: 403, and the token still works.
        for form in ["", "csrf=forged"] {
            let refused = try pages.request(
                connection, "POST", "/find-my/account/token", cookies: [session], form: form)
            #expect(refused.status == 403)
        }
        try expectLive(connection, first, "the token after refused forms")

        let answer = try pages.request(
            connection, "POST", "/find-my/account/token", cookies: [session], form: "csrf=\(csrf)")
        #expect(answer.status == 200 && answer.header("Cache-Control") == "no-store")
        #expect(answer.body.contains("shown only this once"))
        let start = try #require(answer.body.range(of: "<code id=\"new-token\">"))
        let token = String(answer.body[start.upperBound...].prefix { $0 != "<" })
        #expect(token.count >= 40 && token != first)
        try expectDead(connection, first, "the token before the panel's rotation")
        try expectLive(connection, token, "the token the panel showed")
        // The session is not a token: it stays logged in, and the page does not show the token again.
        let again = try pages.request(connection, "GET", "/find-my/account", cookies: [session])
        #expect(again.status == 200 && !again.body.contains(token))
    }
}
