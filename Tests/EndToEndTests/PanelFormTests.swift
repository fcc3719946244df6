import Foundation
import HTTPClient
import JSON
import Testing

/// The panel's forms over plain HTTP against `findmy serve --projector on`: the account page
/// (change the password), a device's settings (share, revoke, retention, erase with its
/// confirmation step) and the admin page. Each form: success is a 303 with a flash message, a
/// post without the session's CSRF token or with a wrong one is a 403, another user's device is
/// "Device not found", and a member on the admin page gets a 403 page.
@Suite(.serialized) struct PanelFormTests {
    let pages = PanelPageTests()

    /// Logs in through the panel's login form; returns the session cookie ("findmy_session=...").
    func logIn(_ connection: HTTPConnection, _ name: String, _ password: String) throws -> String {
        let login = try pages.request(connection, "GET", "/login")
        let csrf = try #require(login.cookie("findmy_login_csrf"))
        let answer = try pages.request(
            connection, "POST", "/login", cookies: ["findmy_login_csrf=\(csrf)"],
            form: "name=\(name)&password=\(password.replacingOccurrences(of: " ", with: "+"))&csrf=\(csrf)")
        guard answer.status == 303, let session = answer.cookie("findmy_session") else {
            throw TestFailure("login of \(name) failed: \(answer.status) \(answer.header("Location") ?? "")")
        }
        return "findmy_session=\(session)"
    }

