import Core
import Crypto
import HTTP

/// Who may call a route. Every route of the server has exactly one entry in
/// `RoutePermissions.table`; `GuardedRouter` refuses to build a router with a route that has none,
/// so a new endpoint cannot be added without deciding who may call it.
public enum Permission: Equatable, Sendable, CustomStringConvertible {
    /// Anyone, without credentials (health, metrics, login, logout).
    case open
    /// A device token.
    case device
    /// A device token carried the way an app can (docs/clients.md): HTTP Basic with the device
    /// owner's user name and the token as password, `Bearer`, or the query parameter `token`,
    /// `api_key`, `id` or `deviceid`. A refusal carries `WWW-Authenticate: Basic`.
    case appDevice
    /// As `appDevice`, or, when the header and query carry no token, a token in the request body
    /// (the OsmAnd protocol's form `id` and JSON `device_id`): the gate then passes with no caller,
    /// and the handler reads the body's token with `appDevice(token:userName:)`, counting a failure
    /// with `recordAppAuthFailure`. The session cookie is no credential here, so no CSRF check.
    case appDeviceOrBody
    /// A user: a user API token or a login session.
    case user
    /// A page of the web panel: a user, exactly like `.user`, except that a browser without a
    /// valid session is sent to the login page (303) instead of getting a JSON 401.
    case page
    /// A user who may read the device in path parameter `id`: its owner, or a user it is shared
    /// with while the share is active. Anyone else gets the same 404 as for a missing device.
    case viewer
    /// The owner of the device in path parameter `id`; anyone else gets the 404 of a missing device.
    case owner
    /// A user who may send commands to the device in path parameter `id`: its owner, or a user it
    /// is shared with, while the share is active, with the locate permission (`Registry.mayCommand`).
    /// Anyone else, an administrator too, gets the same 404 as for a missing device.
    case locator
    /// A user whose role is admin (managing users and devices, never reading locations).
    case admin
    /// The owner-only unix socket DATA_DIR/admin.sock; such a route is never served over the network.
    case adminSocket

    public var description: String {
        switch self {
        case .open: "open"
        case .device: "device"
        case .appDevice: "appDevice"
        case .appDeviceOrBody: "appDeviceOrBody"
        case .user: "user"
        case .page: "page"
        case .viewer: "viewer"
        case .owner: "owner"
        case .locator: "locator"
        case .admin: "admin"
        case .adminSocket: "adminSocket"
        }
    }
}

public struct RouteKey: Hashable, Sendable, CustomStringConvertible {
    public var method: String
    public var pattern: String
    public init(_ method: String, _ pattern: String) {
        self.method = method
        self.pattern = pattern
    }
    public var description: String { "\(method) \(pattern)" }
}

