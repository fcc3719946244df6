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

    // MARK: /find-my/account

    static let accountFlashes: [String: String] = [
        "password": "Your password is changed. Your other sessions have ended; this one stays logged in.",
        "friends_on": "OwnTracks now shows the devices shared with you in its Friends view.",
        "friends_off": "OwnTracks no longer shows the devices shared with you.",
    ]
    static let accountErrors: [String: String] = [
        "wrong_password": "The current password is wrong.",
        "mismatch": "The two new passwords differ.",
        "invalid_password": "The new password is too short or too long.",
        "too_many_attempts": "Too many attempts within a minute. Wait a minute and try again.",
        "busy": "The server is busy. Try again in a second.",
        "failed": "The change could not be stored. Nothing changed; try again.",
        "invalid_setting":
            "The form sent a setting this server does not know. Reload the page and try again.",
    ]

    /// `newToken`: the token a rotation just made, shown on this one answer only.
    func accountPage(_ request: HTTPRequest, _ caller: Caller, newToken: String? = nil) -> HTTPResponse {
        var html = HTML()
        pageTop(&html, title: "Account", caller: caller)
        html.raw("<h2>Account</h2>\n<p>Logged in as <strong>")
        html.name(caller.name)
        html.raw("</strong> (")
        html.text(caller.isAdmin ? "admin" : "member")
        html.raw(").</p>\n")
        flash(&html, request, done: Self.accountFlashes, errors: Self.accountErrors)
        if let newToken {
            html.raw(
                "<div class=\"flash\" role=\"status\" id=\"rotated\"><p>Your new API token, shown only this once (copy it now; only its hash is kept). Your earlier token no longer works: give the new one to every script or app that used it.</p>\n<p><code id=\"new-token\">"
            )
            html.text(newToken)
            html.raw("</code></p></div>\n")
        }
        html.raw(
            "<section aria-labelledby=\"password-heading\">\n<h3 id=\"password-heading\">Change your password</h3>\n"
        )
        formStart(&html, action: "/find-my/account/password", caller: caller)
        html.raw(
            """
            <input type="text" name="username" autocomplete="username" value="
            """)
        html.attribute(caller.name)
        html.raw(
            """
            " hidden>
            <label for="current">Current password</label>
            <input id="current" name="current" type="password" autocomplete="current-password" required>
            <label for="new">New password</label>
            <input id="new" name="new" type="password" autocomplete="new-password" required minlength="
            """)
        html.text(String(identity.limits.passwordBytesMin))
        html.raw(
            """
            ">
            <label for="again">New password again</label>
            <input id="again" name="again" type="password" autocomplete="new-password" required>
            <button type="submit">Change password</button>
            </form>
            <p class="note">Changing it ends your sessions in other browsers.</p>
            </section>
            <section aria-labelledby="token-heading">
            <h3 id="token-heading">API token</h3>
            <p>Apps and scripts use your API token to enrol devices and read locations as you. If it may have leaked, rotate it: you get a new token, shown once, and the old one stops working at once. Your login sessions stay.</p>

            """)
        formStart(&html, action: "/find-my/account/token", caller: caller)
        html.raw("<button type=\"submit\">Rotate my API token</button>\n</form>\n</section>\n")
        friendsSection(&html, caller)
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    func changePassword(_ request: HTTPRequest, _ caller: Caller, _ fields: [String: String]) -> HTTPResponse
    {
        func back(_ query: String) -> HTTPResponse { redirect("/find-my/account?\(query)") }
        let new = fields["new"] ?? ""
        guard new == fields["again"] ?? "" else { return back("error=mismatch") }
        do throws(APIError) {
            _ = try identity.changeOwnPassword(
                request, caller.gate, current: fields["current"] ?? "", new: new)
            return back("done=password")
        } catch {
            switch error.code {
            case .invalidCredentials: return back("error=wrong_password")
            case .invalidField: return back("error=invalid_password")
            case .tooManyAttempts, .busy: return back("error=\(error.code.rawValue)")
            default: return back("error=failed")
            }
        }
    }

    /// Answered with the account page rather than a redirect, like the admin page's new user: the
    /// token is shown once and must not travel in a URL (history, logs); the page is `no-store`.
    func rotateToken(_ caller: Caller) -> HTTPResponse {
        do throws(APIError) {
            let rotated = try identity.rotateUserToken(userID: caller.userID, via: "panel")
            return accountPage(
                HTTPRequest(method: "GET", target: "/find-my/account"), caller, newToken: rotated.token)
        } catch {
            return redirect("/find-my/account?error=failed")
        }
    }

    /// The OwnTracks Friends switch: one button that sends the state it turns to, so a form
    /// without JavaScript needs no checkbox (whose "off" a browser does not send).
    func friendsSection(_ html: inout HTML, _ caller: Caller) {
        let on = identity.owntracksFriends(userID: caller.userID)
        html.raw(
            """
            <section aria-labelledby="friends-heading">
            <h3 id="friends-heading">OwnTracks Friends</h3>
            <p>Show the devices shared with me (and my other devices) in OwnTracks' Friends view: each answer to the OwnTracks app carries their latest positions and names. Only devices you can see here are ever sent.</p>
            <p id="friends-state">Now: <strong>
            """)
        html.text(on ? "on" : "off")
        html.raw("</strong>.</p>\n")
        formStart(&html, action: "/find-my/account/settings", caller: caller)
        html.raw("<input type=\"hidden\" name=\"owntracks_friends\" value=\"")
        html.attribute(on ? "off" : "on")
        html.raw("\">\n<button type=\"submit\">")
        html.text(on ? "Stop showing them in OwnTracks" : "Show them in OwnTracks")
        html.raw("</button>\n</form>\n</section>\n")
    }

    func changeSettings(_ caller: Caller, _ fields: [String: String]) -> HTTPResponse {
        let on: Bool
        switch fields["owntracks_friends"] {
        case "on": on = true
        case "off": on = false
        default: return redirect("/find-my/account?error=invalid_setting")
        }
        do throws(APIError) {
            try identity.setOwnTracksFriends(userID: caller.userID, on, via: "panel")
            return redirect("/find-my/account?done=\(on ? "friends_on" : "friends_off")")
        } catch {
            return redirect("/find-my/account?error=failed")
        }
    }

    // MARK: /find-my/devices/{id}/settings

    static let settingsFlashes: [String: String] = [
        "shared": "The device is shared.",
        "revoked": "The share is revoked: that user no longer sees this device.",
        "retention": "The retention window is saved.",
        "erased":
            "The history is erased. The fixes left the database now and leave the log files at the next compaction.",
    ]
    static let settingsErrors: [String: String] = [
        "user_not_found": "There is no user with that name.",
        "self": "You see your own devices already; share with another user.",
        "invalid_until": "“Until” must be a time in the future (or empty: until you revoke it).",
        "share_not_found": "This device is not shared with that user.",
        "invalid_days": "Days must be a whole number from 1 to 36500, or empty for the default.",
        "invalid_range": "Choose a range: a start day before or equal to the end day.",
        "failed": "The change could not be stored. Nothing changed; try again.",
    ]

    func settingsPage(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let device = form.device
        var html = HTML()
        pageTop(&html, title: "Settings of \(device.name)", caller: caller)
        html.raw("<h2>Settings of ")
        html.name(device.name)
        html.raw("</h2>\n<p><a href=\"/find-my?selected=")
        html.attribute(String(device.id))
        html.raw("\">Back to the device</a></p>\n")
        flash(
            &html, request, done: Self.settingsFlashes.merging(Self.presenceFlashes) { a, _ in a },
            errors: Self.settingsErrors.merging(Self.presenceErrors) { a, _ in a })

        html.raw(
            "<section aria-labelledby=\"reporting-heading\">\n<h3 id=\"reporting-heading\">Reporting</h3>\n<p id=\"paused\">"
        )
        html.text(
            device.paused
                ? "Paused on the device: it sends nothing, and the server stores nothing from it, until it is resumed."
                : "On: the device reports its position.")
        html.raw(
            "</p>\n<p class=\"note\">The pause switch is on the device itself; the server shows it and cannot change it.</p>\n</section>\n"
        )

        sharesSection(&html, caller, form)
        retentionSection(&html, caller, form)
        presenceSection(&html, caller, form)
        eraseSection(&html, form)
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    func sharesSection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        let id = String(form.device.id)
        html.raw("<section aria-labelledby=\"shares-heading\">\n<h3 id=\"shares-heading\">Shared with</h3>\n")
        let shares = identity.shares(of: form.device.id)
        if shares.isEmpty {
            html.raw("<p id=\"no-shares\">Nobody: only you see this device.</p>\n")
        } else {
            html.raw(
                "<table id=\"shares\">\n<thead><tr><th scope=\"col\">User</th><th scope=\"col\">Until</th><th scope=\"col\">State</th><th scope=\"col\">May</th><th scope=\"col\"><span class=\"visually-hidden\">Revoke</span></th></tr></thead>\n<tbody>\n"
            )
            for share in shares {
                html.raw("<tr><td>")
                html.name(share.user)
                html.raw("</td><td>")
                if let until = share.untilMicros { utcTime(&html, until) } else { html.raw("until revoked") }
                html.raw("</td><td>")
                html.raw(share.active ? "active" : "expired")
                html.raw("</td><td class=\"permission\">")
                html.raw(share.mayLocate ? "see and locate" : "see only")
                html.raw("</td><td>")
                formStart(&html, action: "/find-my/devices/\(id)/shares/revoke", caller: caller, inline: true)
                html.raw("<input type=\"hidden\" name=\"user\" value=\"")
                html.attribute(share.user)
                html.raw(
                    "\">\n<button type=\"submit\">Revoke<span class=\"visually-hidden\"> the share with ")
                html.name(share.user)
                html.raw("</span></button>\n</form></td></tr>\n")
            }
            html.raw("</tbody>\n</table>\n")
        }
        html.raw("<h4>Share with someone</h4>\n")
        formStart(&html, action: "/find-my/devices/\(id)/shares", caller: caller)
        html.raw(
            """
            <label for="share-user">User name</label>
            <input id="share-user" name="user" autocomplete="off" autocapitalize="none" required>
            <label for="share-until">Until (UTC; optional, empty: until you revoke it)</label>
            <input id="share-until" name="until" type="datetime-local">
            <label for="share-permission">They may</label>
            <select id="share-permission" name="permission">
            <option value="see" selected>see it only</option>
            <option value="locate">see it, and locate it, play a sound, mark it as lost</option>
            </select>
            <button type="submit">Share</button>
            </form>
            <p class="note">They see this device's position and history while the share lasts, nothing more: they cannot share it on, change its retention or erase it. With "locate" they may also ask it to report now, ring or show it is lost; you see every such command and who sent it. Sharing again with the same user changes the until and the permission.</p>
            </section>

            """)
    }

    func retentionSection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        let (override, effective) = ingest.retentionDays(deviceID: form.device.id)
        html.raw(
            "<section aria-labelledby=\"retention-heading\">\n<h3 id=\"retention-heading\">Retention</h3>\n<p id=\"retention-now\">"
        )
        html.text(
            "Fixes are kept \(effective) day\(effective == 1 ? "" : "s"), "
                + (override == nil ? "the default window." : "this device's own setting."))
        html.raw("</p>\n")
        formStart(&html, action: "/find-my/devices/\(form.device.id)/retention", caller: caller)
        html.raw(
            """
            <label for="days">Days to keep (1 to 36500; empty: the default)</label>
            <input id="days" name="days" type="number" min="1" max="36500" inputmode="numeric" value="
            """)
        if let override { html.attribute(String(override)) }
        html.raw(
            """
            ">
            <button type="submit">Save</button>
            </form>
            <p class="note">Older fixes are deleted by the next compaction, from the database and from the log files.</p>
            </section>

            """)
    }

    func eraseSection(_ html: inout HTML, _ form: FormDevice) {
        html.raw(
            "<section aria-labelledby=\"erase-heading\">\n<h3 id=\"erase-heading\">Erase history</h3>\n<form method=\"get\" action=\""
        )
        html.attribute("/find-my/devices/\(form.device.id)/erase")
        html.raw(
            """
            ">
            <fieldset>
            <legend>What to erase</legend>
            <input type="radio" id="scope-all" name="scope" value="all" checked>
            <label for="scope-all" class="inline">Everything</label>
            <input type="radio" id="scope-range" name="scope" value="range">
            <label for="scope-range" class="inline">Fixes taken from one day to another</label>
            <label for="erase-from">From (UTC day, included)</label>
            <input id="erase-from" name="from" type="date">
            <label for="erase-to">To (UTC day, included)</label>
            <input id="erase-to" name="to" type="date">
            </fieldset>
            <button type="submit">Continue…</button>
            </form>
            <p class="note">The next page asks you to confirm; nothing is erased before.</p>
            </section>

            """)
    }

    // MARK: the settings' form posts

    func addShare(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let back = form.settingsPath
        var until: Int64?
        if let text = form.fields["until"], !text.isEmpty {
            guard let micros = Self.parseLocalUTC(text) else {
                return redirect(back + "?error=invalid_until")
            }
            until = micros
        }
        do throws(APIError) {
            let permission = form.fields["permission"].flatMap { SharePermission(rawValue: $0) } ?? .see
            _ = try identity.shareDevice(
                form.device.id, owner: caller.userID, withUser: form.fields["user"] ?? "", untilMicros: until,
                permission: permission)
            return redirect(back + "?done=shared")
        } catch {
            let code =
                switch error.code {
                case .userNotFound, .invalidUntil: error.code.rawValue
                case .invalidField: "self"
                default: "failed"
                }
            return redirect(back + "?error=" + code)
        }
    }

    func revokeShare(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        do throws(APIError) {
            _ = try identity.unshareDevice(form.device.id, fromUser: form.fields["user"] ?? "")
            return redirect(form.settingsPath + "?done=revoked")
        } catch {
            let code =
                [.userNotFound, .shareNotFound].contains(error.code) ? "share_not_found" : "failed"
            return redirect(form.settingsPath + "?error=" + code)
        }
    }

    func setRetention(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let text = (form.fields["days"] ?? "").trimmingCharacters(in: " ")
        var days: UInt32?
        if !text.isEmpty {
            guard let value = UInt32(text), value >= 1, value <= UInt32(IngestService.retentionDaysMax) else {
                return redirect(form.settingsPath + "?error=invalid_days")
            }
            days = value
        }
        do throws(APIError) {
            _ = try ingest.setRetention(deviceID: form.device.id, days: days)
            return redirect(form.settingsPath + "?done=retention")
        } catch {
            return redirect(form.settingsPath + "?error=failed")
        }
    }

    /// The range an erase form names: everything, or [start of `from` day, end of `to` day) in UTC.
    /// nil for a range form without valid days.
    static func eraseRange(scope: String?, from: String?, to: String?) -> (from: Int64?, to: Int64?)? {
        guard scope == "range" else { return (nil, nil) }
        guard let from, let to, let start = try? RFC3339.parseMicros(from + "T00:00:00Z"),
            let end = try? RFC3339.parseMicros(to + "T00:00:00Z"), start <= end
        else { return nil }
        return (start, end + 86_400_000_000)
    }

    func eraseConfirmation(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        let scope = request.query("scope")
        guard let range = Self.eraseRange(scope: scope, from: request.query("from"), to: request.query("to"))
        else { return redirect(form.settingsPath + "?error=invalid_range") }
        var html = HTML()
        pageTop(&html, title: "Erase history of \(form.device.name)", caller: caller)
        html.raw("<h2>Erase history of ")
        html.name(form.device.name)
        html.raw("?</h2>\n<p id=\"erase-what\">")
        if let from = range.from, let to = range.to {
            html.raw("The fixes taken from ")
            utcTime(&html, from)
            html.raw(" to ")
            utcTime(&html, to)
            html.raw(" will be erased.")
        } else {
            html.raw(
                "<strong>All</strong> of this device's history will be erased, its latest position included.")
        }
        html.raw(
            "</p>\n<p>This cannot be undone. The fixes leave the database at once and the log files at the next compaction; a backup taken earlier still holds them.</p>\n"
        )
        formStart(&html, action: "/find-my/devices/\(form.device.id)/erase", caller: caller)
        for (name, value) in [
            ("scope", scope ?? "all"), ("from", request.query("from") ?? ""),
            ("to", request.query("to") ?? ""),
        ] {
            html.raw("<input type=\"hidden\" name=\"")
            html.attribute(name)
            html.raw("\" value=\"")
            html.attribute(value)
            html.raw("\">\n")
        }
        html.raw("<button type=\"submit\" class=\"danger\">Erase history</button>\n</form>\n<p><a href=\"")
        html.attribute(form.settingsPath)
        html.raw("\">Cancel</a></p>\n")
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    func erase(_ request: HTTPRequest, _ caller: Caller, _ form: FormDevice) -> HTTPResponse {
        guard
            let range = Self.eraseRange(
                scope: form.fields["scope"], from: form.fields["from"], to: form.fields["to"])
        else { return redirect(form.settingsPath + "?error=invalid_range") }
        do throws(APIError) {
            _ = try ingest.eraseHistory(deviceID: form.device.id, fromMicros: range.from, toMicros: range.to)
            return redirect(form.settingsPath + "?done=erased")
        } catch {
            return redirect(form.settingsPath + "?error=failed")
        }
    }

    /// A `datetime-local` value (`2026-12-24T18:00`, with or without seconds) read as UTC, or a full
    /// RFC 3339 time.
    static func parseLocalUTC(_ text: String) -> Int64? {
        if let micros = try? RFC3339.parseMicros(text) { return micros }
        if text.count == 16, let micros = try? RFC3339.parseMicros(text + ":00Z") { return micros }
        if text.count == 19, let micros = try? RFC3339.parseMicros(text + "Z") { return micros }
        return nil
    }

    // MARK: page parts

    /// The header of the form pages: where you are, links to the devices, your account and (for an
    /// admin) the admin page, and the logout button.
    func pageTop(_ html: inout HTML, title: String, caller: Caller) {
        head(&html, title: title)
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
