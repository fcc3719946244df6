import Core
import Events
import HTTP
import Identity
import Ingest
import JSON

/// The panel's forms (docs/panel.md): the account page (change your password) and, per device you
/// own, its settings (shares, retention, erase history with a confirmation step, the pause switch
/// shown). Every form is a plain POST carrying the session's CSRF token and works without
/// JavaScript: success is a 303 back to the page with a flash message named in the URL
/// (`?done=CODE`, `?error=CODE`), each code mapped to a fixed sentence, so no request text is ever
/// echoed. Each operation is the one the JSON API uses (`IdentityService.shareDevice`, ...).
extension PanelService {
    /// Who is looking: the gate (`.page`) let only a user through, and resolved which one.
    struct Caller {
        var userID: UInt64
        var name: String
        var isAdmin: Bool
        /// The session's CSRF token, which every form of the page carries; nil for a bearer token.
        var csrf: String?
        /// What the gate resolved, for an operation that takes it (`changeOwnPassword`).
        var gate: GateCaller
    }

    func caller(_ gate: GateCaller) -> Caller {
        Caller(
            userID: gate.userID, name: identity.userName(gate.userID) ?? "",
            isAdmin: identity.role(of: gate.userID) == .admin, csrf: gate.sessionCSRFToken, gate: gate)
    }