public enum RoutePermissions {
    /// THE table. Adding a route: add its line here, in the section of the module that serves it.
    /// docs/privacy.md prints the same table for people.
    public static let table: [RouteKey: Permission] = [
        // Ingest (Sources/Ingest/Handlers.swift)
        RouteKey("POST", "/api/find-my/devices"): .user,
        RouteKey("POST", "/api/find-my/push-tokens"): .device,
        RouteKey("POST", "/api/find-my/reporting"): .device,
        RouteKey("POST", "/api/find-my/report"): .device,
        RouteKey("GET", "/healthz"): .open,
        RouteKey("GET", "/metrics"): .open,
        // The apps people already run (Sources/Clients, docs/clients.md)
        RouteKey("POST", "/api/find-my/owntracks"): .appDevice,
        // Overland and the OsmAnd protocol (Sources/Clients, docs/clients.md); the second Overland
        // path is where GPSLogger's Overland-format sender posts (BASE/api/v1/overland/batches).
        RouteKey("POST", "/api/find-my/overland"): .appDevice,
        RouteKey("POST", "/api/v1/overland/batches"): .appDevice,
        RouteKey("GET", "/api/find-my/osmand"): .appDeviceOrBody,
        RouteKey("POST", "/api/find-my/osmand"): .appDeviceOrBody,
        // Login, sessions, sharing, users (Sources/Identity/Accounts.swift, Sharing.swift)
        RouteKey("POST", "/login"): .open,
        RouteKey("POST", "/logout"): .open,  // ends only the session its own cookie names
        RouteKey("GET", "/api/find-my/devices/{id}/shares"): .owner,
        RouteKey("POST", "/api/find-my/devices/{id}/shares"): .owner,
        RouteKey("DELETE", "/api/find-my/devices/{id}/shares/{user}"): .owner,
        RouteKey("GET", "/api/find-my/admin/users"): .admin,
        RouteKey("POST", "/api/find-my/account/token"): .user,  // one's own token (TokenRotation.swift)
        RouteKey("GET", "/api/find-my/account/settings"): .user,  // one's own settings (UserSettings.swift)
        RouteKey("PUT", "/api/find-my/account/settings"): .user,
        // "Notify when found" on one's own device (FoundNoticeRoutes.swift)
        RouteKey("PUT", "/api/find-my/devices/{id}/notify-when-found"): .owner,
        // Its delivery log (Sources/Geofences/AlertRoutes.swift): the owner's targets, so the owner's
        // alone, as the arming is; a user the device is shared with gets the 404 of a missing device.
        RouteKey("GET", "/api/find-my/devices/{id}/found-notices/deliveries"): .owner,
        // The read API (Sources/ReadAPI)
        RouteKey("GET", "/api/find-my/devices"): .user,  // filtered to what the caller may see
        RouteKey("GET", "/api/find-my/devices/{id}"): .viewer,
        RouteKey("GET", "/api/find-my/devices/{id}/locations"): .viewer,
        RouteKey("GET", "/api/find-my/devices/{id}/arrivals"): .viewer,
        RouteKey("GET", "/api/find-my/devices/{id}/export"): .viewer,  // the history's range, as a file
        RouteKey("GET", "/api/find-my/devices/{id}/stays"): .viewer,  // stays and moves of a range
        RouteKey("GET", "/api/find-my/devices/{id}/transitions"): .viewer,
        // Which files came into the device: its owner's alone (ReadAPI/DeviceImports.swift).
        RouteKey("GET", "/api/find-my/devices/{id}/imports"): .owner,
        RouteKey("GET", "/api/find-my/admin/devices"): .admin,
        // Commands to devices (Sources/Commands, docs/commands.md)
        RouteKey("POST", "/api/find-my/devices/{id}/commands"): .locator,
        RouteKey("GET", "/api/find-my/devices/{id}/commands"): .locator,
        RouteKey("GET", "/api/find-my/devices/{id}/commands/{command_id}"): .locator,
        // The device's own command stream (Sources/Commands/CommandStreams.swift)
        RouteKey("GET", "/api/find-my/device/commands/stream"): .device,
        // Presence from the tailnet (Sources/Presence, docs/presence.md)
        RouteKey("GET", "/api/find-my/presence/nodes"): .user,  // only the caller's own nodes
        RouteKey("PUT", "/api/find-my/devices/{id}/presence"): .owner,
        RouteKey("DELETE", "/api/find-my/devices/{id}/presence"): .owner,
        // Geofences (Sources/Geofences/GeofenceRoutes.swift; transitions: Sources/ReadAPI). A fence is
        // its owner's: the handler answers anyone else the 404 of a missing fence.
        RouteKey("POST", "/api/find-my/geofences"): .user,
        RouteKey("GET", "/api/find-my/geofences"): .user,
        RouteKey("GET", "/api/find-my/geofences/{id}"): .user,
        RouteKey("PUT", "/api/find-my/geofences/{id}"): .user,
        RouteKey("DELETE", "/api/find-my/geofences/{id}"): .user,
        RouteKey("GET", "/api/find-my/geofences/{id}/transitions"): .user,
        // Notifications (Sources/Geofences): the fence's owner alone, as above.
        RouteKey("GET", "/api/find-my/geofences/{id}/notifications"): .user,
        RouteKey("PUT", "/api/find-my/geofences/{id}/notifications"): .user,
        RouteKey("GET", "/api/find-my/geofences/{id}/deliveries"): .user,
        // The web panel (Sources/WebPanel): pages need a login, their static files do not
        RouteKey("GET", "/find-my"): .page,  // shows only what the caller may see
        RouteKey("GET", "/login"): .open,
        // The panel's forms (Sources/WebPanel/FormPages.swift, AdminPage.swift). Each handler checks
        // more than the gate, and answers with a page rather than JSON: a device page answers the
        // panel's "Device not found" (404) unless the caller owns the device; an admin page a plain
        // 403 page unless the caller's role is admin; every POST the session's CSRF token (403).
        RouteKey("GET", "/find-my/account"): .page,
        RouteKey("POST", "/find-my/account/password"): .page,
        RouteKey("POST", "/find-my/account/token"): .page,
        RouteKey("POST", "/find-my/account/settings"): .page,
        RouteKey("GET", "/find-my/devices/{id}/settings"): .page,  // owner only, in the handler
        RouteKey("GET", "/find-my/devices/new"): .page,  // "Add a device": for the caller only
        RouteKey("POST", "/find-my/devices/new"): .page,
        RouteKey("POST", "/find-my/devices/{id}/shares"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/shares/revoke"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/retention"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/presence"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/ntfy"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/notify-when-found"): .page,  // owner only
        RouteKey("GET", "/find-my/devices/{id}/erase"): .page,  // owner only: the confirmation step
        RouteKey("POST", "/find-my/devices/{id}/erase"): .page,  // owner only
        RouteKey("GET", "/find-my/admin"): .page,  // admin role only, in the handler
        RouteKey("POST", "/find-my/admin/users"): .page,  // admin role only
        RouteKey("POST", "/find-my/admin/users/role"): .page,  // admin role only
        RouteKey("GET", "/static/panel.js"): .open,
        RouteKey("GET", "/static/import.js"): .open,
        RouteKey("GET", "/static/panel.css"): .open,
        RouteKey("GET", "/static/leaflet/leaflet.js"): .open,
        RouteKey("GET", "/static/leaflet/leaflet.css"): .open,
        RouteKey("GET", "/static/panel-map.js"): .open,
        RouteKey("GET", "/static/leaflet/leaflet.markercluster.js"): .open,
        RouteKey("GET", "/static/leaflet/MarkerCluster.css"): .open,
        RouteKey("GET", "/static/leaflet/MarkerCluster.Default.css"): .open,
        RouteKey("GET", "/static/leaflet/images/{file}"): .open,
        // Retention and erasure (Sources/Ingest/RetentionHandlers.swift)
        RouteKey("PUT", "/api/find-my/devices/{id}/retention"): .owner,
        RouteKey("POST", "/api/find-my/devices/{id}/erase"): .owner,
        RouteKey("DELETE", "/api/find-my/devices/{id}"): .owner,
        // The ntfy topic a device is rung through (Sources/Ingest/DeviceNtfyHandlers.swift)
        RouteKey("PUT", "/api/find-my/devices/{id}/ntfy"): .owner,
        // History imports (Sources/Importer/ImportAPIRoutes.swift): the gate runs before the upload's
        // body is read.
        RouteKey("POST", "/api/find-my/devices/{id}/imports"): .owner,
        RouteKey("GET", "/api/find-my/devices/{id}/imports/{import_id}"): .owner,
        // The admin socket (Sources/Identity/Accounts.swift, Sources/Ingest/RetentionHandlers.swift)
        RouteKey("POST", "/admin/users"): .adminSocket,
        RouteKey("GET", "/admin/users"): .adminSocket,
        RouteKey("POST", "/admin/users/{name}/password"): .adminSocket,
        RouteKey("POST", "/admin/users/{name}/role"): .adminSocket,
        RouteKey("POST", "/admin/users/{name}/token"): .adminSocket,
        RouteKey("POST", "/admin/retention"): .adminSocket,
        RouteKey("POST", "/admin/compact"): .adminSocket,
        RouteKey("POST", "/admin/compact/runs"): .adminSocket,
        RouteKey("GET", "/admin/compact/runs/{id}"): .adminSocket,
        // Imports of history files (Sources/Importer/ImportAdminRoutes.swift)
        RouteKey("POST", "/admin/imports"): .adminSocket,
        RouteKey("GET", "/admin/imports/{id}"): .adminSocket,
    ]
}

/// Why a router could not be built: each route without an entry, or on the wrong listener.
public struct RoutePermissionError: Error, Equatable, CustomStringConvertible {
    public var problems: [String]
    public var description: String {
        "refusing to start: " + problems.joined(separator: "; ")
            + " (every route needs one entry in RoutePermissions.table, Sources/Identity/RoutePermissions.swift)"
    }
}

/// Registers routes through the permission table and checks each request against its entry before
/// the handler runs. The gate resolves the caller once and hands the handler what it found
/// (`GateCaller`: the principal, the device of a device route, the session's CSRF token), so no
/// handler looks the credential up again or checks a second time who may see the device; the table
/// is the one truth about who reaches a handler.
public struct GuardedRouter {
    /// A route that answers on the calling thread, given the caller the gate resolved.
    public typealias Handler = @Sendable (HTTPRequest, GateCaller) -> HTTPResponse
    /// A route that answers later through its `HTTPReply` (`Router.DeferredHandler`).
    public typealias DeferredHandler = @Sendable (HTTPRequest, GateCaller, HTTPReply) -> Void

