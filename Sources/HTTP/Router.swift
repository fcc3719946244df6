/// Routes by method and path pattern. Patterns are literal segments and `{name}` segments, e.g.
/// `/api/find-my/devices/{id}/locations`; the pattern is the route's name in metrics.
/// Build it once before starting the server; it is immutable while serving.
public struct Router: Sendable {
    public typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse

    /// The route name reported for requests no route matched.
    public static let unmatchedRouteName = "unmatched"

    private struct Route: Sendable {
        let method: String
        let pattern: String
        let segments: [Segment]
        let handler: Handler
    }

    private enum Segment: Sendable, Equatable {
        case literal(Substring)
        case parameter(String)
    }

    private var routes: [Route] = []

    public init() {}

    /// Adds a route. Programmer errors trap: a pattern not starting with `/`, or a duplicate.
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        precondition(pattern.hasPrefix("/"), "route pattern must start with '/': \(pattern)")
        let segments = pattern.split(separator: "/", omittingEmptySubsequences: false).map { part in
            part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2
                ? Segment.parameter(String(part.dropFirst().dropLast())) : Segment.literal(part)
        }
        precondition(
            !routes.contains { $0.method == method && $0.segments == segments },
            "duplicate route \(method) \(pattern)")
        routes.append(Route(method: method, pattern: pattern, segments: segments, handler: handler))
    }

    /// Answers `request`: the matching handler's response, 404 for an unknown path, 405 with
    /// `Allow` for a known path and another method.
    public func respond(to request: HTTPRequest) -> (routeName: String, response: HTTPResponse) {
        let pathSegments = request.path.split(separator: "/", omittingEmptySubsequences: false)
        var allowed: [String] = []
        var firstPathMatch: String?
        for route in routes {
            guard let parameters = match(route.segments, pathSegments) else { continue }
            if route.method == request.method {
                var request = request
                request.pathParameters = parameters
                return (route.pattern, route.handler(request))
            }
            allowed.append(route.method)
            firstPathMatch = firstPathMatch ?? route.pattern
        }
        guard let pattern = firstPathMatch else {
            return (
                Self.unmatchedRouteName,
                .error(
                    status: 404, code: "not_found",
                    message: "no resource at \(request.path); check the URL against the API documentation")
            )
        }
        let allow = Set(allowed).sorted().joined(separator: ", ")
        var response = HTTPResponse.error(
            status: 405, code: "method_not_allowed",
            message: "\(request.method) is not allowed on \(request.path); use one of: \(allow)")
        response.headers.set("Allow", allow)
        return (pattern, response)
    }

    /// The name metrics count `method path` under, without running a handler.
    public func routeName(method: String, path: String) -> String {
        let pathSegments = path.split(separator: "/", omittingEmptySubsequences: false)
        let matches = routes.filter { match($0.segments, pathSegments) != nil }
        return (matches.first { $0.method == method } ?? matches.first)?.pattern ?? Self.unmatchedRouteName
    }

    private func match(_ segments: [Segment], _ path: [Substring]) -> [String: String]? {
        guard segments.count == path.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(segments, path) {
            switch segment {
            case .literal(let literal):
                guard literal == part else { return nil }
            case .parameter(let name):
                guard !part.isEmpty else { return nil }
                parameters[name] = percentDecoded(part, plusAsSpace: false)
            }
        }
        return parameters
    }
}
