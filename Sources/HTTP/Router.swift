/// Routes by method and path pattern. Patterns are literal segments and `{name}` segments, e.g.
/// `/api/find-my/devices/{id}/locations`; the pattern is the route's name in metrics.
/// Build it once before starting the server; it is immutable while serving.
public struct Router: Sendable {
    /// Runs on a worker thread of the server and may block (on PostgreSQL, a durable append, ...).
    public typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse
    /// Runs on an event-loop thread and must not block: it starts the work and answers through
    /// `HTTPReply`, exactly once, from any thread (the log's group commit, typically).
    public typealias DeferredHandler = @Sendable (HTTPRequest, HTTPReply) -> Void

    /// The route name reported for requests no route matched.
    public static let unmatchedRouteName = "unmatched"

    private struct Route: Sendable {
        let method: String
        let pattern: String
        let segments: [Segment]
        let action: Action
    }

    enum Action: Sendable {
        case blocking(Handler)
        case deferred(DeferredHandler)
    }

    /// What to do with one request.
    enum Resolution {
        /// Answered by the router itself (404, 405).
        case answer(HTTPResponse)
        case blocking(Handler, HTTPRequest)
        case deferred(DeferredHandler, HTTPRequest)
    }

    private enum Segment: Sendable, Equatable {
        case literal(Substring)
        case parameter(String)
    }

    private var routes: [Route] = []

    public init() {}

    /// Adds a route. Programmer errors trap: a pattern not starting with `/`, or a duplicate.
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping Handler) {
        add(method, pattern, .blocking(handler))
    }

    /// Adds a route whose handler answers later through its `HTTPReply` (see `DeferredHandler`).
    public mutating func addDeferred(
        _ method: String, _ pattern: String, _ handler: @escaping DeferredHandler
    ) {
        add(method, pattern, .deferred(handler))
    }

    private mutating func add(_ method: String, _ pattern: String, _ action: Action) {
        precondition(pattern.hasPrefix("/"), "route pattern must start with '/': \(pattern)")
        let segments = pattern.split(separator: "/", omittingEmptySubsequences: false).map { part in
            part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2
                ? Segment.parameter(String(part.dropFirst().dropLast())) : Segment.literal(part)
        }
        precondition(
            !routes.contains { $0.method == method && $0.segments == segments },
            "duplicate route \(method) \(pattern)")
        routes.append(Route(method: method, pattern: pattern, segments: segments, action: action))
    }

    /// Answers `request`: the matching handler's response, 404 for an unknown path, 405 with
    /// `Allow` for a known path and another method. Waits for a deferred handler's answer.
    public func respond(to request: HTTPRequest) -> (routeName: String, response: HTTPResponse) {
        let (routeName, resolution) = resolve(request)
        switch resolution {
        case .answer(let response):
            return (routeName, response)
        case .blocking(let handler, let request):
            return (routeName, handler(request))
        case .deferred(let handler, let request):
            let slot = AnswerSlot()
            handler(request, HTTPReply { slot.put($0) })
            return (routeName, slot.take())
        }
    }

    /// The matching route's handler with the request it gets, or the router's own answer.
    func resolve(_ request: HTTPRequest) -> (routeName: String, resolution: Resolution) {
        let pathSegments = request.path.split(separator: "/", omittingEmptySubsequences: false)
        var allowed: [String] = []
        var firstPathMatch: String?
        for route in routes {
            guard let parameters = match(route.segments, pathSegments) else { continue }
            if route.method == request.method {
                var request = request
                request.pathParameters = parameters
                switch route.action {
                case .blocking(let handler): return (route.pattern, .blocking(handler, request))
                case .deferred(let handler): return (route.pattern, .deferred(handler, request))
                }
            }
            allowed.append(route.method)
            firstPathMatch = firstPathMatch ?? route.pattern
        }
        guard let pattern = firstPathMatch else {
            return (
                Self.unmatchedRouteName,
                .answer(
                    .error(
                        status: 404, code: "not_found",
                        message: "no resource at \(request.path); check the URL against the API documentation"
                    )
                )
            )
        }
        let allow = Set(allowed).sorted().joined(separator: ", ")
        var response = HTTPResponse.error(
            status: 405, code: "method_not_allowed",
            message: "\(request.method) is not allowed on \(request.path); use one of: \(allow)")
        response.headers.set("Allow", allow)
        return (pattern, .answer(response))
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

/// How a deferred handler answers. Call it exactly once, from any thread; later calls are ignored.
public struct HTTPReply: Sendable {
    private let deliver: @Sendable (HTTPResponse) -> Void

    public init(_ deliver: @escaping @Sendable (HTTPResponse) -> Void) {
        self.deliver = deliver
    }

    public func callAsFunction(_ response: HTTPResponse) { deliver(response) }
}
