import Foundation
import HTTPClient
import JSON
import Testing

/// The Friends view as a user's setting (docs/clients.md, "Friends"): off by default, turned on
/// through `PUT /api/find-my/account/settings` or the panel's account page, kept in the log and the
/// registry snapshot; `?friends=` on the app's URL overrides it for that app.
@Suite(.serialized) struct OwnTracksFriendsSettingTests {
    struct Server {
        let data = ScratchDirectory("findmy-owntracks-friends")
        var server: ServerProcess
        var connection: HTTPConnection

        init() throws {
            server = try ServerProcess(data: self.data.path, extraArguments: Self.arguments)
            connection = HTTPConnection(address: server.address)
        }

        static let arguments = ["--projector", "on", "--retention-days", "36500"]

        /// Starts a new server on the same data, the previous one stopped.
        mutating func start() throws {
            server = try ServerProcess(data: data.path, extraArguments: Self.arguments)
            connection = HTTPConnection(address: server.address)
        }
    }

    func settings(_ connection: HTTPConnection, _ method: String, token: String, body: String = "") throws
        -> Answer
    {
        let response = try connection.send(
            method, "/api/find-my/account/settings",
            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
            body: Array(body.utf8))
        return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
    }

    @Test func theSettingTurnsTheFriendsViewOnAndSurvivesARestart() throws {
        var server = try Server()
        defer { _ = server.server.stop() }
        let data = server.data.path
        let janeToken = try addUser("jane", data: data)
        let bobToken = try addUser("bob", data: data)
        try setPassword("jane", "a long passphrase", data: data)
        let jane = try enrol(server.connection, userToken: janeToken, uuid: UUID().uuidString, name: "pixel")
        let bob = try enrol(server.connection, userToken: bobToken, uuid: UUID().uuidString, name: "iphone")
        let janeDevice = jane.string("device_token")!
        let bobID = bob.int("device_id")!
        let report = try post(
            server.connection, "/api/find-my/report", token: bob.string("device_token")!,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(latitude: 50.9)]))
        #expect(report.status == 200)
        let shared = try post(
            server.connection, "/api/find-my/devices/\(bobID)/shares", token: bobToken,
            body: #"{"user": "jane"}"#)
        #expect(shared.status == 201, "\(shared.body)")
        try waitForProjector(data)

        let auth = OwnTracksHTTPTests.basic("jane", janeDevice)
        let body = Array(
            #"{"_type":"location","lat":52.5,"lon":13.4,"acc":10,"tst":1764756000,"tid":"jp"}"#.utf8)
        let bobTid = OwnTracksFriendsTests.tid(bobID)
        func answer(_ query: String = "") throws -> [JSONValue] {
            let response = try OwnTracksHTTPTests.publish(server.connection, body, auth: auth, query: query)
            #expect(response.status == 200)
            return try JSONParser.parse(response.body).arrayValue
        }
        func showsBob(_ messages: [JSONValue]) -> Bool {
            messages.contains { $0["_type"] == .string("location") && $0["tid"] == .string(bobTid) }
                && messages.contains {
                    $0["_type"] == .string("card") && $0["tid"] == .string(bobTid)
                        && $0["name"] == .string("bob: iphone")
                }
        }

        // Off by default: no friends, unless the app's URL asks (the per-app override).
        let initial = try settings(server.connection, "GET", token: janeToken)
        #expect(initial.status == 200 && initial.body["owntracks_friends"] == .bool(false))
        #expect(try answer() == [])
        #expect(showsBob(try answer("?friends=1")))

        // Turned on through the API: the same publish now carries bob's shared iphone.
        let on = try settings(
            server.connection, "PUT", token: janeToken, body: #"{"owntracks_friends": true}"#)
        #expect(on.status == 200 && on.body["owntracks_friends"] == .bool(true), "\(on.body)")
        let friends = try answer()
        #expect(showsBob(friends), "\(friends)")
        let bobLocation = try #require(friends.first { $0["_type"] == .string("location") })
        #expect(try bobLocation["lat"]!.doubleValue == 50.9)
        #expect(try answer("?friends=0") == [], "the app's URL turns it off for that app")
        // Bob's own setting is his: still off.
        #expect(
            try settings(server.connection, "GET", token: bobToken).body["owntracks_friends"] == .bool(false))
        // Bad bodies say what is wrong.
        let unknown = try settings(server.connection, "PUT", token: janeToken, body: #"{"friends": true}"#)
        #expect(unknown.status == 400, "\(unknown.body)")
        let wrongType = try settings(
            server.connection, "PUT", token: janeToken, body: #"{"owntracks_friends": "yes"}"#)
        #expect(wrongType.status == 400, "\(wrongType.body)")
        #expect(try settings(server.connection, "PUT", token: "nope", body: "{}").status == 401)

        // The log holds the change, as `findmy log dump` shows it.
        let changes = try dumpLog(data).records.filter { $0["type"] == .string("user_setting_changed") }
        #expect(changes.count == 1, "\(changes)")
        #expect(changes.first?["setting"] == .string("owntracks_friends"))
        #expect(changes.first?["value"] == .string("true"))

        // After a restart (the registry from the snapshot the stop wrote) it is still on, and
        // after one from the log alone (no snapshot) too.
        #expect(server.server.stop() == 0)
        try server.start()
        try waitForProjector(data)
        #expect(showsBob(try answer()), "after a restart from the snapshot")
        #expect(server.server.stop() == 0)
        try FileManager.default.removeItem(atPath: data + "/snapshots")
        try server.start()
        try waitForProjector(data)
        #expect(showsBob(try answer()), "after a restart from the log")

        // Off again through the panel's account page, whose form carries the session's CSRF token.
        let pages = PanelPageTests()
        let session = try PanelFormTests().logIn(server.connection, "jane", "a long passphrase")
        let account = try pages.request(server.connection, "GET", "/find-my/account", cookies: [session])
        #expect(account.status == 200 && account.body.contains("Stop showing them in OwnTracks"))
        let csrf = try pages.hiddenField("csrf", in: account.body)
        let forged = try pages.request(
            server.connection, "POST", "/find-my/account/settings", cookies: [session],
            form: "owntracks_friends=off")
        #expect(forged.status == 403)
        #expect(showsBob(try answer()), "a form without the CSRF token changes nothing")
        let off = try pages.request(
            server.connection, "POST", "/find-my/account/settings", cookies: [session],
            form: "csrf=\(csrf)&owntracks_friends=off")
        #expect(off.status == 303 && off.header("Location") == "/find-my/account?done=friends_off")
        #expect(try answer() == [])
        let page = try pages.request(
            server.connection, "GET", "/find-my/account?done=friends_off", cookies: [session])
        #expect(page.body.contains("Show them in OwnTracks") && page.body.contains("no longer shows"))

        // And on again through the panel.
        let csrfAgain = try pages.hiddenField("csrf", in: page.body)
        let turnedOn = try pages.request(
            server.connection, "POST", "/find-my/account/settings", cookies: [session],
            form: "csrf=\(csrfAgain)&owntracks_friends=on")
        #expect(turnedOn.status == 303)
        #expect(showsBob(try answer()))
        #expect(
            try settings(server.connection, "GET", token: janeToken).body["owntracks_friends"] == .bool(true))
    }
}
