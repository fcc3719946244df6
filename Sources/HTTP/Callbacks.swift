import CMicroHTTPD

#if canImport(Glibc)
    import Glibc
#endif

// libmicrohttpd calls these C callbacks on its event-loop threads (epoll, a small pool). They
// capture nothing and reach the server through the context pointer given to MHD_start_daemon (a
// retained ServerContext) and each request through its MHD request pointer (a retained
// RequestState). No callback may block: a blocking handler runs on a worker thread and a deferred
// one answers from wherever its work completes, while MHD holds the connection suspended.
//
// Lifecycle of one request, as MHD drives it:
//   connectionNotified   started: number the connection, and HeadDeadline starts its clock;
//                        closed: HeadDeadline forgets it
//   requestLineArrived   create RequestState, count it in flight
//   accessHandler #1     headers are in: refuse ambiguous body framing with 400; resolve the
//                        route; an upload route's `admit` may refuse, else its file is created;
//                        an oversized Content-Length is 413 (an answer now closes the connection
//                        after it)
//   accessHandler #2..n  body bytes: close if slower than bodyBytesPerSecondMin; append (to the
//                        upload's file, or memory); past the limit discard, up to a bound
//   accessHandler last   body complete (upload size 0): 413, or route; a router answer is queued
//                        at once, a handler gets a PendingReply and the connection is suspended
//                        unless the handler answered before returning (a deferred one may)
//   PendingReply.answer  any thread: keep the response, MHD_resume_connection
//   accessHandler again  after the resume: queue the kept response
//   requestCompleted     response sent or connection lost: observe, release, uncount, remove an
//                        upload file no handler took; the next head is owed from now
// A streamed answer (HTTPResponse.streamed) is queued as a callback response: its producer runs
// on a worker, and MHD pulls its chunks (see StreamBuffer) until the end or the connection's. A
// pushed one (HTTPResponse.pushed) likewise, but its `opened` returns at once and whoever keeps
// the PushedStream writes later, from any thread, without a worker waiting on the client.
// A body that never completes (client closed, or idle past the timeout) skips "last", so a
// handler never sees a partial body.

/// Touched only by the one connection thread that owns the request.
final class RequestState {
    let target: String
    let remoteAddress: String
    let connectionID: UInt64
    let started = ContinuousClock.now
    var method = ""
    var headersSeen = false
    /// When the head was in: the body's rate is measured from here.
    var bodyStartedMicros: Int64 = 0
    /// Collected once the head is in; handed to the request (and cleared) when the body is.
    var headers = HTTPHeaders()
    /// The route, resolved once the head is in; its request gets the body at the end.
    var resolved: (routeName: String, resolution: Router.Resolution)?
    var body: [UInt8] = []
    /// An upload route's file while its body arrives; nil once a handler has it, or removed.
    var upload: UploadFile?
    /// Why an upload's body was not stored (a write failed); answered once the body is over.
    var uploadFailure: HTTPResponse?
    var bodyTooLarge = false
    var bytesReceived = 0
    var answered: (routeName: String, status: Int)?
    /// Set while a handler works on the request; the connection is suspended meanwhile.
    var pending: PendingReply?

    init(target: String, remoteAddress: String, connectionID: UInt64) {
        self.target = target
        self.remoteAddress = remoteAddress
        self.connectionID = connectionID
    }
}

func connectionNotified(
    _ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_ConnectionNotificationCode
) {
    guard let context, let connection, let socketContext else { return }
    let server = Unmanaged<ServerContext>.fromOpaque(context).takeUnretainedValue()
    switch code {
    case .CONNECTION_NOTIFY_STARTED:
        let connectionID = server.nextConnectionID()
        // The id is stored in the pointer itself; it is never dereferenced.
        socketContext.pointee = UnsafeMutableRawPointer(bitPattern: UInt(connectionID))
        server.headDeadline.opened(
            connectionID, socket: findmy_mhd_connection_fd(connection),
            address: formatAddress(findmy_mhd_client_address(connection)))
    case .CONNECTION_NOTIFY_CLOSED:
        // Before MHD closes the socket: see HeadDeadline.
        server.headDeadline.closed(UInt64(UInt(bitPattern: socketContext.pointee)))
    default:
        break
    }
}