    public enum Listener: Sendable {
        /// The network API.
        case api
        /// DATA_DIR/admin.sock.
        case adminSocket
    }

    let service: IdentityService
    let listener: Listener
    let table: [RouteKey: Permission]
    var router = Router()
    var problems: [String] = []

    public init(
        service: IdentityService, listener: Listener, table: [RouteKey: Permission] = RoutePermissions.table
    ) {
        self.service = service
        self.listener = listener
        self.table = table
    }

    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        guard let permission = permission(method, pattern) else { return }
        let checksCSRF = Self.checksCSRF(method, pattern)
        router.add(method, pattern) { [service] request in
            switch service.pass(request, permission, checksCSRF: checksCSRF) {
            case .passed(let caller): return handler(request, caller)
            case .refused(let refusal):
                guard permission == .page, refusal.status == 401 else { return refusal }
                return IdentityService.loginRedirect(request)
            }
        }
    }

    /// Whether the gate asks a request that the session cookie authenticates for the session's
    /// CSRF token and a same-origin `Origin`: every API route that changes something. (The panel's
    /// own form routes check the token in their `csrf` field; see the table.)
    public static func checksCSRF(_ method: String, _ pattern: String) -> Bool {
        pattern.hasPrefix("/api/") && !["GET", "HEAD", "OPTIONS"].contains(method)
    }

