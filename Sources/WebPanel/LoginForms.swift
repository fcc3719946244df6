import Crypto
import HTTP
import Identity

/// The web panel's login page and the form side of `POST /login` and `POST /logout`: the login
/// form with its double-submit cookie, and the logout button, both answered with redirects.
/// Identity answers the same two routes for programs (JSON) and keeps the sessions, the password
/// check and the session cookie; it hands a form post here (`IdentityService.answerLoginForms`).
public struct LoginForms: PanelLoginForms {
    /// The double-submit cookie of the panel's login form: `GET /login` sets it to a random value
    /// and puts the same value in the form's `csrf` field; a form login whose field does not match
    /// the cookie is refused. (Before a login there is no session to hold a token.)
    public static let csrfCookieName = "findmy_login_csrf"

    let identity: IdentityService

    public init(identity: IdentityService) { self.identity = identity }

    // MARK: GET /login

    func loginPage(_ request: HTTPRequest) -> HTTPResponse {
        let next = request.query("next").flatMap { $0.hasPrefix("/find-my") ? $0 : nil } ?? "/find-my"
        if identity.sessionCSRFToken(request) != nil, request.query("error") == nil {
            var response = HTTPResponse(status: 303)
            response.headers.set("Location", "/find-my")
            return response
        }
        let csrf = Token.generate()
        var html = HTML()
        head(&html, title: "Log in")
        html.raw("<main id=\"main\" class=\"login\">\n<h1>findmy</h1>\n<h2>Log in</h2>\n")
        switch request.query("error") {
        case nil: break
        case "expired_form":
            html.raw("<p class=\"error\" role=\"alert\">The form had expired. Please try again.</p>\n")
        case "too_many_attempts":
            html.raw(
                "<p class=\"error\" role=\"alert\">Too many attempts for this name. Wait a minute and try again.</p>\n"
            )
        case "busy":
            html.raw("<p class=\"error\" role=\"alert\">The server is busy. Try again in a second.</p>\n")
        default:
            html.raw("<p class=\"error\" role=\"alert\">The name or the password is wrong.</p>\n")
        }
        if request.query("logged_out") != nil {
            html.raw("<p role=\"status\">You are logged out.</p>\n")
        }
        html.raw("<form method=\"post\" action=\"/login\">\n<input type=\"hidden\" name=\"csrf\" value=\"")
        html.attribute(csrf)
        html.raw("\">\n<input type=\"hidden\" name=\"next\" value=\"")
        html.attribute(next)
        html.raw(
            """
            ">
            <label for="name">Name</label>
            <input id="name" name="name" autocomplete="username" autocapitalize="none" required autofocus>
            <label for="password">Password</label>
            <input id="password" name="password" type="password" autocomplete="current-password" required>
            <button type="submit">Log in</button>
            </form>
            </main>
            </body>
            </html>

            """)
        var response = pageResponse(html, tileSource: "'none'")
        response.headers.add(
            "Set-Cookie",
            "\(Self.csrfCookieName)=\(csrf); Path=/; Max-Age=3600; HttpOnly; SameSite=Strict")
        return response
    }

    // MARK: POST /login from the form

    /// `name` and `password` from the login form, with its `csrf` field (and `next`, where to go
    /// after). Identity has refused a post from another site's page already.
    public func login(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        var values: [String: String] = [:]
        for item in parseForm(request.body) {
            guard ["name", "password", "csrf", "next"].contains(item.name) else {
                throw .badRequest(
                    .unknownField,
                    "login takes the fields name and password (and the panel's csrf and next), not '\(item.name.prefix(32))'"
                )
            }
            guard values.updateValue(item.value, forKey: item.name) == nil else {
                throw .badRequest(.unknownField, "\(item.name) is given twice")
            }
        }
        guard let name = values["name"], let password = values["password"] else {
            throw .badRequest(.missingField, "login needs both name and password")
        }
        // Another site's page can post a form; only the panel's login page has the csrf field
        // that matches its cookie.
        guard let csrf = values["csrf"] else {
            throw APIError(
                status: 403, code: .csrfFieldMissing,
                message:
                    "a form login must carry the csrf field of the login page (GET /login), equal to its findmy_login_csrf cookie; programs log in with Content-Type: application/json"
            )
        }
        return panelLogin(request, name: name, password: password, csrf: csrf, next: values["next"])
    }

    /// A login from the panel's form answers with redirects, never JSON: to `next` (a `/find-my` URL
    /// only, so the form cannot be used to send someone elsewhere) with the session cookie, or back
    /// to `/login?error=CODE`.
    func panelLogin(_ request: HTTPRequest, name: String, password: String, csrf: String, next: String?)
        -> HTTPResponse
    {
        let next = next.flatMap { Self.isPanelPath($0) ? $0 : nil } ?? "/find-my"
        func back(_ code: String) -> HTTPResponse {
            redirect("/login?error=\(code)&next=\(percentEncoded(next))")
        }
        guard let expected = identity.namedCookie(request, Self.csrfCookieName),
            constantTimeEqual(expected, csrf)
        else { return back("expired_form") }
        let session: IdentityService.LoginSession
        do throws(APIError) {
            switch try identity.startSession(name: name, password: password, request: request) {
            case .refused(let response):
                return back(response.status == 429 ? "too_many_attempts" : "busy")
            case .started(let started): session = started
            }
        } catch {
            return back(error.code.rawValue)
        }
        var response = redirect(next)
        response.headers.add(
            "Set-Cookie",
            identity.cookie(
                session.token, maxAgeSeconds: identity.limits.sessionAgeSecondsMax,
                secure: identity.cookieSecure(request)))
        response.headers.add(
            "Set-Cookie", "\(Self.csrfCookieName)=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
        return response
    }

    /// A path of the panel, safe to redirect to: `/find-my` or a page under `/find-my/`, optionally
    /// with a query, and nothing
    /// that a browser could read as another host (a backslash) or another header (CR, LF): printable
    /// ASCII only. `//` cannot follow the fixed `/find-my` prefix.
    static func isPanelPath(_ path: String) -> Bool {
        (path == "/find-my" || path.hasPrefix("/find-my?") || path.hasPrefix("/find-my/"))
            && !path.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 < 0x21 || $0 > 0x7E })
    }

    // MARK: POST /logout from the form

    /// The panel's logout button must carry the session's CSRF token and is answered with a redirect
    /// to the login page.
    public func logout(_ request: HTTPRequest) -> HTTPResponse {
        if let expected = identity.sessionCSRFToken(request) {
            let sent = parseForm(request.body).first { $0.name == "csrf" }?.value ?? ""
            guard constantTimeEqual(expected, sent) else {
                var refused = HTTPResponse.text(
                    "This form has expired. Go back, reload the page and log out again.", status: 403)
                refused.headers.set("Cache-Control", "no-store")
                return refused
            }
        }
        identity.endSession(request)
        var response = redirect("/login?logged_out=1")
        response.headers.add(
            "Set-Cookie", identity.cookie("", maxAgeSeconds: 0, secure: identity.cookieSecure(request)))
        return response
    }
}

/// A 303 to `location`, never cached: every form's answer.
func redirect(_ location: String) -> HTTPResponse {
    var response = HTTPResponse(status: 303)
    response.headers.set("Location", location)
    response.headers.set("Cache-Control", "no-store")
    return response
}