    /// A form post three ways: without `csrf` and with a wrong one (both 403, nothing changed), then
    /// with the page's token; returns the last answer.
    func postChecked(
        _ connection: HTTPConnection, _ path: String, session: String, csrf: String, form: String
    ) throws -> PanelPageTests.Page {
        #expect(try pages.request(connection, "POST", path, cookies: [session], form: form).status == 403)
        #expect(
            try pages.request(connection, "POST", path, cookies: [session], form: form + "&csrf=forged")
                .status
                == 403)
        return try pages.request(connection, "POST", path, cookies: [session], form: form + "&csrf=\(csrf)")
    }

    @Test func accountSettingsAndAdminForms() throws {
        let data = ScratchDirectory("findmy-panel-forms")
        let alice = try addUser("alice", data: data.path)
        _ = try addUser("bob", data: data.path)
        let admin = try FindmyProcess.run([
            "user", "add", "root", "--admin", "--json", "--data-dir", data.path,
        ])
        #expect(admin.status == 0)
        try setPassword("alice", "a long passphrase", data: data.path)
        try setPassword("bob", "bobs passphrase", data: data.path)
        try setPassword("root", "root passphrase", data: data.path)
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let phone = try enrol(connection, userToken: alice, uuid: UUID().uuidString, name: "alices-phone")
        let phoneID = try #require(phone.int("device_id"))
        let report = try post(
            connection, "/api/find-my/report", token: phone.string("device_token"),
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(secondsAgo: 3600), fixJSON()]))
        let offset = try #require(report.int("offset"))
        #expect(
            try get(connection, "/api/find-my/devices?after_offset=\(offset)", token: alice).status == 200)

        let aliceSession = try logIn(connection, "alice", "a long passphrase")
        let bobSession = try logIn(connection, "bob", "bobs passphrase")
        let aliceOther = try logIn(connection, "alice", "a long passphrase")

        // Settings of alice's device: the forms, the pause switch shown, labels.
        let settingsPath = "/find-my/devices/\(phoneID)/settings"
        let settings = try pages.request(connection, "GET", settingsPath, cookies: [aliceSession])
        #expect(settings.status == 200)
        #expect(settings.body.contains("On: the device reports its position."))
        #expect(
            settings.body.contains("<label for=\"share-user\">")
                && settings.body.contains("<label for=\"days\">"))
        #expect(settings.body.contains("Fixes are kept 30 days, the default window."))
        let csrf = try pages.hiddenField("csrf", in: settings.body)
        // The device page links to it, for the owner.
        let devicePage = try pages.request(
            connection, "GET", "/find-my?selected=\(phoneID)", cookies: [aliceSession])
        #expect(devicePage.body.contains("href=\"/find-my/devices/\(phoneID)/settings\""))

        // Bob and a missing id: the same "Device not found", nothing of alice's device, for every route.
        for id in [phoneID, 99_999] {
            let page = try pages.request(
                connection, "GET", "/find-my/devices/\(id)/settings", cookies: [bobSession])
            #expect(page.status == 404 && page.body.contains("Device not found"))
            #expect(!page.body.contains("alices-phone"))
            let bobCSRF = try pages.hiddenField(
                "csrf",
                in: try pages.request(connection, "GET", "/find-my/account", cookies: [bobSession]).body)
            for action in ["shares", "shares/revoke", "retention", "erase"] {
                let post = try pages.request(
                    connection, "POST", "/find-my/devices/\(id)/\(action)", cookies: [bobSession],
                    form: "user=bob&days=1&scope=all&csrf=\(bobCSRF)")
                #expect(post.status == 404 && post.body.contains("Device not found"), "\(action)")
            }
        }

        // Share with bob: bob sees the device; revoke: he does not.
        let shared = try postChecked(
            connection, "/find-my/devices/\(phoneID)/shares", session: aliceSession, csrf: csrf,
            form: "user=bob&until=")
        #expect(shared.status == 303 && shared.header("Location") == settingsPath + "?done=shared")
        let listed = try pages.request(
            connection, "GET", settingsPath + "?done=shared", cookies: [aliceSession])
        #expect(listed.body.contains("The device is shared.") && listed.body.contains("<td>bob</td>"))
        #expect(
            try pages.request(connection, "GET", "/find-my", cookies: [bobSession]).body.contains(
                "alices-phone"))
        let unknown = try pages.request(
            connection, "POST", "/find-my/devices/\(phoneID)/shares", cookies: [aliceSession],
            form: "user=nobody&csrf=\(csrf)")
        #expect(unknown.header("Location") == settingsPath + "?error=user_not_found")
        let revoked = try postChecked(
            connection, "/find-my/devices/\(phoneID)/shares/revoke", session: aliceSession, csrf: csrf,
            form: "user=bob")
        #expect(revoked.status == 303 && revoked.header("Location") == settingsPath + "?done=revoked")
        #expect(
            !(try pages.request(connection, "GET", "/find-my", cookies: [bobSession]).body.contains(
                "alices-phone")))

        // Retention: 7 days, then back to the default.
        let retention = try postChecked(
            connection, "/find-my/devices/\(phoneID)/retention", session: aliceSession, csrf: csrf,
            form: "days=7")
        #expect(retention.header("Location") == settingsPath + "?done=retention")
        #expect(
            try pages.request(connection, "GET", settingsPath, cookies: [aliceSession]).body.contains(
                "Fixes are kept 7 days, this device&#39;s own setting."))
        let bad = try pages.request(
            connection, "POST", "/find-my/devices/\(phoneID)/retention", cookies: [aliceSession],
            form: "days=0&csrf=\(csrf)")
        #expect(bad.header("Location") == settingsPath + "?error=invalid_days")

        // Erase: the confirmation step changes nothing; the post erases.
        let confirm = try pages.request(
            connection, "GET", "/find-my/devices/\(phoneID)/erase?scope=all&from=&to=",
            cookies: [aliceSession])
        #expect(confirm.status == 200 && confirm.body.contains("This cannot be undone"))
        var history = try get(connection, "/api/find-my/devices/\(phoneID)/locations", token: alice)
        #expect((try? history.body["locations"]?.arrayValue)?.count == 2)
        let erased = try postChecked(
            connection, "/find-my/devices/\(phoneID)/erase", session: aliceSession, csrf: csrf,
            form: "scope=all&from=&to=")
        #expect(erased.header("Location") == settingsPath + "?done=erased")
        // The erase's offset is not in a redirect: wait for the projection to apply it.
        _ = try waitUntil(timeoutSeconds: 120) {
            history = try get(connection, "/api/find-my/devices/\(phoneID)/locations", token: alice)
            return (try? history.body["locations"]?.arrayValue)?.count == 0
        }
        #expect(history.status == 200 && (try? history.body["locations"]?.arrayValue)?.count == 0)

        // The account page: a wrong current password, a mismatch, then the change. The other
        // session of alice ends; this one stays.
        let accountCSRF = try pages.hiddenField(
            "csrf", in: try pages.request(connection, "GET", "/find-my/account", cookies: [aliceSession]).body
        )
        // (Bob tries the wrong current password: each check counts against the login throttle of
        // the name, 5 a minute, and alice logs in four times here.)
        let bobAccountCSRF = try pages.hiddenField(
            "csrf", in: try pages.request(connection, "GET", "/find-my/account", cookies: [bobSession]).body)
        let wrong = try pages.request(
            connection, "POST", "/find-my/account/password", cookies: [bobSession],
            form: "current=nope&new=brand+new+secret&again=brand+new+secret&csrf=\(bobAccountCSRF)")
        #expect(wrong.header("Location") == "/find-my/account?error=wrong_password")
        let mismatch = try pages.request(
            connection, "POST", "/find-my/account/password", cookies: [aliceSession],
            form: "current=a+long+passphrase&new=brand+new+secret&again=other&csrf=\(accountCSRF)")
        #expect(mismatch.header("Location") == "/find-my/account?error=mismatch")
        let changed = try postChecked(
            connection, "/find-my/account/password", session: aliceSession, csrf: accountCSRF,
            form: "current=a+long+passphrase&new=brand+new+secret&again=brand+new+secret")
        #expect(changed.status == 303 && changed.header("Location") == "/find-my/account?done=password")
        #expect(try pages.request(connection, "GET", "/find-my", cookies: [aliceSession]).status == 200)
        #expect(try pages.request(connection, "GET", "/find-my", cookies: [aliceOther]).status == 303)
        #expect(throws: TestFailure.self) { _ = try logIn(connection, "alice", "a long passphrase") }
        _ = try logIn(connection, "alice", "brand new secret")

        // The admin page: a member gets a 403 page; the admin sees users and devices, no position.
        for path in ["/find-my/admin"] {
            let refused = try pages.request(connection, "GET", path, cookies: [bobSession])
            #expect(refused.status == 403 && refused.body.contains("Administrators only"))
        }
        let bobCSRF = try pages.hiddenField(
            "csrf", in: try pages.request(connection, "GET", "/find-my/account", cookies: [bobSession]).body)
        #expect(
            try pages.request(
                connection, "POST", "/find-my/admin/users", cookies: [bobSession],
                form: "name=mallory&csrf=\(bobCSRF)"
            ).status == 403)
        let rootSession = try logIn(connection, "root", "root passphrase")
        let adminPage = try pages.request(connection, "GET", "/find-my/admin", cookies: [rootSession])
        #expect(adminPage.status == 200)
        #expect(adminPage.body.contains("<td>alice</td><td>member</td><td>set</td><td>1</td>"))
        #expect(adminPage.body.contains("<td>alices-phone</td><td>alice</td>"))
        #expect(!adminPage.body.contains("52.52") && !adminPage.body.contains("latitude"))
        #expect(!adminPage.body.contains("battery") && !adminPage.body.contains("Fix taken"))
        let adminCSRF = try pages.hiddenField("csrf", in: adminPage.body)
        let created = try postChecked(
            connection, "/find-my/admin/users", session: rootSession, csrf: adminCSRF,
            form: "name=carol&role=member")
        #expect(created.status == 200 && created.header("Cache-Control") == "no-store")
        let tokenStart = try #require(created.body.range(of: "<code id=\"created-token\">"))
        let token = String(created.body[tokenStart.upperBound...].prefix { $0 != "<" })
        #expect(
            try get(connection, "/api/find-my/devices", token: token).status == 200, "the new token works")
        let again = try pages.request(
            connection, "POST", "/find-my/admin/users", cookies: [rootSession],
            form: "name=carol&csrf=\(adminCSRF)")
        #expect(again.header("Location") == "/find-my/admin?error=user_exists")
        let role = try postChecked(
            connection, "/find-my/admin/users/role", session: rootSession, csrf: adminCSRF,
            form: "user=bob&role=admin")
        #expect(role.header("Location") == "/find-my/admin?done=role")
        #expect(try pages.request(connection, "GET", "/find-my/admin", cookies: [bobSession]).status == 200)
    }
}
