// How FindMyClient talks HTTP: a protocol the embedding program implements (libcurl in the agent,
// URLSession in an app), so that the library itself needs no networking module.

/// One HTTP request to the findmy server.
public struct ClientRequest: Sendable, Equatable {
    public var method: String
    /// The absolute URL: the server's URL and the path (and query), already percent-encoded.
    public var url: String
    public var headers: [ClientHeader]
    public var body: [UInt8]

    public init(method: String, url: String, headers: [ClientHeader] = [], body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

public struct ClientHeader: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// The status line and headers of an answer, and for `send` its whole body.
public struct ClientResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [ClientHeader]
    public var body: [UInt8]

    public init(status: Int, headers: [ClientHeader], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of header `name`, ignoring case.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The comma-separated tokens of header `name` (`Connection`, `Transfer-Encoding`), trimmed
    /// and lowercased, in order; empty when it is absent.
    public func headerTokens(_ name: String) -> [String] {
        (header(name) ?? "").split(separator: ",").map { String($0).trimmingWhiteSpace().lowercased() }
    }

    /// `Retry-After` in whole seconds (the server sends seconds, never a date).
    public var retryAfterSeconds: Double? {
        header("Retry-After").flatMap { Double($0.trimmingWhiteSpace()) }
            .flatMap { $0 >= 0 ? $0 : nil }
    }
}

/// The HTTP client FindMyClient runs on. Any failure to get an answer (no connection, a timeout, a
/// connection cut mid-answer) is thrown; every answer, whatever its status, is returned.
public protocol ClientTransport: Sendable {
    /// Sends `request` and returns the whole answer.
    func send(_ request: ClientRequest) async throws -> ClientResponse

    /// Sends `request` and hands the answer over as it comes: `onHead` once with the status and
    /// headers (an empty body), then `onBytes` with each piece of the body as it arrives, until the
    /// server ends the body (the call returns) or the connection fails (it throws). When the calling
    /// task is cancelled the transport ends the exchange within about a second and returns or throws.
    func stream(
        _ request: ClientRequest, onHead: @escaping @Sendable (ClientResponse) -> Void,
        onBytes: @escaping @Sendable ([UInt8]) -> Void
    ) async throws
}
