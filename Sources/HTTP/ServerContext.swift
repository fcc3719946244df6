import CMicroHTTPD
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The server as the callbacks in Callbacks.swift reach it: through the context pointer given to
/// MHD_start_daemon, so that a C callback that captures nothing still finds the routes, the limits,
/// the workers and the requests in flight.
final class ServerContext: Sendable {
    let router: Router
    let limits: HTTPServer.Limits
    let observer: HTTPServer.Observer?
    let workers: WorkerPool
    let nowMicros: @Sendable () -> Int64
    /// Where a large answer's array goes once sent (`HeldBody`).
    let keptBuffers: KeptBuffers
    private let counters = Mutex(Counters())
    private let libraryLog: LibraryLog
    /// What MHD's logger option points at; freed in deinit, after MHD_stop_daemon.
    let logger: LoggerTarget
    let headDeadline: HeadDeadline

    private struct Counters {
        var connectionsOpened: UInt64 = 0
        /// Requests whose handler has not answered yet, so that stop() can answer them.
        var pending: [ObjectIdentifier: PendingReply] = [:]
        /// Streamed responses MHD still holds, so that stop() can cut them.
        var streams: [ObjectIdentifier: StreamBuffer] = [:]
        var stopping = false
    }

    init(
        router: Router, limits: HTTPServer.Limits, observer: HTTPServer.Observer?,
        logSink: HTTPServer.LogSink?, nowMicros: @escaping @Sendable () -> Int64,
        keptBuffers: KeptBuffers
    ) {
        self.router = router
        self.keptBuffers = keptBuffers
        self.limits = limits
        self.observer = observer
        workers = WorkerPool(threadsMax: limits.blockingThreadsMax)
        self.nowMicros = nowMicros
        let libraryLog = LibraryLog(
            sink: logSink ?? writeToStandardError, linesPerMinuteMax: limits.logLinesPerMinuteMax,
            nowMicros: nowMicros)
        self.libraryLog = libraryLog
        headDeadline = HeadDeadline(headSecondsMax: limits.requestHeadSecondsMax, nowMicros: nowMicros) {
            [headSecondsMax = limits.requestHeadSecondsMax] address in
            libraryLog.log(
                "request head from \(address) not complete within \(headSecondsMax) s "
                    + "(requestHeadSecondsMax); connection closed")
        }
        logger = LoggerTarget(pointer: .allocate(capacity: 1))
        // Unretained: the daemon, which alone calls the logger, holds its own retain of this context.
        logger.pointer.initialize(
            to: findmy_mhd_logger(
                line: libraryMessageArrived, context: Unmanaged.passUnretained(self).toOpaque()))
    }

    deinit {
        logger.pointer.deallocate()
    }

    /// A message for the log sink, from any thread, through the rate limit.
    func log(_ message: String) { libraryLog.log(message) }

    /// Reports messages the limit dropped since the last line, once the daemon has stopped.
    func finishLog() { libraryLog.finish() }

    /// A reply slot for a request about to be handed to its handler; already abandoned (answered
    /// 503) once the server is stopping, so that no connection is suspended after stop() looked.
    func pendingReply(_ connection: OpaquePointer, routeName: String) -> PendingReply {
        let pending = PendingReply(connection: connection, routeName: routeName)
        let stopping = counters.withLock {
            if !$0.stopping { $0.pending[ObjectIdentifier(pending)] = pending }
            return $0.stopping
        }
        if stopping { pending.abandon() }
        return pending
    }

    func forget(_ pending: PendingReply) {
        _ = counters.withLock { $0.pending.removeValue(forKey: ObjectIdentifier(pending)) }
    }

    /// The buffer of a streamed response about to be queued on `connection`.
    func makeStream(on connection: OpaquePointer, isPushed: Bool, socket: Int32) -> StreamBuffer {
        StreamBuffer(connection: connection, isPushed: isPushed, socket: socket) { [self] stream in
            _ = counters.withLock { $0.streams.removeValue(forKey: ObjectIdentifier(stream)) }
        }
    }

    /// A streamed response just queued: its producer starts on a worker thread. Already cut once
    /// the server is stopping.
    func startStream(_ stream: StreamBuffer, _ producer: @escaping ResponseStream.Producer) {
        let stopping = counters.withLock {
            if !$0.stopping { $0.streams[ObjectIdentifier(stream)] = stream }
            return $0.stopping
        }
        if stopping { stream.abandon() }
        workers.submit { stream.run(producer) }
    }

