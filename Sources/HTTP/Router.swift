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
        case upload(UploadRoute)
    }

    /// What to do with one request. Resolved once its head is in, before any body byte: an
    /// upload route's body goes to a file, every other route's to memory.
    enum Resolution {
        /// Answered by the router itself (404, 405).
        case answer(HTTPResponse)
        case blocking(Handler, HTTPRequest)
        case deferred(DeferredHandler, HTTPRequest)
        case upload(UploadRoute, HTTPRequest)
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

    /// Adds a route whose body is streamed to a new file in `directory` as it arrives, never held
    /// in memory (see docs/http.md, "Uploads"). `admit` runs once the head is in, before any body
    /// byte is read, on an event-loop thread (it must not block): a non-nil answer refuses the
    /// request with that response and the body is not read. A body over `bytesMax` (a
    /// `Content-Length` up front, or a chunked body as it arrives) is answered 413 `too_large` and
    /// its file removed; `bodyBytesMax` does not apply. Then `handler` runs on a worker thread with
    /// `request.bodyFile` set; the file is removed after it returns unless it renamed the file away.
    public mutating func addUpload(
        _ method: String, _ pattern: String, directory: String, bytesMax: Int64,
        admit: @escaping @Sendable (HTTPRequest) -> HTTPResponse?, _ handler: @escaping Handler
    ) {
        precondition(bytesMax >= 0, "bytesMax must not be negative")
        add(
            method, pattern,
            .upload(UploadRoute(directory: directory, bytesMax: bytesMax, admit: admit, handler: handler)))
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
    /// `Allow` for a known path and another method. Waits for a deferred handler's answer. An
    /// upload route gets `request.body` as its file (unless `request.bodyFile` is set already); a
    /// streamed answer is produced into `body` (a producer that throws gives 500 `stream_failed`).
    public func respond(to request: HTTPRequest) -> (routeName: String, response: HTTPResponse) {
        let (routeName, resolution) = resolve(request)
        switch resolution {
        case .answer(let response):
            return (routeName, response.produced())
        case .blocking(let handler, let request):
            return (routeName, handler(request).produced())
        case .deferred(let handler, let request):
            // The calling thread waits for the answer anyway: it runs a blocking job itself.
            let slot = AnswerSlot()
            handler(request, HTTPReply({ slot.put($0) }, runBlocking: { slot.put(job: $0) }))
            return (routeName, slot.take().produced())
        case .upload(let upload, let request):
            return (routeName, upload.respondInProcess(to: request).produced())
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
                case .upload(let upload): return (route.pattern, .upload(upload, request))
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

/// How a deferred handler answers: call it, or `answerBlocking`, exactly once, from any thread;
/// later calls are ignored.
public struct HTTPReply: Sendable {
    public typealias Job = @Sendable () -> Void
    private let deliver: @Sendable (HTTPResponse) -> Void
    private let runBlocking: @Sendable (@escaping Job) -> Void

    /// `runBlocking` runs a job on a thread that may block (the server's workers).
    public init(
        _ deliver: @escaping @Sendable (HTTPResponse) -> Void,
        runBlocking: @escaping @Sendable (@escaping Job) -> Void
    ) {
        self.deliver = deliver
        self.runBlocking = runBlocking
    }

    public func callAsFunction(_ response: HTTPResponse) { deliver(response) }

    /// Answers with what `produce` returns, run on a thread that may block (on PostgreSQL, say):
    /// for a deferred route whose answer needs such work only now and then, so that the usual
    /// request costs no hand-off to a worker and back.
    public func answerBlocking(_ produce: @escaping @Sendable () -> HTTPResponse) {
        runBlocking { [deliver] in deliver(produce()) }
    }
}
