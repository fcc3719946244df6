import HTTP

/// Who may call a route. Every route of the server has exactly one entry in
/// `RoutePermissions.table`; `GuardedRouter` refuses to build a router with a route that has none,
/// so a new endpoint cannot be added without deciding who may call it.
public enum Permission: Equatable, Sendable, CustomStringConvertible {
    /// Anyone, without credentials (health, metrics, login, logout).
    case open
    /// A device token.
    case device
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
    /// A user whose role is admin (managing users and devices, never reading locations).
    case admin
    /// The owner-only unix socket DATA_DIR/admin.sock; such a route is never served over the network.
    case adminSocket

    public var description: String {
        switch self {
        case .open: "open"
        case .device: "device"
        case .user: "user"
        case .page: "page"
        case .viewer: "viewer"
        case .owner: "owner"
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
        // Login, sessions, sharing, users (Sources/Ingest/Accounts.swift)
        RouteKey("POST", "/login"): .open,
        RouteKey("POST", "/logout"): .open,  // ends only the session its own cookie names
        RouteKey("GET", "/api/find-my/devices/{id}/shares"): .owner,
        RouteKey("POST", "/api/find-my/devices/{id}/shares"): .owner,
        RouteKey("DELETE", "/api/find-my/devices/{id}/shares/{user}"): .owner,
        RouteKey("GET", "/api/find-my/admin/users"): .admin,
        RouteKey("POST", "/api/find-my/account/token"): .user,  // one's own token (TokenRotation.swift)
        // The read API (Sources/Panel)
        RouteKey("GET", "/api/find-my/devices"): .user,  // filtered to what the caller may see
        RouteKey("GET", "/api/find-my/devices/{id}"): .viewer,
        RouteKey("GET", "/api/find-my/devices/{id}/locations"): .viewer,
        RouteKey("GET", "/api/find-my/devices/{id}/arrivals"): .viewer,
        RouteKey("GET", "/api/find-my/admin/devices"): .admin,
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
        RouteKey("GET", "/find-my/devices/{id}/settings"): .page,  // owner only, in the handler
        RouteKey("POST", "/find-my/devices/{id}/shares"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/shares/revoke"): .page,  // owner only
        RouteKey("POST", "/find-my/devices/{id}/retention"): .page,  // owner only
        RouteKey("GET", "/find-my/devices/{id}/erase"): .page,  // owner only: the confirmation step
        RouteKey("POST", "/find-my/devices/{id}/erase"): .page,  // owner only
        RouteKey("GET", "/find-my/admin"): .page,  // admin role only, in the handler
        RouteKey("POST", "/find-my/admin/users"): .page,  // admin role only
        RouteKey("POST", "/find-my/admin/users/role"): .page,  // admin role only
        RouteKey("GET", "/static/panel.js"): .open,
        RouteKey("GET", "/static/panel.css"): .open,
        RouteKey("GET", "/static/leaflet/leaflet.js"): .open,
        RouteKey("GET", "/static/leaflet/leaflet.css"): .open,
        RouteKey("GET", "/static/leaflet/images/{file}"): .open,
        // Retention and erasure (Sources/Ingest/RetentionHandlers.swift)
        RouteKey("PUT", "/api/find-my/devices/{id}/retention"): .owner,
        RouteKey("POST", "/api/find-my/devices/{id}/erase"): .owner,
        RouteKey("DELETE", "/api/find-my/devices/{id}"): .owner,
        // The admin socket (Sources/Ingest/Handlers.swift, Accounts.swift)
        RouteKey("POST", "/admin/users"): .adminSocket,
        RouteKey("GET", "/admin/users"): .adminSocket,
        RouteKey("POST", "/admin/users/{name}/password"): .adminSocket,
        RouteKey("POST", "/admin/users/{name}/role"): .adminSocket,
        RouteKey("POST", "/admin/users/{name}/token"): .adminSocket,
        RouteKey("POST", "/admin/retention"): .adminSocket,
        RouteKey("POST", "/admin/compact"): .adminSocket,
    ]
}

/// Why a router could not be built: each route without an entry, or on the wrong listener.
public struct RoutePermissionError: Error, Equatable, CustomStringConvertible {
    public var problems: [String]
    public var description: String {
        "refusing to start: " + problems.joined(separator: "; ")
            + " (every route needs one entry in RoutePermissions.table, Sources/Ingest/RoutePermissions.swift)"
    }
}

/// Registers routes through the permission table and checks each request against its entry before
/// the handler runs. Handlers still resolve their caller themselves (defence in depth); this gate
/// makes the table the truth about who reaches them.
public struct GuardedRouter {
    public enum Listener: Sendable {
        /// The network API.
        case api
        /// DATA_DIR/admin.sock.
        case adminSocket
    }

    let service: IngestService
    let listener: Listener
    let table: [RouteKey: Permission]
    var router = Router()
    var problems: [String] = []

    public init(
        service: IngestService, listener: Listener, table: [RouteKey: Permission] = RoutePermissions.table
    ) {
        self.service = service
        self.listener = listener
        self.table = table
    }

    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Router.Handler) {
        guard let permission = permission(method, pattern) else { return }
        router.add(method, pattern) { [service] request in
            if let refusal = service.refusal(request, permission) {
                guard permission == .page, refusal.status == 401 else { return refusal }
                return IngestService.loginRedirect(request)
            }
            return handler(request)
        }
    }

    /// A route whose handler answers later (`Router.DeferredHandler`); a refusal is answered at
    /// once. The handler gets the caller this gate resolved (nil for an open route), so that a
    /// hot route does not hash the same token twice.
    public mutating func addDeferred(
        _ method: String, _ pattern: String,
        _ handler: @escaping @Sendable (HTTPRequest, Registry.Principal?, HTTPReply) -> Void
    ) {
        guard let permission = permission(method, pattern) else { return }
        precondition(permission != .page, "a page's refusal is a redirect; serve pages with add")
        router.addDeferred(method, pattern) { [service] request, reply in
            let principal: Registry.Principal?
            do throws(APIError) {
                principal = try service.authorize(request, permission)
            } catch {
                return reply(error.response)
            }
            handler(request, principal, reply)
        }
    }

    private mutating func permission(_ method: String, _ pattern: String) -> Permission? {
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

extension IngestService {
    /// 303 to the login page, which comes back to the page asked for after the login.
    static func loginRedirect(_ request: HTTPRequest) -> HTTPResponse {
        var target = request.path
        if !request.queryItems.isEmpty {
            target +=
                "?"
                + request.queryItems.map { percentEncoded($0.name) + "=" + percentEncoded($0.value) }
                .joined(separator: "&")
        }
        return redirect("/login?next=" + percentEncoded(target))
    }

    /// The answer for a caller who may not pass `permission`, or nil.
    func refusal(_ request: HTTPRequest, _ permission: Permission) -> HTTPResponse? {
        do throws(APIError) {
            try authorize(request, permission)
            return nil
        } catch {
            return error.response
        }
    }

    /// Checks `request` against `permission`; throws the answer for a caller who may not pass,
    /// and returns the caller who may (nil for a route that takes no credentials).
    @discardableResult
    func authorize(_ request: HTTPRequest, _ permission: Permission) throws(APIError) -> Registry.Principal? {
        switch permission {
        case .open, .adminSocket:
            return nil
        case .device:
            return .device(try deviceID(request))
        case .user, .page:
            return .user(try authenticatedUser(request))
        case .viewer:
            let reader = try authenticatedUser(request)
            guard let deviceID = request.pathParameters["id"].flatMap({ UInt64($0) }),
                visibility(of: deviceID, to: reader) != nil
            else { throw APIError.deviceNotFound }
            return .user(reader)
        case .owner:
            return .user(try ownedDevice(request).userID)
        case .admin:
            let userID = try authenticatedUser(request)
            guard registry.read({ $0.registry.users[userID]?.role }) == .admin else {
                throw APIError(
                    status: 403, code: "admin_only",
                    message: "this endpoint is for administrators (findmy user role NAME admin)")
            }
            return .user(userID)
        }
    }

    /// The device in path parameter `id`, if the caller owns it; the 404 of a missing device otherwise
    /// (also for a user it is shared with: sharing lends sight, not control).
    func ownedDevice(_ request: HTTPRequest) throws(APIError) -> (userID: UInt64, deviceID: UInt64) {
        let userID = try authenticatedUser(request)
        guard let deviceID = request.pathParameters["id"].flatMap({ UInt64($0) }),
            deviceOwner(deviceID) == userID
        else { throw APIError.deviceNotFound }
        return (userID, deviceID)
    }
}