func requestLineArrived(
    _ context: UnsafeMutableRawPointer?, _ uri: UnsafePointer<CChar>?, _ connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let context, let connection else { return nil }
    let server = Unmanaged<ServerContext>.fromOpaque(context).takeUnretainedValue()
    let connectionID = UInt64(UInt(bitPattern: findmy_mhd_socket_context(connection)))
    let state = RequestState(
        target: uri.map { String(cString: $0) } ?? "/",
        remoteAddress: formatAddress(findmy_mhd_client_address(connection)), connectionID: connectionID)
    server.requestStarted()
    return Unmanaged.passRetained(state).toOpaque()
}

func accessHandler(
    _ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
    _ uploadDataSize: UnsafeMutablePointer<Int>?,
    _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let context, let connection, let uploadDataSize, let statePointer = requestContext?.pointee else {
        return .NO
    }
    let server = Unmanaged<ServerContext>.fromOpaque(context).takeUnretainedValue()
    let state = Unmanaged<RequestState>.fromOpaque(statePointer).takeUnretainedValue()

    if !state.headersSeen { return headersArrived(method, connection, state, server) }
    let chunkBytes = uploadDataSize.pointee
    if chunkBytes > 0 {
        uploadDataSize.pointee = 0
        return bodyChunkArrived(uploadData, chunkBytes, state, server)
    }
    if let pending = state.pending {
        // Called again after MHD_resume_connection: the handler has answered.
        state.pending = nil
        server.forget(pending)
        return queue(pending.takeAnswer(), routeName: pending.routeName, on: connection, state, server)
    }
    guard state.answered == nil else { return .YES }
    if state.bodyTooLarge { return answerBodyTooLarge(connection, state, server) }
    return dispatch(connection, state, server)
}

/// The first call of a request: its method and headers. A request whose body is framed two ways,
/// or declared too large, is answered at once.
private func headersArrived(
    _ method: UnsafePointer<CChar>?, _ connection: OpaquePointer, _ state: RequestState,
    _ server: ServerContext
) -> MHD_Result {
    state.headersSeen = true
    state.method = method.map { String(cString: $0) } ?? ""
    state.headers = collectHeaders(connection)
    state.bodyStartedMicros = server.nowMicros()
    server.headDeadline.headArrived(state.connectionID)
    let resolved = server.router.resolve(
        HTTPRequest(
            method: state.method, target: state.target, headers: state.headers,
            remoteAddress: state.remoteAddress, connectionID: state.connectionID))
    state.resolved = resolved
    // An answer queued now, before the body, also makes MHD close the connection after it
    // (and send no "100 Continue"): nothing more is read from it.
    if let refusal = ambiguousBodyFraming(state.headers) {
        return queue(refusal, routeName: resolved.routeName, on: connection, state, server)
    }
    if case .upload(let upload, let request) = resolved.resolution {
        return uploadHeadArrived(upload, request, connection, state, server)
    }
    if let declared = state.headers["Content-Length"], let length = Int(declared), length > 0 {
        guard length <= server.limits.bodyBytesMax else {
            return answerBodyTooLarge(connection, state, server)
        }
        // The body's room at once: grown by appends, a 375 KB batch was copied about once more
        // on the way (docs/benchmarks.md). No more than the body limit, which a body may fill
        // anyway; a declared length the body does not reach costs room that was never touched.
        state.body.reserveCapacity(length)
    }
    return .YES
}

/// The head of an upload: `admit` may refuse it, a declared length over `bytesMax` is refused,
/// and otherwise its file is created for the body to come. Every refusal is made before any body
/// byte is read, and no file is left.
private func uploadHeadArrived(
    _ upload: UploadRoute, _ request: HTTPRequest, _ connection: OpaquePointer, _ state: RequestState,
    _ server: ServerContext
) -> MHD_Result {
    let routeName = state.resolved?.routeName ?? Router.unmatchedRouteName
    if let refusal = upload.admit(request) {
        return queue(refusal, routeName: routeName, on: connection, state, server)
    }
    if let declared = state.headers["Content-Length"], let length = Int64(declared), length > upload.bytesMax
    {
        return queue(upload.tooLarge(), routeName: routeName, on: connection, state, server)
    }
    switch UploadFile.create(in: upload.directory) {
    case .created(let file):
        state.upload = file
        return .YES
    case .refused(let refusal):
        return queue(refusal, routeName: routeName, on: connection, state, server)
    }
}

