import Crypto
import Events
import HTTP
import JSON

/// Ending a leaked or old user API token by replacing it (docs/privacy.md, "What a leaked token can
/// do, and how to end it"): `POST /api/find-my/account/token` for one's own token, the admin
/// socket's `POST /admin/users/{name}/token` for `findmy user token NAME --rotate`, and the panel's
/// account page. Each appends one `user token rotated` event; the registry applies it before the
/// answer is sent, so the earlier token is refused from the next request on, and a restart replays
/// to the same state. Login sessions are not tokens: a rotation leaves them alone.
extension IdentityService {
    public func addTokenRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/api/find-my/account/token") { [self] request, caller in
            respond { () throws(APIError) in
                // Nothing to send; a body with members is a client that expects something else.
                if !request.body.isEmpty { _ = try parseObject(request.body, allowed: []) }
                return tokenAnswer(try rotateUserToken(userID: caller.userID, via: "api"))
            }
        }
    }

    public func addTokenAdminRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/admin/users/{name}/token") { [self] request, _ in
            respond { () throws(APIError) in
                let user = try existingUser(request.pathParameters["name"] ?? "")
                return tokenAnswer(try rotateUserToken(userID: user.id, via: "admin_socket"))
            }
        }
    }

    public struct RotatedToken: Sendable {
        public var userID: UInt64
        /// Shown once; only its SHA-256 is stored.
        public var token: String
        public var offset: UInt64
    }

    /// Gives user `userID` a new API token and ends every earlier one. `via` names the caller's
    /// path in the server log (`api`, `panel`, `admin_socket`, `cli`).
    public func rotateUserToken(userID: UInt64, via: String) throws(APIError) -> RotatedToken {
        let token = Token.generate()
        let offset = try store.mutations.withLock { _ throws(APIError) -> UInt64 in
            guard store.registry.read({ $0.registry.users[userID] }) != nil else {
                throw APIError(status: 404, code: .userNotFound, message: "no user with id \(userID)")
            }
            return try appendAndApply(
                .userTokenRotated(
                    UserTokenRotated(userID: userID, tokenHash: SHA256.hash(Array(token.utf8)))),
                receivedAtMicros: clockMicros())
        }
        StructuredLog.info("user_token_rotated", ["user_id": .int(Int64(userID)), "via": .string(via)])
        return RotatedToken(userID: userID, token: token, offset: offset)
    }

    /// `rotateUserToken` for the user named `name`: 404 `user_not_found` when there is none.
    public func rotateUserToken(name: String, via: String) throws(APIError) -> RotatedToken {
        try rotateUserToken(userID: try existingUser(name).id, via: via)
    }

    func tokenAnswer(_ rotated: RotatedToken) -> HTTPResponse {
        tokenAnswer(userID: rotated.userID, token: rotated.token, offset: rotated.offset)
    }

    /// `{"user_id", "token", "offset"}` for a new user's token or a rotated one, never stored by a
    /// cache: the token is a secret, shown this once.
    func tokenAnswer(userID: UInt64, token: String, offset: UInt64, status: Int = 200) -> HTTPResponse {
        var writer = JSONWriter(capacity: 128)
        writer.beginObject()
        writer.key("user_id")
        writer.int64(Int64(userID))
        writer.key("token")
        writer.string(token)
        writer.key("offset")
        writer.int64(Int64(offset))
        writer.endObject()
        var response = HTTPResponse.json(writer.bytes, status: status)
        response.headers.set("Cache-Control", "no-store")
        return response
    }
}
