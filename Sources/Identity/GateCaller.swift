import Core
import Crypto
import Synchronization

/// Counts the credentials (bearer tokens, session cookies) looked up by their SHA-256. The gate
/// looks a request's credential up once and hands what it found to the handler (`GateCaller`);
/// tests count lookups per request to hold every route to that.
final class CredentialLookups: Sendable {
    private let lookups = Atomic<Int>(0)

    /// The SHA-256 under which the registry or the session store keeps `credential`, counted.
    func hash(_ credential: some StringProtocol) -> [UInt8] {
        lookups.add(1, ordering: .relaxed)
        return SHA256.hash(Array(credential.utf8))
    }

    /// Counts a lookup of a credential whose hash was known already (`BasicCredentialsMemo`).
    func record() { lookups.add(1, ordering: .relaxed) }

    /// Lookups since the service started.
    var count: Int { lookups.load(ordering: .relaxed) }
}

/// What the gate found out about a request before its handler runs: who sent it, the device of a
/// route about one device, and the CSRF token of the session that sent it. A handler takes these
/// and never resolves the request again: no second SHA-256 of its token, no second check of who
/// may see the device. The accessors name what a route's permission guarantees; asking
/// for what the permission does not resolve is a programming error and traps.
public struct GateCaller: Sendable {
    /// nil for an open route and the admin socket, which take no credentials.
    public var principal: Registry.Principal?
    /// For a `.viewer` or `.owner` route: the device in path parameter `id`, as the caller may see
    /// it (an owned device has no `sharedByUserID`).
    public var device: Registry.VisibleDevice?
    /// When the session cookie authenticated the request: the session's CSRF token, which the
    /// panel's forms carry and the gate asks of an API change.
    public var sessionCSRFToken: String?
    /// When a bearer token authenticated the request: its SHA-256, as the registry keeps it, so
    /// that a long-lived answer (the command stream) can tell once the token is revoked.
    public var tokenHash: [UInt8]?

    public init(
        principal: Registry.Principal? = nil, device: Registry.VisibleDevice? = nil,
        sessionCSRFToken: String? = nil
    ) {
        self.principal = principal
        self.device = device
        self.sessionCSRFToken = sessionCSRFToken
    }

    /// The user of a `.user`, `.page`, `.viewer`, `.owner` or `.admin` route.
    public var userID: UInt64 {
        guard case .user(let id) = principal else {
            preconditionFailure("the route's permission admits a user")
        }
        return id
    }

    /// The device whose token sent a `.device` route's request.
    public var tokenDeviceID: UInt64 {
        guard case .device(let id) = principal else {
            preconditionFailure("the route's permission is .device")
        }
        return id
    }

    /// The device in path parameter `id` of a `.viewer` or `.owner` route.
    public var deviceID: UInt64 {
        guard let device else { preconditionFailure("the route's permission is .viewer or .owner") }
        return device.deviceID
    }
}