/// A piece of the body, kept unless the body grows past `bodyBytesMax` or arrives too slowly.
private func bodyChunkArrived(
    _ uploadData: UnsafePointer<CChar>?, _ chunkBytes: Int, _ state: RequestState, _ server: ServerContext
) -> MHD_Result {
    let bodyBytesMax = server.limits.bodyBytesMax
    state.bytesReceived += chunkBytes
    if isBodyTooSlow(state, server) {
        server.log(
            "request body from \(state.remoteAddress) slower than \(server.limits.bodyBytesPerSecondMin) "
                + "bytes a second (bodyBytesPerSecondMin); connection closed")
        return .NO
    }
    if case .upload(let upload, _) = state.resolved?.resolution {
        return uploadChunkArrived(uploadData, chunkBytes, upload, state, server)
    }
    guard state.bytesReceived <= bodyBytesMax, state.answered == nil else {
        state.bodyTooLarge = true
        state.body = []
        // libmicrohttpd 0.9.75 refuses a response mid-body, so the 413 waits for the body's
        // end. Draining is bounded: past twice bodyBytesMax, close without an answer.
        return state.bytesReceived - bodyBytesMax > bodyBytesMax ? .NO : .YES
    }
    uploadData.map { data in
        data.withMemoryRebound(to: UInt8.self, capacity: chunkBytes) {
            state.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: chunkBytes))
        }
    }
    return .YES
}

/// A piece of an upload's body, written to its file unless the body has grown past `bytesMax`
/// (then the file goes, and the rest is drained up to a bound) or the file refused a write.
private func uploadChunkArrived(
    _ uploadData: UnsafePointer<CChar>?, _ chunkBytes: Int, _ upload: UploadRoute, _ state: RequestState,
    _ server: ServerContext
) -> MHD_Result {
    guard Int64(state.bytesReceived) <= upload.bytesMax else {
        state.bodyTooLarge = true
        state.upload?.remove()
        state.upload = nil
        // As for a body in memory, the 413 waits for the body's end; draining is bounded by the
        // smaller of the route's limit and the server's body limit, then the connection closes.
        let drainBytesMax = min(upload.bytesMax, Int64(server.limits.bodyBytesMax))
        return Int64(state.bytesReceived) - upload.bytesMax > drainBytesMax ? .NO : .YES
    }
    guard let file = state.upload, let uploadData else { return .YES }
    if let failure = file.append(UnsafeRawBufferPointer(start: uploadData, count: chunkBytes)) {
        state.uploadFailure = failure
        file.remove()
        state.upload = nil
    }
    return .YES
}

/// The whole request has arrived: its route answers now, on a worker, or later through a reply.
private func dispatch(_ connection: OpaquePointer, _ state: RequestState, _ server: ServerContext)
    -> MHD_Result
{
    guard let (routeName, resolution) = state.resolved else { return .NO }
    state.resolved = nil
    state.headers = HTTPHeaders()
    switch resolution {
    case .answer(let response):
        return queue(response, routeName: routeName, on: connection, state, server)
    case .blocking(let handler, var request):
        request.body = state.body
        state.body = []
        return dispatchBlocking(handler, request, routeName, connection, state, server)
    case .deferred(let handler, var request):
        request.body = state.body
        state.body = []
        let pending = server.pendingReply(connection, routeName: routeName)
        let workers = server.workers
        handler(request, HTTPReply({ pending.answer($0) }, runBlocking: { workers.submit($0) }))
        // An answer given before the handler returned (a refusal, a duplicate) goes out now.
        if let answer = pending.suspendUnlessAnswered() {
            server.forget(pending)
            return queue(answer, routeName: routeName, on: connection, state, server)
        }
        state.pending = pending
        return .YES
    case .upload(let upload, var request):
        // From here the file is the handler's (removed once it returns), not the request's.
        let file = state.upload
        state.upload = nil
        if let failure = state.uploadFailure ?? file?.finish() {
            file?.remove()
            return queue(failure, routeName: routeName, on: connection, state, server)
        }
        guard let file else { return .NO }
        request.bodyFile = BodyFile(path: file.path, bytes: file.bytes)
        return dispatchBlocking(upload.removingHandler, request, routeName, connection, state, server)
    }
}

private func dispatchBlocking(
    _ handler: @escaping Router.Handler, _ request: HTTPRequest, _ routeName: String,
    _ connection: OpaquePointer, _ state: RequestState, _ server: ServerContext
) -> MHD_Result {
    let pending = server.pendingReply(connection, routeName: routeName)
    if let answer = pending.suspendUnlessAnswered() {
        server.forget(pending)
        // The server is stopping: the handler never runs, so an upload's file goes now.
        if let path = request.bodyFile?.path { unlink(path) }
        return queue(answer, routeName: routeName, on: connection, state, server)
    }
    state.pending = pending
    server.workers.submit { pending.answer(handler(request)) }
    return .YES
}