    func addFormRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/find-my/account") { [self] request, gate in
            withCaller(gate) { accountPage(request, $0) }
        }
        router.add("POST", "/find-my/account/password") { [self] request, gate in
            withForm(request, gate) { changePassword(request, $0, $1) }
        }
        router.add("POST", "/find-my/account/token") { [self] request, gate in
            withForm(request, gate) { caller, _ in rotateToken(caller) }
        }
        router.add("POST", "/find-my/account/settings") { [self] request, gate in
            withForm(request, gate) { changeSettings($0, $1) }
        }
        router.add("GET", "/find-my/devices/{id}/settings") { [self] request, gate in
            withOwnedDevice(request, gate) { settingsPage(request, $0, $1) }
        }
        router.add("POST", "/find-my/devices/{id}/shares") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { addShare(request, $0, $1) }
        }
        router.add("POST", "/find-my/devices/{id}/shares/revoke") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { revokeShare(request, $0, $1) }
        }
        router.add("POST", "/find-my/devices/{id}/retention") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { setRetention(request, $0, $1) }
        }
        router.add("POST", "/find-my/devices/{id}/ntfy") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { setNtfy($0, $1) }
        }
        router.add("POST", "/find-my/devices/{id}/presence") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { setPresence($0, $1) }
        }
        router.add("GET", "/find-my/devices/{id}/erase") { [self] request, gate in
            withOwnedDevice(request, gate) { eraseConfirmation(request, $0, $1) }
        }
        router.add("POST", "/find-my/devices/{id}/erase") { [self] request, gate in
            withOwnedDevice(request, gate, form: true) { erase(request, $0, $1) }
        }
        addAdminRoutes(to: &router)
        addDeviceRoutes(to: &router)
        addFoundNoticeRoute(to: &router)
    }

    // MARK: guards shared by the form routes

    func withCaller(_ gate: GateCaller, _ body: (Caller) -> HTTPResponse) -> HTTPResponse {
        body(caller(gate))
    }

    /// A form post: the caller, and the form's fields (first value of each) once its `csrf` field
    /// matched the session's token; a 403 page otherwise.
    func withForm(
        _ request: HTTPRequest, _ gate: GateCaller, _ body: (Caller, [String: String]) -> HTTPResponse
    ) -> HTTPResponse {
        withCaller(gate) { caller in
            var fields: [String: String] = [:]
            let isForm =
                request.headers["Content-Type"]?.lowercased().hasPrefix("application/x-www-form-urlencoded")
                ?? false
            if isForm {
                for item in parseForm(request.body) where fields[item.name] == nil {
                    fields[item.name] = item.value
                }
            }
            guard identity.formCSRFMatches(request, gate, sent: fields["csrf"]) else {
                return messagePage(
                    status: 403, title: "This form has expired",
                    message:
                        "The form did not carry this session's token. Go back, reload the page and try again."
                )
            }
            return body(caller, fields)
        }
    }

    /// A page of a device the caller owns; anyone else, and an id that does not exist, gets the same
    /// "Device not found" page (a user the device is shared with too: sharing lends sight, not control).
    func withOwnedDevice(
        _ request: HTTPRequest, _ gate: GateCaller, form: Bool = false,
        _ body: (Caller, FormDevice) -> HTTPResponse
    ) -> HTTPResponse {
        func resolve(_ caller: Caller, _ fields: [String: String]) -> HTTPResponse {
            guard let id = request.pathParameters["id"].flatMap({ UInt64($0) }),
                identity.deviceOwner(id) == caller.userID,
                let device = identity.registrySnapshot.liveDevice(id)
            else {
                return messagePage(
                    status: 404, title: "Device not found",
                    message: "There is no device with this id among yours.")
            }
            return body(caller, FormDevice(device: device, fields: fields))
        }
        if form { return withForm(request, gate, resolve) }
        return withCaller(gate) { resolve($0, [:]) }
    }

    struct FormDevice {
        var device: Registry.Device
        var fields: [String: String]
        var settingsPath: String { "/find-my/devices/\(device.id)/settings" }
    }

    // MARK: page parts

    /// The header of the form pages: where you are, links to the devices, your account and (for an
    /// admin) the admin page, and the logout button.
    func pageTop(_ html: inout HTML, title: String, caller: Caller, script: StaticString? = nil) {
        head(&html, title: title, script: script)
        html.raw("<header class=\"top\">\n<h1><a href=\"/find-my\">findmy</a></h1>\n")
        navigation(&html, caller: caller)
        html.raw("</header>\n<main id=\"main\" class=\"forms\">\n")
    }

    func pageBottom(_ html: inout HTML) {
        html.raw("</main>\n</body>\n</html>\n")
    }

    func navigation(_ html: inout HTML, caller: Caller) {
        html.raw(
            "<nav class=\"links\" aria-label=\"Pages\"><a href=\"/find-my\">Devices</a> <a href=\"/find-my/account\">Account</a>"
        )
        if caller.isAdmin { html.raw(" <a href=\"/find-my/admin\">Admin</a>") }
        html.raw("</nav>\n<p class=\"who\">Logged in as ")
        html.name(caller.name)
        html.raw("</p>\n")
        if let csrf = caller.csrf {
            html.raw(
                "<form method=\"post\" action=\"/logout\" class=\"logout\">\n<input type=\"hidden\" name=\"csrf\" value=\""
            )
            html.attribute(csrf)
            html.raw("\">\n<button type=\"submit\">Log out</button>\n</form>\n")
        }
    }

    /// `<form method="post">` with the session's CSRF token.
    func formStart(_ html: inout HTML, action: String, caller: Caller, inline: Bool = false) {
        html.raw(
            inline ? "<form method=\"post\" class=\"inline\" action=\"" : "<form method=\"post\" action=\"")
        html.attribute(action)
        html.raw("\">\n<input type=\"hidden\" name=\"csrf\" value=\"")
        html.attribute(caller.csrf ?? "")
        html.raw("\">\n")
    }

    /// The flash message a redirect named: a fixed sentence per code, never text from the URL.
    func flash(_ html: inout HTML, _ request: HTTPRequest, done: [String: String], errors: [String: String]) {
        if let code = request.query("done"), let message = done[code] {
            html.raw("<p class=\"flash\" role=\"status\" id=\"flash\">")
            html.text(message)
            html.raw("</p>\n")
        }
        if let code = request.query("error") {
            html.raw("<p class=\"error\" role=\"alert\" id=\"flash\">")
            html.text(errors[code] ?? "That did not work. Nothing changed; try again.")
            html.raw("</p>\n")
        }
    }

    func utcTime(_ html: inout HTML, _ micros: Int64) {
        let micros = RFC3339.clampedMicros(micros)
        let text = RFC3339.formatMicros(micros)
        html.raw("<time datetime=\"")
        html.attribute(RFC3339.formatMillis(micros))
        html.raw("\">")
        html.text(String(text.prefix(10)) + " " + String(text.dropFirst(11).prefix(5)) + " UTC")
        html.raw("</time>")
    }
}

extension String {
    func trimmingCharacters(in set: String) -> String {
        var scalars = Substring(self)
        while let first = scalars.first, set.contains(first) { scalars.removeFirst() }
        while let last = scalars.last, set.contains(last) { scalars.removeLast() }
        return String(scalars)
    }
}
