import HTTP

/// A request ingest refuses as a whole: the HTTP status, a stable `code` for programs, and a
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

    static func badRequest(_ code: String, _ message: String) -> APIError {
        APIError(status: 400, code: code, message: message)
    }
}
