import Foundation
import HTTPClient
import JSON
import Testing

/// The web panel's pages over plain HTTP against `findmy serve` (the browser test,
/// Tests/Browser/panel_test.py, drives the same pages in Chromium): redirects to the login page,
/// the login and logout forms with their CSRF tokens, escaping, the Content-Security-Policy, and
/// "not found" for a device the caller may not see.
@Suite(.serialized) struct PanelPageTests {
    struct Page {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: String
        func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
        func cookie(_ name: String) -> String? {
            for header in headers where header.name.lowercased() == "set-cookie" {
                let first = header.value.split(separator: ";")[0]
                if first.hasPrefix(name + "=") { return String(first.dropFirst(name.count + 1)) }
            }
            return nil
        }
    }

    func request(
        _ connection: HTTPConnection, _ method: String, _ target: String, cookies: [String] = [],
        token: String? = nil, form: String? = nil
    ) throws -> Page {
        var headers: [(name: String, value: String)] = []
        if !cookies.isEmpty { headers.append(("Cookie", cookies.joined(separator: "; "))) }
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if form != nil { headers.append(("Content-Type", "application/x-www-form-urlencoded")) }
        let response = try connection.send(method, target, headers: headers, body: Array((form ?? "").utf8))
        return Page(
            status: response.status, headers: response.headers,
            body: String(decoding: response.body, as: UTF8.self))
    }

    func hiddenField(_ name: String, in body: String) throws -> String {
        let marker = "name=\"\(name)\" value=\""
        guard let start = body.range(of: marker) else { throw TestFailure("no \(name) field in \(body)") }
        return String(body[start.upperBound...].prefix { $0 != "\"" })
    }

    @Test func loginFormsEscapingPolicyAndNotFound() throws {
        let data = ScratchDirectory("findmy-panel")
        let alice = try addUser("alice", data: data.path)
        let bob = try addUser("bob", data: data.path)
        try setPassword("alice", "a long passphrase", data: data.path)
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let script = try enrol(
            connection, userToken: alice, uuid: UUID().uuidString, name: "<script>alert(1)</script>")
        let scriptID = try #require(script.int("device_id"))
        let bobs = try enrol(connection, userToken: bob, uuid: UUID().uuidString, name: "bobs-secret-tablet")
        let bobsID = try #require(bobs.int("device_id"))
        let report = try post(
            connection, "/api/find-my/report", token: script.string("device_token"),
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        let offset = try #require(report.int("offset"))
        #expect(
            try get(connection, "/api/find-my/devices?after_offset=\(offset)", token: alice).status == 200)

        // Without a session a page sends the browser to the login page, which comes back to it.
        let anonymous = try request(connection, "GET", "/find-my?selected=\(scriptID)")
        #expect(anonymous.status == 303)
        #expect(anonymous.header("Location") == "/login?next=%2Ffind-my%3Fselected%3D\(scriptID)")

        let login = try request(connection, "GET", "/login?next=/find-my%3Fselected%3D\(scriptID)")
        #expect(login.status == 200)
        let policy = try #require(login.header("Content-Security-Policy"))
        #expect(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"))
        #expect(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"))
        let loginCSRF = try #require(login.cookie("findmy_login_csrf"))
        #expect(try hiddenField("csrf", in: login.body) == loginCSRF)
        #expect(try hiddenField("next", in: login.body) == "/find-my?selected=\(scriptID)")
        #expect(
            login.body.contains("<label for=\"name\">") && login.body.contains("<label for=\"password\">"))

