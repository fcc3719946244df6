import Core
import Crypto
import Events
import HTTP
import JSON

/// Login and sessions, passwords and roles, and the admin listing of users (sharing: Sharing.swift).
/// docs/api.md documents the routes; docs/privacy.md what they mean for who sees whom.
extension IdentityService {
    public static let sessionCookieName = "findmy_session"

    /// `alertTargets`: how the settings' alert target URLs are checked and the secret of a user's
    /// webhook (Geofences' `alertTargetRules`); nil, the settings refuse alert targets.
    public func addAccountRoutes(to router: inout GuardedRouter, alertTargets: AlertTargetRules? = nil) {
        router.add("POST", "/login") { [self] request, _ in
            respond { () throws(APIError) in try login(request) }
        }
        router.add("POST", "/logout") { [self] request, _ in logout(request) }
        router.add("GET", "/api/find-my/devices/{id}/shares") { [self] _, caller in listShares(caller) }
        router.add("POST", "/api/find-my/devices/{id}/shares") { [self] request, caller in
            respond { () throws(APIError) in try grantShare(request, caller) }
        }
        router.add("DELETE", "/api/find-my/devices/{id}/shares/{user}") { [self] request, caller in
            respond { () throws(APIError) in try revokeShare(request, caller) }
        }
        router.add("GET", "/api/find-my/admin/users") { [self] _, _ in .json(usersJSON()) }
        addTokenRoutes(to: &router)
        addSettingsRoutes(to: &router, alertTargets: alertTargets)
        addFoundNoticeRoutes(to: &router)
    }