    /// A route whose handler answers later (`Router.DeferredHandler`); a refusal is answered at
    /// once. The handler gets the caller this gate resolved, as `add`'s does.
    public mutating func addDeferred(
        _ method: String, _ pattern: String, _ handler: @escaping DeferredHandler
    ) {
        guard let permission = permission(method, pattern) else { return }
        precondition(permission != .page, "a page's refusal is a redirect; serve pages with add")
        let checksCSRF = Self.checksCSRF(method, pattern)
        router.addDeferred(method, pattern) { [service] request, reply in
            switch service.pass(request, permission, checksCSRF: checksCSRF) {
            case .passed(let caller): handler(request, caller, reply)
            case .refused(let refusal): reply(refusal)
            }
        }
    }

    mutating func permission(_ method: String, _ pattern: String) -> Permission? {
        let key = RouteKey(method, pattern)
        guard let permission = table[key] else {
            problems.append("route \(key) has no permission entry")
            return nil
        }
        guard (permission == .adminSocket) == (listener == .adminSocket) else {
            problems.append(
                "route \(key) is \(permission) but registered on the \(listener == .api ? "network API" : "admin socket")"
            )
            return nil
        }
        return permission
    }

    /// The router, or the list of routes without a decision.
    public func build() throws(RoutePermissionError) -> Router {
        guard problems.isEmpty else { throw RoutePermissionError(problems: problems) }
        return router
    }
}

