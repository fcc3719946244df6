/// A complete response, or one whose body is written while it is sent (`streamed`). The server
/// adds `Content-Length` (or chunked framing), `Date` and connection handling.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Writes the body while it is sent, in place of `body`; see `streamed`.
    var producer: ResponseStream.Producer?
    /// Hands the body to a writer that keeps it open, in place of `body`; see `pushed`.
    var pusher: PushSetup?

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
        self.producer = nil
        self.pusher = nil
    }

    /// Whether the body is written while it is sent (`streamed`) rather than held in `body`.
    public var isStreamed: Bool { producer != nil || pusher != nil }

    /// A JSON response from bytes already encoded (by the `JSON` module, typically).
    public static func json(_ body: [UInt8], status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", "application/json")]), body: body)
    }

    /// A JSON response from an already encoded document.
    public static func json(_ body: String, status: Int = 200) -> HTTPResponse {
        json(Array(body.utf8), status: status)
    }

    public static func text(_ body: String, status: Int = 200) -> HTTPResponse {
        HTTPResponse(
            status: status, headers: HTTPHeaders([("Content-Type", "text/plain; charset=utf-8")]),
            body: Array(body.utf8))
    }

    /// `{"error": {"code": "...", "message": "..."}}`: `code` is stable for programs to match on,
    /// `message` says what was wrong and how to fix it, for people.
    public static func error(status: Int, code: String, message: String) -> HTTPResponse {
        json(
            "{\"error\": {\"code\": \(jsonStringLiteral(code)), \"message\": \(jsonStringLiteral(message))}}",
            status: status)
    }
}

/// Just enough JSON to quote two strings; documents are the `JSON` module's job.
private func jsonStringLiteral(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}