    public func addAccountAdminRoutes(to router: inout GuardedRouter) {
        addTokenAdminRoutes(to: &router)
        router.add("GET", "/admin/users") { [self] _, _ in .json(usersJSON()) }
        router.add("POST", "/admin/users") { [self] request, _ in
            respond { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["name", "admin"])
                let name = try field { () throws(JSONAccessError) in try object.string("name") }
                let admin =
                    try field { () throws(JSONAccessError) in try object.boolIfPresent("admin") } ?? false
                let created = try createUser(name: name, role: admin ? .admin : .member)
                return tokenAnswer(
                    userID: created.userID, token: created.token, offset: created.offset, status: 201)
            }
        }
        router.add("POST", "/admin/users/{name}/password") { [self] request, _ in
            respond { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["password"])
                let password = try field { () throws(JSONAccessError) in try object.string("password") }
                let offset = try setPassword(name: request.pathParameters["name"] ?? "", password: password)
                return .json("{\"offset\": \(offset)}")
            }
        }
        router.add("POST", "/admin/users/{name}/role") { [self] request, _ in
            respond { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["role"])
                let text = try field { () throws(JSONAccessError) in try object.string("role") }
                guard let role = Role(name: text) else {
                    throw .badRequest(
                        .invalidField, "role must be admin or member, got '\(text.prefix(32))'")
                }
                let offset = try changeRole(name: request.pathParameters["name"] ?? "", role: role)
                return .json("{\"offset\": \(offset)}")
            }
        }
    }

    // MARK: login

    static let invalidCredentials = APIError(
        status: 401, code: .invalidCredentials, message: "the name or the password is wrong")

    /// A login from another site's page is refused whatever it carries (login CSRF: it would log
    /// the browser into the attacker's account); so is a body that is neither JSON nor a form. A
    /// form is the web panel's (`answerLoginForms`).
    func login(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        if case .foreign(let origin) = originVerdict(request) { throw crossOriginRefusal(origin, request) }
        if mediaType(request) == "application/x-www-form-urlencoded", let forms = loginForms.withLock({ $0 })
        {
            return try forms.login(request)
        }
        let credentials = try self.credentials(request)
        let session: LoginSession
        switch try startSession(name: credentials.name, password: credentials.password, request: request) {
        case .refused(let response): return response
        case .started(let started): session = started
        }
        var writer = JSONWriter(capacity: 160)
        writer.beginObject()
        writer.key("user")
        writer.string(session.user.name)
        writer.key("role")
        writer.string(session.user.role.name)
        writer.key("expires_at")
        writer.string(RFC3339.formatMicros(session.nowMicros + limits.sessionAgeMicros))
        writer.key("idle_seconds_max")
        writer.int64(Int64(limits.sessionIdleSecondsMax))
        // For a program that keeps the cookie: its changes through the API need it (X-CSRF-Token).
        writer.key("csrf_token")
        writer.string(session.csrfToken)
        writer.endObject()
        var response = HTTPResponse.json(writer.bytes)
        response.headers.add(
            "Set-Cookie",
            cookie(session.token, maxAgeSeconds: limits.sessionAgeSecondsMax, secure: cookieSecure(request)))
        return response
    }

    package struct LoginSession {
        package var user: Registry.User
        package var token: String
        package var csrfToken: String
        package var nowMicros: Int64
    }

    package enum LoginOutcome {
        case started(LoginSession)
        /// Throttled (429) or too busy (503): the API answer, with its Retry-After.
        case refused(HTTPResponse)
    }

    /// Checks the password and starts a session; throws `invalidCredentials` for a wrong name or
    /// password. In order, each refusal answered before any password check and counted only where
    /// it says: the client address's attempts (`loginAttemptsPerAddressPerMinuteMax`, counted), a
    /// free password-check slot (`passwordChecksConcurrentMax`; "busy" counts against nothing), the
    /// name's failures from several addresses (`loginFailuresPerNamePerMinuteMax`, not counted),
    /// the name's attempts from this address (`loginAttemptsPerMinuteMax`, counted), then one
    /// Argon2id check, whose failure counts for the name.
    package func startSession(name: String, password: String, request: HTTPRequest) throws(APIError)
        -> LoginOutcome
    {
        let now = clockMicros()
        let address = clientAddress(request)
        if case .refused(let retryAfter, let first) = doorLimits.loginsPerAddress.admit(
            address, nowMicros: now)
        {
            if first {
                StructuredLog.info(
                    "login_attempts_limited", ["address": .string(address), "by": .string("address")])
            }
            return .refused(
                Self.throttled(
                    .tooManyAttemptsFromAddress,
                    "more than \(limits.loginAttemptsPerAddressPerMinuteMax) login attempts from your address within a minute; wait \(retryAfter) s",
                    retryAfterSeconds: retryAfter))
        }
        guard let slot = PasswordCheckSlot(self) else {
            var response = APIError(
                status: 503, code: .busy, message: "too many logins at once; retry in a second"
            ).response
            response.headers.set("Retry-After", "1")
            return .refused(response)
        }
        defer { slot.release() }
        if let refusal = nameRefusal(name, address: address, nowMicros: now) {
            return .refused(
                Self.throttled(
                    .tooManyAttempts, refusal.message, retryAfterSeconds: refusal.retryAfterSeconds))
        }
        let user = store.registry.read { $0.registry.user(named: name) }
        // An unknown name, or a user without a password, costs one full Argon2id check too, so the
        // time of the answer does not tell whether the name exists; the answer itself never does.
        let matches = PasswordHash.verify(password, against: user?.passwordHash ?? PasswordHash.decoy)
        guard let user, user.passwordHash != nil, matches else {
            doorLimits.loginFailuresPerName.record(throttleKey(name), address: address, nowMicros: now)
            StructuredLog.info(
                "login_failed", ["name": .string(StructuredLog.sanitized(name)), "address": .string(address)])
            throw Self.invalidCredentials
        }
        let token = sessions.create(userID: user.id, nowMicros: now)
        let csrfToken = sessions.csrfToken(token: token, nowMicros: now) ?? ""
        StructuredLog.info("login", ["user_id": .int(Int64(user.id)), "address": .string(address)])
        return .started(LoginSession(user: user, token: token, csrfToken: csrfToken, nowMicros: now))
    }

    // MARK: the session cookie and the web panel's forms

    /// Hands form posts to `POST /login` and `POST /logout` to the web panel (`WebPanel.LoginForms`),
    /// which answers them with redirects; without it a form login is refused like any body that is
    /// not JSON.
    public func answerLoginForms(with forms: any PanelLoginForms) { loginForms.withLock { $0 = forms } }

    /// The CSRF token of the request's live login session, for the panel's forms; nil without one.
    public func sessionCSRFToken(_ request: HTTPRequest) -> String? {
        guard let token = sessionCookie(request) else { return nil }
        return sessions.csrfToken(token: token, nowMicros: clockMicros())
    }

    /// `name` and `password` from a JSON object; any other body is refused (a form is the panel's).
    func credentials(_ request: HTTPRequest) throws(APIError) -> (name: String, password: String) {
        let type = mediaType(request)
        // text/plain in particular: another site's page can send it without asking (no preflight).
        guard type == "application/json" else {
            throw APIError(
                status: 415, code: .unsupportedMediaType,
                message:
                    "log in with Content-Type: application/json and {\"name\": ..., \"password\": ...}, or with the web panel's form; got '\(type.isEmpty ? "no Content-Type" : String(type.prefix(64)))'"
            )
        }
        let object = try parseObject(request.body, allowed: ["name", "password"])
        let name = try field { () throws(JSONAccessError) in try object.string("name") }
        let password = try field { () throws(JSONAccessError) in try object.string("password") }
        return (name, password)
    }

    /// A form post (the panel's logout button) is the web panel's (`answerLoginForms`); any other
    /// post answers JSON.
    func logout(_ request: HTTPRequest) -> HTTPResponse {
        let isForm =
            request.headers["Content-Type"]?.lowercased().hasPrefix("application/x-www-form-urlencoded")
            ?? false
        if isForm, let forms = loginForms.withLock({ $0 }) { return forms.logout(request) }
        // A program's logout is held to the API's rule for the cookie (X-CSRF-Token, our Origin), so
        // that another site cannot end a user's session either. A cookie of no live session has
        // nothing left to protect. The cookie is looked up once, for the check and the end alike.
        if let token = sessionCookie(request) {
            let hash = sessions.lookups.hash(token)
            if request.headers["Authorization"] == nil,
                let expected = sessions.csrfToken(hash: hash, nowMicros: clockMicros()),
                let refusal = cookieCSRFRefusal(request, expected: expected)
            {
                return refusal.response
            }
            sessions.end(hash: hash)
        }
        var response = HTTPResponse.json("{\"logged_out\": true}")
        response.headers.add("Set-Cookie", cookie("", maxAgeSeconds: 0, secure: cookieSecure(request)))
        return response
    }

    /// Ends the session whose cookie the request carries, if any.
    package func endSession(_ request: HTTPRequest) {
        if let token = sessionCookie(request) { sessions.end(token: token) }
    }

    /// Secure when the request came over TLS, which findmy learns from the proxy that terminated it
    /// (`X-Forwarded-Proto: https`), or always with `--cookie-secure on`.
    package func cookieSecure(_ request: HTTPRequest) -> Bool {
        limits.cookieSecure || request.headers["X-Forwarded-Proto"]?.lowercased() == "https"
    }

    package func cookie(_ value: String, maxAgeSeconds: Int, secure: Bool) -> String {
        "\(Self.sessionCookieName)=\(value); Path=/; Max-Age=\(maxAgeSeconds); HttpOnly; SameSite=Strict"
            + (secure ? "; Secure" : "")
    }

    /// The value of the `findmy_session` cookie, if the request carries one.
    func sessionCookie(_ request: HTTPRequest) -> String? { namedCookie(request, Self.sessionCookieName) }

    /// The value of cookie `name`, if the request carries a non-empty one.
    public func namedCookie(_ request: HTTPRequest, _ name: String) -> String? {
        for header in request.headers.values("Cookie") {
            for pair in header.split(separator: ";") {
                let trimmed = pair.trimmingSpaces
                guard let equals = trimmed.firstIndex(of: "=") else { continue }
                if trimmed[..<equals] == name {
                    let value = String(trimmed[trimmed.index(after: equals)...])
                    return value.isEmpty ? nil : value
                }
            }
        }
        return nil
    }

    // MARK: passwords and roles (admin socket, `findmy user passwd` and `findmy user role`)

    /// Stores the Argon2id hash of `password` for user `name`, and ends the user's sessions except
    /// the one whose cookie is `keepingSession` (the panel's account page: whoever changed their own
    /// password stays logged in in that browser; every other session ends).
    public func setPassword(name: String, password: String, keepingSession: String? = nil) throws(APIError)
        -> UInt64
    {
        guard password.utf8.count >= limits.passwordBytesMin,
            password.utf8.count <= PasswordHash.passwordBytesMax
        else {
            throw .badRequest(
                .invalidField,
                "the password must be \(limits.passwordBytesMin) to \(PasswordHash.passwordBytesMax) bytes")
        }
        let hash = PasswordHash.hash(password)
        let (userID, offset) = try store.mutations.withLock { _ throws(APIError) -> (UInt64, UInt64) in
            let user = try existingUser(name)
            return (
                user.id,
                try appendAndApply(
                    .userPasswordSet(UserPasswordSet(userID: user.id, passwordHash: hash)),
                    receivedAtMicros: clockMicros())
            )
        }
        sessions.endAll(userID: userID, except: keepingSession)
        StructuredLog.info("user_password_set", ["user_id": .int(Int64(userID))])
        return offset
    }

    /// The panel's "change your password": the caller's current password is checked like a login
    /// (the same throttle per name, the same bound on concurrent Argon2id checks), then the new one
    /// is stored by `setPassword`, the path `findmy user passwd` takes. The request's own session
    /// stays; every other session of the user ends.
    public func changeOwnPassword(_ request: HTTPRequest, _ caller: GateCaller, current: String, new: String)
        throws(APIError) -> UInt64
    {
        let userID = caller.userID
        guard let user = store.registry.read({ $0.registry.users[userID] }) else {
            throw Self.invalidCredentials
        }
        // A slot first: "busy" must not count against the name (see startSession).
        guard let slot = PasswordCheckSlot(self) else {
            throw APIError(
                status: 503, code: .busy, message: "too many password checks at once; retry in a second")
        }
        let now = clockMicros()
        let address = clientAddress(request)
        if let refusal = nameRefusal(user.name, address: address, nowMicros: now) {
            slot.release()
            throw APIError(status: 429, code: .tooManyAttempts, message: refusal.message)
        }
        let matches = PasswordHash.verify(current, against: user.passwordHash ?? PasswordHash.decoy)
        guard user.passwordHash != nil, matches else {
            slot.release()
            doorLimits.loginFailuresPerName.record(throttleKey(user.name), address: address, nowMicros: now)
            throw Self.invalidCredentials
        }
        // The new password's hash holds the slot too: every Argon2id computation a request starts
        // counts against passwordChecksConcurrentMax, each one's 64 MiB included.
        defer { slot.release() }
        return try setPassword(name: user.name, password: new, keepingSession: sessionCookie(request))
    }

    /// Why a password check for `name` from `address` is refused now, if it is: the name's recent
    /// failures from several addresses (checked, not counted), then this address's attempts for
    /// the name (counted when allowed). Logged once a window.
    func nameRefusal(_ name: String, address: String, nowMicros: Int64)
        -> (message: String, retryAfterSeconds: Int)?
    {
        let key = throttleKey(name)
        let by: String
        let message: String
        let retryAfter: Int
        let first: Bool
        if case .refused(let seconds, let isFirst) = doorLimits.loginFailuresPerName.check(
            key, nowMicros: nowMicros)
        {
            (by, retryAfter, first) = ("name", seconds, isFirst)
            message =
                "\(limits.loginFailuresPerNamePerMinuteMax) failed logins for this name from \(limits.loginFailureAddressesPerNameMin) or more addresses within a minute; wait \(seconds) s"
        } else if case .refused(let seconds, let isFirst) = doorLimits.loginsPerNameAndAddress.admit(
            address + "\n" + key, nowMicros: nowMicros)
        {
            (by, retryAfter, first) = ("name_and_address", seconds, isFirst)
            message =
                "more than \(limits.loginAttemptsPerMinuteMax) login attempts for this name from your address within a minute; wait \(seconds) s"
        } else {
            return nil
        }
        if first {
            StructuredLog.info(
                "login_attempts_limited",
                [
                    "address": .string(address), "by": .string(by),
                    "name": .string(StructuredLog.sanitized(name)),
                ])
        }
        return (message, retryAfter)
    }

    /// The role of a user, or nil for an unknown id.
    public func role(of userID: UInt64) -> Role? { store.registry.read { $0.registry.users[userID]?.role } }

    /// Whether a panel form post carries its session's CSRF token in field `csrf` and comes from no
    /// other site's page (`Origin`, which the panel's `Referrer-Policy: same-origin` lets browsers
    /// send). A request without a live session has no token to match and is refused.
    public func formCSRFMatches(_ request: HTTPRequest, _ caller: GateCaller, sent: String?) -> Bool {
        if case .foreign = originVerdict(request) { return false }
        guard let expected = caller.sessionCSRFToken, let sent else { return false }
        return constantTimeEqual(expected, sent)
    }

    public func changeRole(name: String, role: Role) throws(APIError) -> UInt64 {
        try store.mutations.withLock { _ throws(APIError) -> UInt64 in
            let user = try existingUser(name)
            let offset = try appendAndApply(
                .userRoleChanged(UserRoleChanged(userID: user.id, role: role)),
                receivedAtMicros: clockMicros())
            StructuredLog.info(
                "user_role_changed", ["user_id": .int(Int64(user.id)), "role": .string(role.name)])
            return offset
        }
    }

    func existingUser(_ name: String) throws(APIError) -> Registry.User {
        guard let user = store.registry.read({ $0.registry.user(named: name) }) else {
            throw APIError(status: 404, code: .userNotFound, message: "no user named '\(name.prefix(64))'")
        }
        return user
    }

    /// Users by id with name, role, whether a password is set, and their device count. No locations.
    public func usersJSON() -> [UInt8] {
        let registry = registrySnapshot
        // One pass over the devices, not one per user: the listing stays linear in users + devices.
        var deviceCounts: [UInt64: Int] = [:]
        for device in registry.devices.values { deviceCounts[device.userID, default: 0] += 1 }
        var writer = JSONWriter(capacity: 256 + registry.users.count * 96)
        writer.beginObject()
        writer.key("users")
        writer.beginArray()
        for user in registry.users.values.sorted(by: { $0.id < $1.id }) {
            writer.beginObject()
            writer.key("id")
            writer.int64(Int64(user.id))
            writer.key("name")
            writer.string(user.name)
            writer.key("role")
            writer.string(user.role.name)
            writer.key("has_password")
            writer.bool(user.passwordHash != nil)
            writer.key("devices")
            writer.int64(Int64(deviceCounts[user.id] ?? 0))
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }
}

extension Role {
    public var name: String { self == .admin ? "admin" : "member" }
    public init?(name: String) {
        switch name {
        case "admin": self = .admin
        case "member": self = .member
        default: return nil
        }
    }
}