extension IdentityService {
    /// 303 to the login page, which comes back to the page asked for after the login.
    static func loginRedirect(_ request: HTTPRequest) -> HTTPResponse {
        var target = request.path
        if !request.queryItems.isEmpty {
            target +=
                "?"
                + request.queryItems.map { percentEncoded($0.name) + "=" + percentEncoded($0.value) }
                .joined(separator: "&")
        }
        var response = HTTPResponse(status: 303)
        response.headers.set("Location", "/login?next=" + percentEncoded(target))
        response.headers.set("Cache-Control", "no-store")
        return response
    }

    enum GateOutcome {
        /// The caller the gate resolved (no principal for a route that takes no credentials).
        case passed(GateCaller)
        case refused(HTTPResponse)
    }

    /// The gate, in order: a client address over its limit of failed authentications gets 429
    /// before any credential is looked at; then `permission` (an unknown token or an ended session
    /// counts as a failure for that address); then, when `checksCSRF` and the session cookie
    /// authenticated the request, its CSRF token and its `Origin`.
    func pass(_ request: HTTPRequest, _ permission: Permission, checksCSRF: Bool) -> GateOutcome {
        if permission == .open || permission == .adminSocket { return .passed(GateCaller()) }
        let limit = doorLimits.authFailuresPerAddress
        // Usually no address has failed lately: then this costs one atomic load, and the report
        // path neither reads the clock nor copies the address for it.
        if !limit.isEmpty,
            case .refused(let retryAfterSeconds, let firstInWindow) = limit.check(
                clientAddress(request), nowMicros: clockMicros())
        {
            let address = clientAddress(request)
            if firstInWindow {
                StructuredLog.info(
                    "auth_failures_limited",
                    [
                        "address": .string(address), "failures_max": .int(Int64(limit.eventsMax)),
                        "window_seconds": .int(limit.windowMicros / 1_000_000),
                        "retry_after_seconds": .int(Int64(retryAfterSeconds)),
                    ])
            }
            var response = APIError(
                status: 429, code: .tooManyAuthFailures,
                message:
                    "more than \(limit.eventsMax) requests from your address with an unknown token or an ended session within a minute; wait \(retryAfterSeconds) s, and check the token or log in again"
            ).response
            response.headers.set("Retry-After", "\(retryAfterSeconds)")
            return .refused(response)
        }
        let caller: GateCaller
        do throws(APIError) {
            caller = try authorize(request, permission)
        } catch {
            // A missing credential is no guess, and a known token of the wrong kind no secret.
            if error == .unknownToken || error == .sessionEnded {
                limit.record(clientAddress(request), nowMicros: clockMicros())
            }
            var response = error.response
            // Apps with a user/password form (OwnTracks) send Basic credentials only when asked.
            if permission == .appDevice && error.status == 401 {
                response.headers.set("WWW-Authenticate", "Basic realm=\"findmy\", charset=\"UTF-8\"")
            }
            return .refused(response)
        }
        // The session's own token came with the caller: the cookie is not looked up again.
        if checksCSRF, let expected = caller.sessionCSRFToken,
            let refusal = cookieCSRFRefusal(request, expected: expected)
        {
            return .refused(refusal.response)
        }
        return .passed(caller)
    }

    /// Why a request that the session cookie authenticated may not change anything, or nil: its
    /// `Origin` is another site's, or its `X-CSRF-Token` header is missing or not the session's.
    /// A Bearer token is not sent by a browser on its own, so it needs neither.
    func cookieCSRFRefusal(_ request: HTTPRequest) -> APIError? {
        guard request.headers["Authorization"] == nil, let session = sessionCookie(request) else {
            return nil
        }
        return cookieCSRFRefusal(
            request, expected: sessions.csrfToken(token: session, nowMicros: clockMicros()))
    }

