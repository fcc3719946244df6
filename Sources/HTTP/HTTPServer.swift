import CMicroHTTPD
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// An HTTP/1.1 server on libmicrohttpd: a few event-loop threads (epoll) read requests and write
/// responses for every connection; blocking handlers run on a pool of worker threads and deferred
/// handlers answer when their work completes, each while MHD holds its connection suspended. So a
/// handler may block (on PostgreSQL, say) without holding up other connections, and a deferred
/// one (the report's durable append) costs no thread while it waits. See docs/http.md.
public final class HTTPServer: Sendable {
    /// Every limit the server enforces, each with its unit. See docs/http.md.
    public struct Limits: Sendable {
        /// A larger body answers 413 (checked against `Content-Length` up front, and while a
        /// chunked body arrives).
        public var bodyBytesMax: Int
        /// Per-connection memory for the request line and headers (MHD's connection memory pool).
        /// Over it, libmicrohttpd itself answers 431 and closes the connection.
        public var headerBytesMax: Int
        /// Connections served at once; at its share a thread stops accepting, so further ones wait
        /// in the kernel's listen queue.
        public var connectionsMax: Int
        /// A connection idle this long (a stalled body, a quiet keep-alive) is closed; a request
        /// whose body never completes never reaches its handler. A request waiting for its
        /// handler is not idle (MHD does not time out a suspended connection).
        public var requestTimeoutSeconds: Int
        /// libmicrohttpd's event-loop threads (MHD_OPTION_THREAD_POOL_SIZE); each serves its
        /// share of the connections, and `connectionsMax` is split among them.
        public var eventLoopThreads: Int
        /// Blocking handlers running at once; further ones wait for a free worker thread.
        public var blockingThreadsMax: Int
        /// Connections one client IP address may hold at once (MHD_OPTION_PER_IP_CONNECTION_LIMIT);
        /// further ones are accepted and closed at once. 0: no such limit (behind a reverse proxy on
        /// the same host, every connection comes from the proxy's address).
        public var connectionsPerAddressMax: Int
        /// After `bodyRateGraceSeconds`, a request body must keep arriving at this average rate
        /// or its connection is closed without an answer (a body trickled to hold a connection).
        public var bodyBytesPerSecondMin: Int
        /// How long a body may take before `bodyBytesPerSecondMin` applies, counted from the end
        /// of the request head.
        public var bodyRateGraceSeconds: Int
        /// A connection must deliver a complete request head within this long of opening or of
        /// its previous answer, or it is closed (a head trickled to hold a connection).
        public var requestHeadSecondsMax: Int
        /// Messages passed to the log sink per minute (libmicrohttpd's, and the server's about slow
        /// clients); the rest are counted, and the count is logged with the next line let through.
        public var logLinesPerMinuteMax: Int

        public init(
            bodyBytesMax: Int = 16 << 20, headerBytesMax: Int = 32 << 10, connectionsMax: Int = 512,
            requestTimeoutSeconds: Int = 30, eventLoopThreads: Int = 2, blockingThreadsMax: Int = 64,
            connectionsPerAddressMax: Int = 128, bodyBytesPerSecondMin: Int = 512,
            bodyRateGraceSeconds: Int = 10,
            requestHeadSecondsMax: Int = 30, logLinesPerMinuteMax: Int = 60
        ) {
            precondition(bodyBytesMax >= 0 && headerBytesMax >= 4096 && connectionsMax > 0)
            precondition(requestTimeoutSeconds > 0 && blockingThreadsMax > 0)
            precondition(eventLoopThreads > 0 && connectionsPerAddressMax >= 0)
            precondition(bodyBytesPerSecondMin > 0 && bodyRateGraceSeconds >= 0 && logLinesPerMinuteMax > 0)
            precondition(requestHeadSecondsMax > 0)
            self.bodyBytesMax = bodyBytesMax
            self.headerBytesMax = headerBytesMax
            self.connectionsMax = connectionsMax
            self.requestTimeoutSeconds = requestTimeoutSeconds
            self.eventLoopThreads = eventLoopThreads
            self.blockingThreadsMax = blockingThreadsMax
            self.connectionsPerAddressMax = connectionsPerAddressMax
            self.bodyBytesPerSecondMin = bodyBytesPerSecondMin
            self.bodyRateGraceSeconds = bodyRateGraceSeconds
            self.requestHeadSecondsMax = requestHeadSecondsMax
            self.logLinesPerMinuteMax = logLinesPerMinuteMax
        }
    }

    /// One answered request, for metrics.
    public struct Observation: Sendable {
        /// The route's pattern, or `Router.unmatchedRouteName`.
        public var routeName: String
        public var method: String
        public var status: Int
        /// From the request line's arrival to the response's last byte handed to the kernel.
        public var durationMicros: Int64
    }

