import Core
import Events
import HTTP
import Identity
import Postgres
import ProjectionSchema

/// `/find-my/admin` (docs/panel.md): users (name, role, whether a password is set, how many
/// devices), changing a role, creating a user (its API token shown once), and the devices with
/// owner, when a report last arrived and the pause switch. Never a position, a fix time or a
/// battery level: an administrator manages devices, it does not see where they are
/// (docs/privacy.md). A member gets a plain 403 page.
extension PanelService {
    func addAdminRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/find-my/admin") { [self] request, gate in
            withAdmin(gate) { adminPage(request, $0, created: nil) }
        }
        router.add("POST", "/find-my/admin/users") { [self] request, gate in
            withForm(request, gate) { caller, fields in adminOnly(caller) { createUser(caller, fields) } }
        }
        router.add("POST", "/find-my/admin/users/role") { [self] request, gate in
            withForm(request, gate) { caller, fields in adminOnly(caller) { changeRole(fields) } }
        }
    }

    func withAdmin(_ gate: GateCaller, _ body: (Caller) -> HTTPResponse) -> HTTPResponse {
        withCaller(gate) { caller in adminOnly(caller) { body(caller) } }
    }

    func adminOnly(_ caller: Caller, _ body: () -> HTTPResponse) -> HTTPResponse {
        guard caller.isAdmin else {
            return messagePage(
                status: 403, title: "Administrators only",
                message:
                    "This page is for administrators. An administrator can give you the role with findmy user role."
            )
        }
        return body()
    }

    static let adminFlashes: [String: String] = ["role": "The role is changed."]
    static let adminErrors: [String: String] = [
        "user_exists": "A user with that name exists already; choose another name.",
        "invalid_name":
            "A name must be 1 to 512 bytes without control, invisible or text-direction characters.",
        "invalid_role": "A role is admin or member.",
        "user_not_found": "There is no user with that name.",
        "failed": "The change could not be stored. Nothing changed; try again.",
    ]

    struct CreatedUserNotice {
        var name: String
        var token: String
    }

    func adminPage(_ request: HTTPRequest, _ caller: Caller, created: CreatedUserNotice?) -> HTTPResponse {
        let registry = identity.registrySnapshot
        var html = HTML()
        pageTop(&html, title: "Admin", caller: caller)
        html.raw(
            "<h2>Admin</h2>\n<p class=\"note\">You manage users and devices here. Positions are not shown: an administrator sees a user's locations only when that user shares a device with them.</p>\n"
        )
        flash(&html, request, done: Self.adminFlashes, errors: Self.adminErrors)
        if let created { createdUserNotice(&html, created) }
        usersSection(&html, registry, caller)
        devicesSection(&html, registry)
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    /// The token of the user just created, shown this once.
    private func createdUserNotice(_ html: inout HTML, _ created: CreatedUserNotice) {
        html.raw("<div class=\"flash\" role=\"status\" id=\"created\"><p>User <strong>")
        html.name(created.name)
        html.raw(
            "</strong> is created. Their API token, shown only this once (copy it now; only its hash is kept):</p>\n<p><code id=\"created-token\">"
        )
        html.text(created.token)
        html.raw(
            "</code></p>\n<p>To let them log in to this panel, set a password on the server: <code>findmy user passwd "
        )
        html.name(created.name)
        html.raw("</code>.</p></div>\n")
    }

    /// Every user with their role, whether a password is set and their number of devices; a button
    /// per user to change the role, and the form to create a user.
    private func usersSection(_ html: inout HTML, _ registry: Registry, _ caller: Caller) {
        html.raw(
            "<section aria-labelledby=\"users-heading\">\n<h3 id=\"users-heading\">Users</h3>\n<table id=\"users\">\n<thead><tr><th scope=\"col\">Name</th><th scope=\"col\">Role</th><th scope=\"col\">Password</th><th scope=\"col\">Devices</th><th scope=\"col\">Change role</th></tr></thead>\n<tbody>\n"
        )
        for user in registry.users.values.sorted(by: { $0.id < $1.id }) {
            let devices = registry.devices.values.count { $0.userID == user.id && !$0.removed }
            html.raw("<tr><td>")
            html.name(user.name)
            html.raw("</td><td>")
            html.text(user.role.name)
            html.raw("</td><td>")
            html.raw(user.passwordHash == nil ? "not set" : "set")
            html.raw("</td><td>")
            html.text(String(devices))
            html.raw("</td><td>")
            formStart(&html, action: "/find-my/admin/users/role", caller: caller, inline: true)
            html.raw("<input type=\"hidden\" name=\"user\" value=\"")
            html.attribute(user.name)
            html.raw("\">\n<input type=\"hidden\" name=\"role\" value=\"")
            html.raw(user.role == .admin ? "member" : "admin")
            html.raw("\">\n<button type=\"submit\">")
            html.raw(user.role == .admin ? "Make member" : "Make admin")
            html.raw("<span class=\"visually-hidden\">: ")
            html.name(user.name)
            html.raw("</span></button>\n</form></td></tr>\n")
        }
        html.raw("</tbody>\n</table>\n<h4>Create a user</h4>\n")
        formStart(&html, action: "/find-my/admin/users", caller: caller)
        html.raw(
            """
            <label for="new-name">Name</label>
            <input id="new-name" name="name" autocomplete="off" autocapitalize="none" required>
            <label for="new-role">Role</label>
            <select id="new-role" name="role"><option value="member" selected>member</option><option value="admin">admin</option></select>
            <button type="submit">Create user</button>
            </form>
            </section>

            """)
    }

    /// Every device not removed, with its owner and when a report last arrived: never a position.
    private func devicesSection(_ html: inout HTML, _ registry: Registry) {
        let devices = registry.devices.values.filter { !$0.removed }.sorted { $0.id < $1.id }
        let lastSeen = (try? data?.lastSeen(devices.map(\.id))) ?? [:]
        html.raw(
            "<section aria-labelledby=\"devices-heading\">\n<h3 id=\"devices-heading\">Devices</h3>\n"
        )
        if devices.isEmpty {
            html.raw("<p>No devices are enrolled.</p>\n")
        } else {
            html.raw(
                "<table id=\"devices\">\n<thead><tr><th scope=\"col\">Name</th><th scope=\"col\">Owner</th><th scope=\"col\">Platform</th><th scope=\"col\">Last report arrived</th><th scope=\"col\">Reporting</th></tr></thead>\n<tbody>\n"
            )
            for device in devices {
                html.raw("<tr><td>")
                html.name(device.name)
                html.raw("</td><td>")
                html.name(registry.users[device.userID]?.name ?? "")
                html.raw("</td><td>")
                html.name(device.model.isEmpty ? device.platform : "\(device.platform) (\(device.model))")
                html.raw("</td><td>")
                if let seen = lastSeen[device.id] { utcTime(&html, seen) } else { html.raw("never") }
                html.raw("</td><td>")
                html.raw(device.paused ? "paused" : "on")
                html.raw("</td></tr>\n")
            }
            html.raw("</tbody>\n</table>\n")
        }
        html.raw("</section>\n")
    }

    /// The one form answered with a page rather than a redirect: the new user's token is shown once
    /// and must not travel in a URL (history, logs). The answer is `Cache-Control: no-store`.
    func createUser(_ caller: Caller, _ fields: [String: String]) -> HTTPResponse {
        let name = fields["name"] ?? ""
        guard let role = Role(name: fields["role"] ?? "member") else {
            return redirect("/find-my/admin?error=invalid_role")
        }
        do throws(APIError) {
            let created = try identity.createUser(name: name, role: role)
            return adminPage(
                HTTPRequest(method: "GET", target: "/find-my/admin"), caller,
                created: CreatedUserNotice(name: name, token: created.token))
        } catch {
            let code =
                switch error.code {
                case .userExists: "user_exists"
                case .invalidField: "invalid_name"
                default: "failed"
                }
            return redirect("/find-my/admin?error=" + code)
        }
    }

    func changeRole(_ fields: [String: String]) -> HTTPResponse {
        guard let role = Role(name: fields["role"] ?? "") else {
            return redirect("/find-my/admin?error=invalid_role")
        }
        do throws(APIError) {
            _ = try identity.changeRole(name: fields["user"] ?? "", role: role)
            return redirect("/find-my/admin?done=role")
        } catch {
            return redirect(
                "/find-my/admin?error=" + (error.code == .userNotFound ? "user_not_found" : "failed"))
        }
    }
}

extension PanelData {
    /// When a report last arrived from each device (`devices.last_seen_at`); nothing else.
    func lastSeen(_ ids: [UInt64]) throws -> [UInt64: Int64] {
        guard !ids.isEmpty else { return [:] }
        let result = try pool.execute(
            "SELECT id, last_seen_at FROM \(ProjectionSchema.Table.devices.live) WHERE id = ANY($1::bigint[])",
            [.int64Array(ids.map { Int64($0) })])
        var seen: [UInt64: Int64] = [:]
        for row in 0..<result.rowCount {
            if let id = try result.int64(row, 0), let micros = try result.timestampMicros(row, 1) {
                seen[UInt64(bitPattern: id)] = micros
            }
        }
        return seen
    }
}
