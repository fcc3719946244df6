import CCurl
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

// One HTTP/2 client per endpoint a feature calls (a push provider, headscale, webhook receivers):
// a libcurl multi handle driven by one thread of ours. This module is the one that calls libcurl.
// Requests to the same host share ONE TLS connection and travel as concurrent streams on it
// (CURLMOPT_PIPELINING = CURLPIPE_MULTIPLEX, CURLMOPT_MAX_HOST_CONNECTIONS = 1, CURLOPT_PIPEWAIT = 1:
// a new transfer waits for the connection being set up rather than opening a second one). Apple asks
// providers to keep their connections open rather than connect per notification, and reads repeated
// connects as a denial-of-service attempt; Google's and Web Push services gain the same way.
// The thread sleeps in curl_multi_poll; `send` and `close` wake it with curl_multi_wakeup. The
// multi handle and the thread come with the first `send`: a server builds clients for every
// channel it may use (ntfy's needs no configuration), and most never send; libcurl's global
// initialisation (OpenSSL, nghttp2, libssh2) and the thread's stack would be resident memory
// bought for nothing (docs/benchmarks.md, "Serve memory while ingesting").

/// A request as a provider sends it: a POST with a body, or (`isGet`, the headscale poller of
/// Presence) a GET.
public struct OutgoingRequest: Sendable {
    public var url: String
    /// `name: value` lines, as libcurl takes them.
    public var headers: [String]
    public var body: [UInt8]
    /// A GET without a body instead of the POST.
    public var isGet = false

    public init(url: String, headers: [String], body: [UInt8]) {
        self.url = url
        self.headers = headers
        self.body = body
    }

    /// A GET of `url`.
    public static func get(_ url: String, headers: [String]) -> OutgoingRequest {
        var request = OutgoingRequest(url: url, headers: headers, body: [])
        request.isGet = true
        return request
    }
}

/// What came back.
public struct IncomingResponse: Sendable, Equatable {
    public var status: Int
    /// Names lower-cased, as HTTP/2 sends them.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// 2 for HTTP/2, 1 for HTTP/1.x.
    public var httpMajorVersion: Int

    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }

    public static func == (lhs: IncomingResponse, rhs: IncomingResponse) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body && lhs.httpMajorVersion == rhs.httpMajorVersion
            && lhs.headers.map(\.name) == rhs.headers.map(\.name)
            && lhs.headers.map(\.value) == rhs.headers.map(\.value)
    }
}

/// Why no response came: the connection failed, TLS was refused, the time ran out, or the
/// client was closed. The text is libcurl's.
public struct TransportFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    /// Trying again will not help (a refused credential rather than a network failure).
    public var permanent = false
    public var description: String { message }

    public init(message: String, permanent: Bool = false) {
        self.message = message
        self.permanent = permanent
    }
}

public final class HTTP2Client: Sendable {
    public struct Options: Sendable {
        /// Trust this CA file instead of the system's (tests point it at a fake's certificate).
        public var caFile: String?
        public var requestTimeoutMillis = 30_000
        public var connectTimeoutMillis = 10_000
        /// A response body larger than this is cut off and the request fails: providers answer
        /// with a few hundred bytes of JSON.
        public var responseBytesMax = 64 * 1024
        /// Streams at once on the connection; the server's SETTINGS may allow fewer (APNs: 1,000).
        public var concurrentStreamsMax = 1000
        /// Requests handed to libcurl at once; the rest wait in our queue, in order. libcurl walks
        /// every transfer it holds on each pass, so a backlog of thousands there (a provider slower
        /// than the sends) costs more per request the longer it grows: at 1,000 pushes/s on a loaded
        /// machine the client collapsed to 140/s with requests timing out (docs/benchmarks.md,
        /// "Commands through the API"). Each waits for its turn here, cheaply, instead.
        public var transfersInCurlMax = 100
        /// For URLs a user gave (webhooks, UnifiedPush endpoints): every address a connection is
        /// opened to must pass it (checked in libcurl's socket callback, after resolution). nil for a
        /// provider or a server the operator configured.
        public var addressPolicy: AddressPolicy?

        public init(caFile: String? = nil, addressPolicy: AddressPolicy? = nil) {
            self.caFile = caFile
            self.addressPolicy = addressPolicy
        }
    }