    /// Called on an event-loop thread after each response; keep it quick.
    public typealias Observer = @Sendable (Observation) -> Void

    /// Receives libmicrohttpd's own messages (a client that left mid-request, a refused
    /// connection) and the server's about slow clients (a head or body cut off), at most
    /// `Limits.logLinesPerMinuteMax` a minute, from any thread.
    public typealias LogSink = @Sendable (LogLine) -> Void

    /// The clock the server's rate rules read: monotonic microseconds.
    public static let systemMonotonicMicros: @Sendable () -> Int64 = {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    /// The address as given to `start`.
    public let listenAddress: String
    /// The bound TCP port (useful after asking for port 0); 0 on a unix socket.
    public let port: Int

    private let context: ServerContext
    private let daemon: Mutex<DaemonHandle?>
    private let unixPath: String?

    private init(
        listenAddress: String, port: Int, context: ServerContext, daemon: DaemonHandle, unixPath: String?
    ) {
        self.listenAddress = listenAddress
        self.port = port
        self.context = context
        self.daemon = Mutex(daemon)
        self.unixPath = unixPath
    }

    /// Starts serving on `listen`: `127.0.0.1:8080` (port 0 picks a free port), `localhost:8080`,
    /// or `unix:/run/findmy/http.sock` (created mode 0600; a stale socket file is replaced).
    ///
    /// - Parameters:
    ///   - logSink: where libmicrohttpd's messages go (rate-limited); without one, to standard error.
    ///   - nowMicros: the clock of `requestHeadSecondsMax`, `bodyBytesPerSecondMin` and
    ///     `logLinesPerMinuteMax`; tests move it.
    ///   - keptBuffers: where the arrays of large answers go once sent, for the next answer to take
    ///     (`KeptBuffers.take`); tests give a pool of their own.
    public static func start(
        listen: String, router: Router, limits: Limits = Limits(), observer: Observer? = nil,
        logSink: LogSink? = nil, nowMicros: @escaping @Sendable () -> Int64 = systemMonotonicMicros,
        keptBuffers: KeptBuffers = .shared
    ) throws(HTTPServerError) -> HTTPServer {
        let address = try ListenAddress(parsing: listen)
        let fd = try openListeningSocket(address, text: listen)
        var unixPath: String?
        if case .unix(let path) = address { unixPath = path }
        let context = ServerContext(
            router: router, limits: limits, observer: observer, logSink: logSink, nowMicros: nowMicros,
            keptBuffers: keptBuffers)
        // MHD_USE_ERROR_LOG with the logger option: MHD's messages go to the log sink, never to
        // standard error.
        let flags =
            MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            | MHD_USE_ERROR_LOG.rawValue
        // The daemon holds this retain until stop() releases it after MHD_stop_daemon.
        let contextPointer = Unmanaged.passRetained(context).toOpaque()
        context.headDeadline.start()
        guard
            let daemon = findmy_mhd_start(
                flags, fd, UInt32(limits.connectionsMax), UInt32(limits.connectionsPerAddressMax),
                limits.headerBytesMax, UInt32(limits.requestTimeoutSeconds),
                UInt32(min(limits.eventLoopThreads, limits.connectionsMax)),
                accessHandler, contextPointer, requestCompleted,
                connectionNotified, requestLineArrived, context.logger.pointer)
        else {
            context.headDeadline.stop()
            Unmanaged<ServerContext>.fromOpaque(contextPointer).release()
            close(fd)
            if let unixPath { unlink(unixPath) }
            throw .daemonFailed(listen)
        }
        let port = unixPath == nil ? Int(findmy_mhd_bound_port(daemon)) : 0
        return HTTPServer(
            listenAddress: listen, port: port, context: context, daemon: DaemonHandle(pointer: daemon),
            unixPath: unixPath)
    }

    /// Stops accepting connections at once, lets requests already in progress finish (for at most
    /// `gracePeriodSeconds`), answers 503 to those still waiting for their handler, then closes
    /// every connection. Idempotent.
    public func stop(gracePeriodSeconds: Double = 10) {
        daemon.withLock { handle in
            guard let daemon = handle?.pointer else { return }
            handle = nil
            let fd = MHD_quiesce_daemon(daemon)
            if fd >= 0 { close(fd) }
            if let unixPath { unlink(unixPath) }
            let deadline = monotonicMicros() + Int64(gracePeriodSeconds * 1_000_000)
            context.cutPushedStreams()
            _ = context.waitForRequestsInFlight(untilMonotonicMicros: deadline)
            context.abandonPending()
            MHD_stop_daemon(daemon)
            context.headDeadline.stop()
            context.finishLog()
            context.workers.stop()
            Unmanaged.passUnretained(context).release()
        }
    }

    deinit {
        stop(gracePeriodSeconds: 0)
    }
}

/// MHD's daemon functions are thread-safe; the mutex around the handle only makes stop() run once.
struct DaemonHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