    /// A pushed response just queued: `opened` runs on a worker thread and returns at once; the
    /// stream is written later by whoever keeps it. Already cut once the server is stopping.
    func startPushed(_ stream: StreamBuffer, _ setup: PushSetup) {
        let stopping = counters.withLock {
            if !$0.stopping { $0.streams[ObjectIdentifier(stream)] = stream }
            return $0.stopping
        }
        if stopping { stream.abandon() }
        let pushed = PushedStream(buffer: stream, bufferedBytesMax: setup.bufferedBytesMax)
        workers.submit { setup.opened(pushed) }
    }

    /// Cuts every pushed stream: they never end by themselves, so stop() would otherwise wait out
    /// its whole grace period for them.
    func cutPushedStreams() {
        let pushed = counters.withLock { $0.streams.values.filter(\.isPushed) }
        for stream in pushed { stream.abandon() }
    }

    /// Answers every request still waiting for its handler with 503 and resumes its connection;
    /// handlers that answer later are ignored. Cuts every streamed response still being sent, and
    /// resumes its connection if it waits for its producer. MHD_stop_daemon must not see a
    /// suspended connection.
    func abandonPending() {
        let (pending, streams) = counters.withLock {
            $0.stopping = true
            return (Array($0.pending.values), Array($0.streams.values))
        }
        for reply in pending { reply.abandon() }
        for stream in streams { stream.abandon() }
    }

    /// Requests between their request line and their completion; `stop` waits on it reaching 0.
    private let inFlight = ConditionLock()
    private nonisolated(unsafe) var inFlightCount = 0

    var requestsInFlight: Int { inFlight.withLock { inFlightCount } }

    /// Sleeps until no request is in flight or the monotonic deadline passes; returns whether none is.
    func waitForRequestsInFlight(untilMonotonicMicros deadline: Int64) -> Bool {
        inFlight.withLock {
            while inFlightCount > 0 {
                if !inFlight.wait(0, untilMonotonicMicros: deadline) { break }
            }
            return inFlightCount == 0
        }
    }

    func nextConnectionID() -> UInt64 {
        counters.withLock {
            $0.connectionsOpened += 1
            return $0.connectionsOpened
        }
    }

    func requestStarted() { inFlight.withLock { inFlightCount += 1 } }

    func requestEnded() {
        inFlight.withLock {
            inFlightCount -= 1
            if inFlightCount == 0 { inFlight.broadcast() }
        }
    }
}

/// The log sink behind its rate limit.
final class LibraryLog: Sendable {
    private let sink: HTTPServer.LogSink
    private let limiter: Mutex<LogRateLimiter>
    private let nowMicros: @Sendable () -> Int64

    init(
        sink: @escaping HTTPServer.LogSink, linesPerMinuteMax: Int, nowMicros: @escaping @Sendable () -> Int64
    ) {
        self.sink = sink
        limiter = Mutex(LogRateLimiter(linesPerMinuteMax: linesPerMinuteMax))
        self.nowMicros = nowMicros
    }

    func log(_ message: String) {
        var text = Substring(message)
        while let last = text.last, last == "\n" || last == " " { text = text.dropLast() }
        limiter.withLock { limiter in
            // Written under the lock, so a dropped count comes out before the line it precedes.
            for line in limiter.admit(String(text), nowMicros: nowMicros()) { sink(line) }
        }
    }

    func finish() {
        limiter.withLock { limiter in
            for line in limiter.finish() { sink(line) }
        }
    }
}

/// MHD's logger context: a C struct naming the Swift function and the server.
struct LoggerTarget: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<findmy_mhd_logger>
}

private func writeToStandardError(_ line: LogLine) {
    let text: String
    switch line {
    case .message(let message): text = "libmicrohttpd: \(message)\n"
    case .dropped(let count): text = "libmicrohttpd: \(count) more messages dropped by the rate limit\n"
    }
    var bytes = Array(text.utf8)
    _ = Glibc.write(2, &bytes, bytes.count)
}

/// libmicrohttpd's logger, called through `findmy_mhd_log` (shim.h) with one formatted message.
func libraryMessageArrived(_ context: UnsafeMutableRawPointer?, _ text: UnsafePointer<CChar>?) {
    guard let context, let text else { return }
    Unmanaged<ServerContext>.fromOpaque(context).takeUnretainedValue().log(String(cString: text))
}