func requestCompleted(
    _ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_RequestTerminationCode
) {
    guard let context, let statePointer = requestContext?.pointee else { return }
    requestContext?.pointee = nil
    let server = Unmanaged<ServerContext>.fromOpaque(context).takeUnretainedValue()
    let state = Unmanaged<RequestState>.fromOpaque(statePointer).takeRetainedValue()
    if let pending = state.pending { server.forget(pending) }
    // A body cut short, refused or timed out: no handler took its file.
    state.upload?.remove()
    server.requestEnded()
    server.headDeadline.requestEnded(state.connectionID)
    guard let observer = server.observer, let answered = state.answered else { return }
    let elapsed = (ContinuousClock.now - state.started).components
    observer(
        HTTPServer.Observation(
            routeName: answered.routeName, method: state.method, status: answered.status,
            durationMicros: elapsed.seconds * 1_000_000 + elapsed.attoseconds / 1_000_000_000_000))
}

private func answerBodyTooLarge(_ connection: OpaquePointer, _ state: RequestState, _ server: ServerContext)
    -> MHD_Result
{
    let routeName = state.resolved?.routeName ?? Router.unmatchedRouteName
    if case .upload(let upload, _) = state.resolved?.resolution {
        return queue(upload.tooLarge(), routeName: routeName, on: connection, state, server)
    }
    let limit = server.limits.bodyBytesMax
    let response = HTTPResponse.error(
        status: 413, code: "body_too_large",
        message: "the request body is larger than this server's limit of \(limit) bytes (bodyBytesMax); "
            + "send less per request, e.g. split a batch")
    return queue(response, routeName: routeName, on: connection, state, server)
}

/// A body must arrive at `bodyBytesPerSecondMin` on average once `bodyRateGraceSeconds` have
/// passed since its head: each byte buys 1/rate seconds. The idle timeout alone cannot stop a
/// client that sends a byte just inside it; checked whenever bytes arrive (a stalled body is the
/// idle timeout's), on the server's clock.
private func isBodyTooSlow(_ state: RequestState, _ server: ServerContext) -> Bool {
    let elapsedSeconds = Double(server.nowMicros() - state.bodyStartedMicros) / 1_000_000
    let allowedSeconds =
        Double(server.limits.bodyRateGraceSeconds)
        + Double(state.bytesReceived) / Double(server.limits.bodyBytesPerSecondMin)
    return elapsedSeconds > allowedSeconds
}

/// A 400 for a request whose body's end two parsers could place differently (RFC 9112 §6.3), or
/// nil. libmicrohttpd 0.9.75 lets `Transfer-Encoding` win over `Content-Length`, reads the first
/// of several `Content-Length` fields, and reads a body of an unknown coding until the connection
/// closes. A proxy in front that decides otherwise forwards the rest of the body as a request of
/// its own, unseen by the proxy (request smuggling); so such a request is refused, and the
/// connection closed, whatever its route.
func ambiguousBodyFraming(_ headers: HTTPHeaders) -> HTTPResponse? {
    // Runs on every request, so the common case (at most one Content-Length, or one
    // Transfer-Encoding alone) is one pass over the field names without copying a value.
    var lengthFields = 0
    var codingFields = 0
    for (name, _) in headers {
        if asciiCaseInsensitiveEquals(name, "Content-Length") {
            lengthFields += 1
        } else if asciiCaseInsensitiveEquals(name, "Transfer-Encoding") {
            codingFields += 1
        }
    }
    if lengthFields + codingFields == 0 || (lengthFields == 1 && codingFields == 0) { return nil }
    var lengths: [Substring] = []
    var codings: [Substring] = []
    for (name, value) in headers {
        if asciiCaseInsensitiveEquals(name, "Content-Length") {
            lengths.append(value.trimmingSpacesAndTabs())
        } else if asciiCaseInsensitiveEquals(name, "Transfer-Encoding") {
            // Untrimmed: libmicrohttpd compares the value as it holds it, blanks after the coding
            // included, and reads a `chunked ` body until the connection closes.
            codings.append(value[...])
        }
    }
    if !lengths.isEmpty && !codings.isEmpty {
        return .error(
            status: 400, code: "ambiguous_body_length",
            message: "the request has both Content-Length and Transfer-Encoding, so where its body ends "
                + "is ambiguous; send exactly one of them")
    }
    if lengths.dropFirst().contains(where: { $0 != lengths[0] }) {
        return .error(
            status: 400, code: "ambiguous_body_length",
            message:
                "the request has Content-Length fields with different values (\(lengths.joined(separator: ", "))); "
                + "send exactly one")
    }
    if !codings.isEmpty && (codings.count > 1 || !asciiCaseInsensitiveEquals(String(codings[0]), "chunked")) {
        return .error(
            status: 400, code: "unsupported_transfer_encoding",
            message: "Transfer-Encoding '\(codings.joined(separator: ", "))' is not supported; send the body "
                + "with Content-Length, or with a single 'Transfer-Encoding: chunked'")
    }
    return nil
}