    /// `cookieCSRFRefusal` for a request the session cookie authenticated, whose session's CSRF
    /// token is `expected` (nil: the session ended).
    func cookieCSRFRefusal(_ request: HTTPRequest, expected: String?) -> APIError? {
        if case .foreign(let origin) = originVerdict(request) { return crossOriginRefusal(origin, request) }
        guard let sent = request.headers["X-CSRF-Token"] else { return .csrfTokenMissing }
        guard let expected, constantTimeEqual(expected, sent) else { return .csrfTokenInvalid }
        return nil
    }

    /// 403 `cross_origin_request` for a request whose `Origin` is not this server's.
    func crossOriginRefusal(_ origin: String, _ request: HTTPRequest) -> APIError {
        let own = limits.publicURL.map { "\($0) (--public-url) or " } ?? ""
        return APIError(
            status: 403, code: .crossOriginRequest,
            message:
                "the request comes from a page of '\(origin.prefix(100))', not of this server (\(own)Host '\((request.headers["Host"] ?? "").prefix(100))'); logins and changes made with the session cookie are taken only from this server's own pages. Behind a proxy that changes the Host header, start findmy with --public-url"
        )
    }

    /// Checks `request` against `permission`; throws the answer for a caller who may not pass,
    /// and returns what it resolved about the caller who may (nothing for a route that takes no
    /// credentials). A device of someone else and a device that does not exist give the same 404,
    /// body included, so that ids cannot be probed; sharing lends sight (`.viewer`), not control
    /// (`.owner`).
    func authorize(_ request: HTTPRequest, _ permission: Permission) throws(APIError) -> GateCaller {
        switch permission {
        case .open, .adminSocket:
            return GateCaller()
        case .device:
            let caller = try resolveCaller(request)
            guard case .device = caller.principal else {
                throw APIError(
                    status: 401, code: .invalidToken,
                    message:
                        "this is a user token; this endpoint takes the device token returned by POST /api/find-my/devices"
                )
            }
            return caller
        case .appDevice:
            return GateCaller(principal: .device(try appDeviceID(request)))
        case .appDeviceOrBody:
            do {
                return GateCaller(principal: .device(try appDeviceID(request)))
            } catch  where error.code == .missingToken {
                return GateCaller()
            }
        case .user, .page:
            return try userCaller(request)
        case .viewer:
            var caller = try userCaller(request)
            guard let deviceID = request.pathParameters["id"].flatMap({ UInt64($0) }),
                let visible = visibility(of: deviceID, to: caller.userID)
            else { throw APIError.deviceNotFound }
            caller.device = visible
            return caller
        case .owner:
            var caller = try userCaller(request)
            guard let deviceID = request.pathParameters["id"].flatMap({ UInt64($0) }),
                deviceOwner(deviceID) == caller.userID
            else { throw APIError.deviceNotFound }
            caller.device = Registry.VisibleDevice(deviceID: deviceID, sharedByUserID: nil)
            return caller
        case .locator:
            var caller = try userCaller(request)
            let now = clockMicros()
            guard let deviceID = request.pathParameters["id"].flatMap({ UInt64($0) }),
                let found = store.registry.read({ state -> Registry.VisibleDevice? in
                    guard state.registry.mayCommand(deviceID, user: caller.userID, atMicros: now) else {
                        return nil
                    }
                    return state.registry.visibility(of: deviceID, to: caller.userID, atMicros: now)
                })
            else { throw APIError.deviceNotFound }
            caller.device = found
            return caller
        case .admin:
            let caller = try userCaller(request)
            guard store.registry.read({ $0.registry.users[caller.userID]?.role }) == .admin else {
                throw APIError(
                    status: 403, code: .adminOnly,
                    message: "this endpoint is for administrators (findmy user role NAME admin)")
            }
            return caller
        }
    }

    /// The caller of a route for users: a user token or a session (401 for a device token).
    func userCaller(_ request: HTTPRequest) throws(APIError) -> GateCaller {
        let caller = try resolveCaller(request)
        guard case .user = caller.principal else {
            throw APIError(
                status: 401, code: .invalidToken,
                message: "this is a device token; reading locations takes a user token (findmy user add)")
        }
        return caller
    }
}