    public let name: String
    let options: Options
    private let state: Mutex<State>
    /// New TLS connections made (libcurl's CURLINFO_NUM_CONNECTS summed): 1 while the one
    /// connection lives.
    private let connects = Atomic<Int>(0)

    struct State {
        var pending: [Transfer] = []
        var closing = false
        /// Both set by the first `send`, together.
        var multi: MultiHandle?
        var thread: pthread_t?
    }

    /// The multi handle, used only by the client's thread once created (and by curl_multi_wakeup,
    /// which libcurl allows from any thread).
    final class MultiHandle: @unchecked Sendable {
        let handle: UnsafeMutableRawPointer
        init() {
            _ = HTTP2Client.globalInit
            guard let handle = curl_multi_init() else { fatalError("curl_multi_init failed") }
            self.handle = handle
        }
    }

    static let globalInit: Bool = {
        _ = CurlEasy.globalInit
        precondition(findmy_curl_has_http2() == 1, "libcurl is built without HTTP/2 (nghttp2)")
        return true
    }()

    public init(name: String, options: Options = Options()) {
        self.name = name
        self.options = options
        self.state = Mutex(State())
    }

    /// The multi handle and the thread driving it, made under the state's lock by the first `send`.
    private func startIfNeeded(_ state: inout State) -> MultiHandle {
        if let multi = state.multi { return multi }
        let multi = MultiHandle()
        _ = findmy_curl_multi_setopt_long(multi.handle, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = findmy_curl_multi_setopt_long(multi.handle, CURLMOPT_MAX_HOST_CONNECTIONS, 1)
        _ = findmy_curl_multi_setopt_long(
            multi.handle, CURLMOPT_MAX_CONCURRENT_STREAMS, options.concurrentStreamsMax)
        state.multi = multi
        let client = self
        state.thread = spawnThread { client.run(multi) }
        return multi
    }

    /// Whether the client's thread runs: from its first `send` until `close`.
    package var isStarted: Bool { state.withLock { $0.thread != nil } }

    /// The connections this client has opened so far.
    public var connectionsOpened: Int { connects.load(ordering: .relaxed) }

    /// Queues `request`; `completion` runs once, on the client's thread, with the response or
    /// why there is none. Never blocks on the network.
    public func send(
        _ request: OutgoingRequest,
        completion: @escaping @Sendable (Result<IncomingResponse, TransportFailure>) -> Void
    ) {
        let transfer = Transfer(request: request, completion: completion, options: options)
        // The wake-up happens under the lock: `close` frees the multi handle only after setting
        // `closing` under it, so no wake-up can reach a freed handle.
        let accepted = state.withLock { state in
            guard !state.closing else { return false }
            let multi = startIfNeeded(&state)
            state.pending.append(transfer)
            // One wake-up per batch: the thread takes every pending request when it wakes.
            if state.pending.count == 1 { curl_multi_wakeup(multi.handle) }
            return true
        }
        guard accepted else {
            completion(.failure(TransportFailure(message: "the \(name) client is closed")))
            return
        }
    }

    /// Fails what is still queued or in flight, closes the connection and joins the thread.
    /// Idempotent.
    public func close() {
        let started: (MultiHandle, pthread_t)? = state.withLock { state in
            state.closing = true
            guard let multi = state.multi, let thread = state.thread.take() else { return nil }
            curl_multi_wakeup(multi.handle)
            return (multi, thread)
        }
        guard let (multi, running) = started else { return }
        pthread_join(running, nil)
        curl_multi_cleanup(multi.handle)
    }

    // MARK: the client's thread

    private func run(_ multi: MultiHandle) {
        var active: [UnsafeMutableRawPointer: Transfer] = [:]
        var waiting: [Transfer] = []
        var waitingHead = 0
        var running: Int32 = 0
        while true {
            let (incoming, closing) = state.withLock { state in
                defer { state.pending.removeAll() }
                return (state.pending, state.closing)
            }
            waiting += incoming
            if closing {
                for transfer in waiting[waitingHead...] {
                    transfer.finish(.failure(TransportFailure(message: "closed")))
                }
                for (easy, transfer) in active {
                    curl_multi_remove_handle(multi.handle, easy)
                    transfer.finish(.failure(TransportFailure(message: "the \(name) client closed")))
                    curl_easy_cleanup(easy)
                }
                return
            }
            while active.count < options.transfersInCurlMax, waitingHead < waiting.count {
                let transfer = waiting[waitingHead]
                waitingHead += 1
                guard let easy = transfer.makeEasy(options) else {
                    transfer.finish(.failure(TransportFailure(message: "curl_easy_init failed")))
                    continue
                }
                active[easy] = transfer
                curl_multi_add_handle(multi.handle, easy)
            }
            curl_multi_perform(multi.handle, &running)
            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi.handle, &queued) {
                var easy: UnsafeMutableRawPointer? = nil
                var result = CURLE_OK
                guard findmy_curl_message_done(message, &easy, &result) == 1, let easy,
                    let transfer = active.removeValue(forKey: easy)
                else { continue }
                curl_multi_remove_handle(multi.handle, easy)
                var connectCount = 0
                _ = findmy_curl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connectCount)
                connects.add(connectCount, ordering: .relaxed)
                transfer.finish(transfer.outcome(easy: easy, result: result))
                curl_easy_cleanup(easy)
            }
            if waitingHead == waiting.count || waitingHead >= 4096 {
                waiting.removeFirst(waitingHead)
                waitingHead = 0
            }
            // Slots freed with requests waiting: hand them on now rather than after the next event.
            let more = waitingHead < waiting.count && active.count < options.transfersInCurlMax
            curl_multi_poll(multi.handle, nil, 0, more ? 0 : 1000, nil)
        }
    }
}