extension String {
    /// Spaces and tabs are ASCII, so the UTF-8 positions found are also character boundaries.
    fileprivate func trimmingSpacesAndTabs() -> Substring {
        let bytes = utf8
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: { !isBlank($0) }) else { return self[endIndex...] }
        let last = bytes.lastIndex(where: { !isBlank($0) }) ?? first
        return self[first...last]
    }
}

private func queue(
    _ response: HTTPResponse, routeName: String, on connection: OpaquePointer, _ state: RequestState,
    _ server: ServerContext
) -> MHD_Result {
    var stream: StreamBuffer?
    let mhdResponse: OpaquePointer?
    if response.producer != nil || response.pusher != nil {
        var socket: Int32 = -1
        if let pusher = response.pusher {
            socket = findmy_mhd_connection_fd(connection)
            preparePushedSocket(socket, pusher)
        }
        let made = server.makeStream(on: connection, isPushed: response.pusher != nil, socket: socket)
        stream = made
        // Retained for MHD until its free callback (streamReleased); size unknown, so chunked.
        let retained = Unmanaged.passRetained(made)
        mhdResponse = MHD_create_response_from_callback(
            UInt64.max, 32 << 10, streamReaderCalled, retained.toOpaque(), streamReleased)
        if mhdResponse == nil { retained.release() }
    } else {
        mhdResponse = HeldBody.response(response.body, keptBuffers: server.keptBuffers)
    }
    guard let mhdResponse else { return .NO }
    defer { MHD_destroy_response(mhdResponse) }
    // MHD writes Content-Length and connection handling itself and would send duplicates.
    var choseCaching = false
    for (name, value) in response.headers
    where !asciiCaseInsensitiveEquals(name, "Content-Length")
        && !asciiCaseInsensitiveEquals(name, "Connection")
        && !asciiCaseInsensitiveEquals(name, "X-Content-Type-Options")
    {
        choseCaching = choseCaching || asciiCaseInsensitiveEquals(name, "Cache-Control")
        MHD_add_response_header(mhdResponse, name, value)
    }
    addSafetyHeaders(mhdResponse, choseCaching: choseCaching)
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    if result == .YES {
        state.answered = (routeName, response.status)
        if let stream, let producer = response.producer { server.startStream(stream, producer) }
        if let stream, let pusher = response.pusher { server.startPushed(stream, pusher) }
    }
    return result
}

/// Every answer forbids content sniffing (a JSON body is never run as a script or page); an
/// answer whose handler did not choose its caching is not stored anywhere, since most carry
/// locations or account data. Static files set their own `Cache-Control`. Added straight to the
/// MHD response while its headers are copied, not through a copy of `HTTPHeaders`: every answer
/// pays for this.
private func addSafetyHeaders(_ mhdResponse: OpaquePointer, choseCaching: Bool) {
    MHD_add_response_header(mhdResponse, "X-Content-Type-Options", "nosniff")
    if !choseCaching { MHD_add_response_header(mhdResponse, "Cache-Control", "no-store") }
}

private func collectHeaders(_ connection: OpaquePointer) -> HTTPHeaders {
    final class Collector { var headers = HTTPHeaders() }
    let collector = Collector()
    withExtendedLifetime(collector) {
        _ = MHD_get_connection_values(
            connection, .HEADER_KIND,
            { collectorPointer, _, name, value in
                guard let collectorPointer, let name else { return .YES }
                let collector = Unmanaged<Collector>.fromOpaque(collectorPointer).takeUnretainedValue()
                collector.headers.add(String(cString: name), value.map { String(cString: $0) } ?? "")
                return .YES
            }, Unmanaged.passUnretained(collector).toOpaque())
    }
    return collector.headers
}