extension APIError {
    /// A token no user or device has (never had, or revoked); counts as a failed authentication.
    static let unknownToken = APIError(
        status: 401, code: .invalidToken,
        message:
            "the token is unknown, revoked or rotated (re-enrolling a device revokes its earlier token; rotating a user token ends every earlier one)"
    )

    /// A session cookie of no live session; counts as a failed authentication.
    static let sessionEnded = APIError(
        status: 401, code: .invalidSession,
        message: "the session expired or was ended; log in again with POST /login")

    static let csrfTokenMissing = APIError(
        status: 403, code: .csrfTokenMissing,
        message:
            "a change made with the findmy_session cookie must carry the session's CSRF token in the X-CSRF-Token header (POST /login answers it as csrf_token); programs can send Authorization: Bearer <token> instead"
    )

    static let csrfTokenInvalid = APIError(
        status: 403, code: .csrfTokenInvalid,
        message:
            "the X-CSRF-Token header is not this session's CSRF token; send the csrf_token that the login which set this cookie answered"
    )
}

// MARK: app credentials

extension IdentityService {
    /// Query parameters an app may carry its device token in (Overland's `token`, GPSLogger's
    /// `api_key`, the OsmAnd protocol's `id` and `deviceid`).
    public static let appTokenParameters = ["token", "api_key", "id", "deviceid"]

    /// The device of an app's request (permission `.appDevice`): HTTP Basic (user name and device
    /// token), `Bearer`, or a query parameter of `appTokenParameters`, in that order.
    package func appDeviceID(_ request: HTTPRequest) throws(APIError) -> UInt64 {
        if let header = request.headers["Authorization"] {
            if Self.isBasic(header) {
                let credentials = try basicCredentials.credentials(header, decode: Self.decodeBasic)
                // One lookup of the credential, whether the memo knew the header or not.
                sessions.lookups.record()
                return try appDevice(tokenHash: credentials.tokenHash, userName: credentials.userName)
            }
            let caller = try resolveCaller(request)
            guard case .device(let deviceID) = caller.principal else {
                throw APIError(
                    status: 401, code: .invalidToken,
                    message:
                        "this is a user token; apps send the device token returned by POST /api/find-my/devices"
                )
            }
            return deviceID
        }
        for name in Self.appTokenParameters {
            if let token = request.queryItems.first(where: { $0.name == name })?.value {
                return try appDevice(token: token, userName: nil)
            }
        }
        throw APIError(
            status: 401, code: .missingToken,
            message:
                "send the device token: as the password of HTTP Basic with your findmy user name (OwnTracks), as Authorization: Bearer <token>, or as ?token=<token>"
        )
    }

    /// The device whose token is `token`; with `userName`, only a device of that user (an app that
    /// sends a user name and the token as password). A wrong pair answers the 401 of an unknown
    /// token, whichever half was wrong, so that names cannot be probed. For a token carried in a
    /// request body, call this from the handler and count a failure with `recordAppAuthFailure`.
    public func appDevice(token: String, userName: String?) throws(APIError) -> UInt64 {
        try appDevice(tokenHash: sessions.lookups.hash(token[...].trimmingSpaces), userName: userName)
    }

    /// `appDevice(token:userName:)` for a token already hashed.
    func appDevice(tokenHash hash: [UInt8], userName: String?) throws(APIError) -> UInt64 {
        let found = store.lookUpAfterCatchUp { state -> UInt64? in
            guard case .device(let deviceID)? = state.registry.principal(tokenHash: hash) else { return nil }
            if let userName {
                guard let owner = state.registry.liveDevice(deviceID)?.userID,
                    state.registry.user(named: userName)?.id == owner
                else { return nil }
            }
            return deviceID
        }
        guard let found else { throw APIError.unknownToken }
        return found
    }

    /// Counts a failed authentication of `request`'s address, as the gate does for an unknown token.
    public func recordAppAuthFailure(_ request: HTTPRequest) {
        let limit = doorLimits.authFailuresPerAddress
        limit.record(clientAddress(request), nowMicros: clockMicros())
    }
}