/// One request in flight: the request, whom to tell, and the state its easy handle's callbacks fill.
final class Transfer: @unchecked Sendable {
    let request: OutgoingRequest
    let completion: @Sendable (Result<IncomingResponse, TransportFailure>) -> Void
    let state: CurlEasy

    init(
        request: OutgoingRequest,
        completion: @escaping @Sendable (Result<IncomingResponse, TransportFailure>) -> Void,
        options: HTTP2Client.Options
    ) {
        self.request = request
        self.completion = completion
        self.state = CurlEasy(
            bodyBytesMax: options.responseBytesMax, lowercaseHeaderNames: true,
            addressPolicy: options.addressPolicy)
    }

    func finish(_ result: Result<IncomingResponse, TransportFailure>) { completion(result) }

    func makeEasy(_ options: HTTP2Client.Options) -> UnsafeMutableRawPointer? {
        guard let easy = curl_easy_init() else { return nil }
        // HTTP/1.1 would otherwise wait for "100 Continue" before a large body; HTTP/2 ignores it.
        // The connection outlives this transfer, so no close callback (see `CurlEasy.attach`).
        state.attach(easy, headers: request.headers + ["Expect:"], closeCallback: false)
        _ = findmy_curl_easy_setopt_string(easy, CURLOPT_URL, request.url)
        if request.isGet {
            _ = findmy_curl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1)
        } else {
            _ = findmy_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
            _ = findmy_curl_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count))
            // libcurl copies the body at once (COPYPOSTFIELDS, size set just before); an empty body has
            // no base address, and any non-null pointer does for zero bytes.
            request.body.withUnsafeBytes {
                _ = findmy_curl_easy_setopt_pointer(
                    easy, CURLOPT_COPYPOSTFIELDS, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1))
            }
        }
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1)
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, options.requestTimeoutMillis)
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, options.connectTimeoutMillis)
        if let caFile = options.caFile { _ = findmy_curl_easy_setopt_string(easy, CURLOPT_CAINFO, caFile) }
        return easy
    }

    func outcome(easy: UnsafeMutableRawPointer, result: CURLcode) -> Result<
        IncomingResponse, TransportFailure
    > {
        guard result == CURLE_OK else {
            // A refused address is the user's configuration, not the network: retrying will not help.
            return .failure(
                TransportFailure(message: state.failureText(result), permanent: state.refusedAddress != nil))
        }
        var version = 0
        _ = findmy_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        return .success(
            IncomingResponse(
                status: CurlEasy.status(easy), headers: state.headerLines, body: state.body,
                httpMajorVersion: version == Int(CURL_HTTP_VERSION_2_0) ? 2 : 1))
    }
}