        // A form login whose csrf does not match its cookie is refused before the password is checked.
        let forged = try request(
            connection, "POST", "/login", cookies: ["findmy_login_csrf=\(loginCSRF)"],
            form: "name=alice&password=a+long+passphrase&csrf=forged")
        #expect(
            forged.status == 303 && forged.header("Location")?.hasPrefix("/login?error=expired_form") == true)
        #expect(forged.cookie("findmy_session") == nil)
        let wrong = try request(
            connection, "POST", "/login", cookies: ["findmy_login_csrf=\(loginCSRF)"],
            form: "name=alice&password=wrong+password&csrf=\(loginCSRF)")
        #expect(wrong.header("Location")?.hasPrefix("/login?error=invalid_credentials") == true)
        // `next` only ever leads to a panel page.
        let elsewhere = try request(
            connection, "POST", "/login", cookies: ["findmy_login_csrf=\(loginCSRF)"],
            form: "name=alice&password=a+long+passphrase&csrf=\(loginCSRF)&next=https%3A%2F%2Fevil.example%2F"
        )
        #expect(elsewhere.status == 303 && elsewhere.header("Location") == "/find-my")
        let right = try request(
            connection, "POST", "/login", cookies: ["findmy_login_csrf=\(loginCSRF)"],
            form:
                "name=alice&password=a+long+passphrase&csrf=\(loginCSRF)&next=%2Ffind-my%3Fselected%3D\(scriptID)"
        )
        #expect(right.status == 303 && right.header("Location") == "/find-my?selected=\(scriptID)")
        let session = "findmy_session=" + (try #require(right.cookie("findmy_session")))

        // The device named <script>: text in the page, escaped JSON in the data island.
        let page = try request(connection, "GET", "/find-my?selected=\(scriptID)", cookies: [session])
        #expect(page.status == 200)
        #expect(page.header("Content-Type") == "text/html; charset=utf-8")
        #expect(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(!page.body.contains("<script>alert(1)"))
        #expect(page.body.contains("\\u003cscript\\u003ealert(1)\\u003c/script\\u003e"))
        #expect(page.body.contains("Fix taken at") && page.body.contains("± 12 m"))
        #expect(!page.body.contains("<script>") && !page.body.contains(" onclick="), "no inline script")
        #expect(page.body.contains("<a href=\"/find-my?selected=\(scriptID)\" aria-current=\"page\">"))

        // Another user's device, and one that does not exist: the same "not found", nothing of bob's.
        for id in [bobsID, 99_999] {
            let other = try request(connection, "GET", "/find-my?selected=\(id)", cookies: [session])
            #expect(other.status == 404)
            #expect(other.body.contains("Device not found"))
            #expect(!other.body.contains("bobs-secret-tablet"))
        }
        // A user token reads the pages too; a device token does not.
        #expect(try request(connection, "GET", "/find-my", token: alice).status == 200)
        #expect(
            try request(connection, "GET", "/find-my", token: script.string("device_token")).status == 303)

        // Logout: a form without the session's token is refused; with it the session ends.
        let csrf = try hiddenField("csrf", in: page.body)
        #expect(
            try request(connection, "POST", "/logout", cookies: [session], form: "csrf=forged").status == 403)
        #expect(
            try request(connection, "GET", "/find-my", cookies: [session]).status == 200, "still logged in")
        let out = try request(connection, "POST", "/logout", cookies: [session], form: "csrf=\(csrf)")
        #expect(out.status == 303 && out.header("Location") == "/login?logged_out=1")
        #expect(try request(connection, "GET", "/find-my", cookies: [session]).status == 303)

        // Leaflet and the panel's own files are served by findmy itself.
        #expect(try request(connection, "GET", "/static/panel.js").status == 200)
        #expect(try request(connection, "GET", "/static/leaflet/leaflet.js").status == 200)
        // The clustering of many markers, from Debian's libjs-leaflet.markercluster beside Leaflet.
        let cluster = try request(connection, "GET", "/static/leaflet/leaflet.markercluster.js")
        #expect(cluster.status == 200 && cluster.body.contains("Leaflet.markercluster"))
        #expect(cluster.header("Content-Type") == "text/javascript; charset=utf-8")
        for sheet in ["MarkerCluster.css", "MarkerCluster.Default.css"] {
            let style = try request(connection, "GET", "/static/leaflet/" + sheet)
            #expect(style.status == 200 && style.header("Content-Type") == "text/css; charset=utf-8")
        }
        #expect(try request(connection, "GET", "/static/leaflet/images/marker-icon.png").status == 200)
        #expect(try request(connection, "GET", "/static/leaflet/images/..%2F..%2Fetc%2Fpasswd").status == 404)
    }

    /// The panel's script and style sheet are the files in Sources/WebPanel/Resources, embedded in the
    /// binary when it is built: what the server sends is those files' bytes, so an edit to a file is
    /// what ships (after a build), and no copy of them lives anywhere else.
    @Test func panelScriptAndStyleAreTheResourceFiles() throws {
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent()
            .deletingLastPathComponent()
        let resources = packageRoot.appendingPathComponent("Sources/WebPanel/Resources")
        let data = ScratchDirectory("findmy-panel-static")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        for (name, type) in [
            ("panel.js", "text/javascript; charset=utf-8"),
            ("panel-map.js", "text/javascript; charset=utf-8"),
            ("import.js", "text/javascript; charset=utf-8"), ("panel.css", "text/css; charset=utf-8"),
        ] {
            let onDisk = try Data(contentsOf: resources.appendingPathComponent(name))
            #expect(!onDisk.isEmpty)
            let response = try connection.send("GET", "/static/" + name)
            #expect(response.status == 200)
            let served = response.body
            let file = Array(onDisk)
            let common = min(served.count, file.count)
            // Compared through the first differing byte: an expectation on the two arrays would print both whole.
            let differsFrom = served == file ? nil : (0..<common).first { served[$0] != file[$0] } ?? common
            #expect(
                differsFrom == nil,
                "/static/\(name) (\(served.count) bytes) is not Sources/WebPanel/Resources/\(name) (\(file.count) bytes) from byte \(differsFrom ?? common) on"
            )
            let header = { (wanted: String) in
                response.headers.first { $0.name.lowercased() == wanted.lowercased() }?.value
            }
            #expect(header("Content-Type") == type)
            #expect(header("Cache-Control") == "public, max-age=3600")
            #expect(header("X-Content-Type-Options") == "nosniff")
        }
    }

    @Test func withoutTheProjectorThePagesAnswer503() throws {
        let data = ScratchDirectory("findmy-panel-off")
        let alice = try addUser("alice", data: data.path)
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let page = try request(connection, "GET", "/find-my", token: alice)
        #expect(page.status == 503)
        #expect(page.body.contains("--projector on"))
        #expect(try request(connection, "GET", "/login").status == 200)
    }
}
