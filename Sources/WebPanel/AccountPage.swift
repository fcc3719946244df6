import Events
import Geofences
import HTTP
import Identity
import Ingest
import JSON

/// /find-my/account: change your password, rotate your token, the Friends you share with and
/// your settings.
extension PanelService {
    static let accountFlashes: [String: String] = [
        "password": "Your password is changed. Your other sessions have ended; this one stays logged in.",
        "friends_on": "OwnTracks now shows the devices shared with you in its Friends view.",
        "friends_off": "OwnTracks no longer shows the devices shared with you.",
        "targets": "Your alert targets are saved.",
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
        "invalid_target":
            "An alert target must be an http:// or https:// address of a public host (or one the server's operator allows). Nothing changed.",
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
        flash(
            &html, request, done: Self.accountFlashes,
            errors: Self.accountErrors.merging(Self.foundNoticeErrors) { first, _ in first })
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
        alertTargetsSection(&html, caller)
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

    /// Where "notify when found" goes: two URL fields, both sent by the one form.
    func alertTargetsSection(_ html: inout HTML, _ caller: Caller) {
        let targets = identity.notifyTargets(userID: caller.userID)
        html.raw(
            """
            <section aria-labelledby="targets-heading">
            <h3 id="targets-heading">Alert targets</h3>
            <p>Where findmy tells you that a device you asked about ("Notify when found" on its card) reported again: an ntfy topic (the ntfy app shows it on your phone) and a webhook (a signed JSON POST; its secret is in <code>GET /api/find-my/account/settings</code>). Leave a field empty for none. You need at least one to use "Notify when found".</p>

            """)
        formStart(&html, action: "/find-my/account/settings", caller: caller)
        html.raw(
            "<label for=\"notify_ntfy_url\">ntfy topic URL</label>\n<input id=\"notify_ntfy_url\" name=\"notify_ntfy_url\" type=\"url\" placeholder=\"https://ntfy.sh/your-topic\" value=\""
        )
        html.attribute(targets.ntfyURL)
        html.raw(
            "\">\n<label for=\"notify_webhook_url\">Webhook URL</label>\n<input id=\"notify_webhook_url\" name=\"notify_webhook_url\" type=\"url\" placeholder=\"https://\" value=\""
        )
        html.attribute(targets.webhookURL)
        html.raw("\">\n")
        html.raw("<button type=\"submit\">Save alert targets</button>\n</form>\n</section>\n")
    }

    func changeSettings(_ caller: Caller, _ fields: [String: String]) -> HTTPResponse {
        if fields["owntracks_friends"] == nil,
            fields[UserSettingChanged.notifyNtfyURL] != nil
                || fields[UserSettingChanged.notifyWebhookURL] != nil
        {
            return changeAlertTargets(caller, fields)
        }
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

    func changeAlertTargets(_ caller: Caller, _ fields: [String: String]) -> HTTPResponse {
        let policy = ingest.limits.outgoingTargets
        do throws(APIError) {
            try identity.setNotifyTargets(
                userID: caller.userID, ntfyURL: fields[UserSettingChanged.notifyNtfyURL],
                webhookURL: fields[UserSettingChanged.notifyWebhookURL],
                checkURL: { url, field throws(APIError) in
                    try IdentityService.checkNotifyURL(url, field: field, policy: policy)
                }, via: "panel")
            return redirect("/find-my/account?done=targets")
        } catch {
            return redirect(
                "/find-my/account?error=\(error.code == .invalidField ? "invalid_target" : "failed")")
        }
    }
}
