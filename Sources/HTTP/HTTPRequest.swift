/// One request, with its whole body: handlers never see a partial body.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path as sent, without the query, still percent-encoded (so `%2F` stays inside a segment).
    public var path: String
    /// Query parameters in order, percent-decoded, `+` read as a space.
    public var queryItems: [(name: String, value: String)]
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Where an upload route's body was written (`Router.addUpload`); nil on every other route,
    /// whose body is `body`.
    public var bodyFile: BodyFile?
    /// Values of the route's `{name}` segments, percent-decoded; filled by `Router`.
    public var pathParameters: [String: String]
    /// `203.0.113.7:51234` for TCP, `unix` for a unix-socket peer.
    public var remoteAddress: String
    /// Distinct per connection for the server's lifetime; equal across keep-alive requests.
    public var connectionID: UInt64

    /// - Parameter target: the request target as sent, path and optional `?query`.
    public init(
        method: String, target: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [],
        remoteAddress: String = "", connectionID: UInt64 = 0
    ) {
        self.method = method
        // By byte, as RFC 3986 splits a target: a Character search walks grapheme clusters, which
        // cost more than the rest of routing a request.
        if let mark = target.utf8.firstIndex(of: UInt8(ascii: "?")) {
            path = String(target[..<mark])
            queryItems = parseQuery(target[target.index(after: mark)...])
        } else {
            path = target
            queryItems = []
        }
        self.headers = headers
        self.body = body
        self.bodyFile = nil
        self.pathParameters = [:]
        self.remoteAddress = remoteAddress
        self.connectionID = connectionID
    }

    /// The first value of query parameter `name`.
    public func query(_ name: String) -> String? {
        queryItems.first { $0.name == name }?.value
    }
}

/// The fields of an `application/x-www-form-urlencoded` body, percent-decoded, `+` read as a space.
public func parseForm(_ body: [UInt8]) -> [(name: String, value: String)] {
    parseQuery(Substring(String(decoding: body, as: UTF8.self)))
}

func parseQuery(_ query: Substring) -> [(name: String, value: String)] {
    query.split(separator: "&").map { pair in
        if let equals = pair.firstIndex(of: "=") {
            return (
                percentDecoded(pair[..<equals], plusAsSpace: true),
                percentDecoded(pair[pair.index(after: equals)...], plusAsSpace: true)
            )
        }
        return (percentDecoded(pair, plusAsSpace: true), "")
    }
}
