#if canImport(Glibc)
    import Glibc
#endif

public struct HTTPClientRequest: Sendable {
    public var method: String
    /// The request target: path and optional `?query`, already percent-encoded.
    public var target: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// Send the body with `Transfer-Encoding: chunked` in pieces of this many bytes, instead of
    /// with `Content-Length`.
    public var chunkBytes: Int?

    public init(
        method: String = "GET", target: String, headers: [(name: String, value: String)] = [],
        body: [UInt8] = [], chunkBytes: Int? = nil
    ) {
        precondition(chunkBytes.map { $0 > 0 } ?? true, "chunkBytes must be positive")
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.chunkBytes = chunkBytes
    }
}

public struct HTTPClientResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// The first value of header `name`, ignoring case.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

public enum HTTPClientError: Error, Equatable, CustomStringConvertible {
    case badAddress(String)
    case connectFailed(String, errno: Int32)
    case writeFailed(errno: Int32)
    case readFailed(errno: Int32)
    /// The peer closed the connection before a whole response arrived; `bytesRead` of it did.
    case connectionClosed(bytesRead: Int)
    case malformedResponse(String)
    /// Connecting, or a wait for the next byte of the answer, took longer than this.
    case timedOut(seconds: Int)
    /// Any other failure of the exchange, in libcurl's words.
    case transferFailed(String)

    public var description: String {
        switch self {
        case .badAddress(let address):
            "bad server address '\(address)'; use host:port (an IPv4 address or localhost), unix:/path,"
                + " or http(s)://host[:port]"
        case .connectFailed(let address, let code):
            "cannot connect to \(address): \(describe(code)); is the server running there?"
        case .writeFailed(let code): "sending the request failed: \(describe(code))"
        case .readFailed(let code): "reading the response failed: \(describe(code))"
        case .connectionClosed(let bytesRead):
            "the server closed the connection after \(bytesRead) bytes of the response"
        case .malformedResponse(let reason): "the server sent a malformed response: \(reason)"
        case .timedOut(let seconds): "the server did not answer within \(seconds) s"
        case .transferFailed(let reason): "the request failed: \(reason)"
        }
    }
}

private func describe(_ code: Int32) -> String {
    String(cString: strerror(code))
}
