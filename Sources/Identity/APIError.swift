import HTTP

/// A request the server refuses as a whole: the HTTP status, a stable `code` for programs, and a
/// message that tells the client what to change. Every code is listed in docs/api.md.
public struct APIError: Error, Equatable, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String

    public init(status: Int, code: String, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { "\(status) \(code): \(message)" }

    public var response: HTTPResponse { .error(status: status, code: code, message: message) }

    /// A device the caller may not see answers exactly like one that does not exist, body included,
    /// so that ids cannot be probed.
    public static let deviceNotFound = APIError(
        status: 404, code: "device_not_found",
        message:
            "no device with this id among the devices you can see; list yours with GET /api/find-my/devices")

    package static func badRequest(_ code: String, _ message: String) -> APIError {
        APIError(status: 400, code: code, message: message)
    }
}
