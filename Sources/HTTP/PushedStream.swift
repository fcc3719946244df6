import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A response body that whoever holds this handle writes, from any thread, for as long as it
/// likes: server-sent events. Unlike `HTTPResponse.streamed`, no thread is held for the body's
/// life: a write hands its bytes to the connection's buffer and returns at once, and the
/// connection's event-loop thread sends them. A long-lived stream costs its connection, its
/// buffer (at most `bufferedBytesMax`) and the holder's bookkeeping, never a worker thread.
///
/// A write that would buffer more than `bufferedBytesMax` for a client that does not read cuts
/// the stream (its connection is closed): an event source that keeps writing to a dead reader must
/// not grow without bound.
public final class PushedStream: Sendable {
    private let buffer: any PushSink
    public let bufferedBytesMax: Int

    init(buffer: any PushSink, bufferedBytesMax: Int) {
        self.buffer = buffer
        self.bufferedBytesMax = bufferedBytesMax
    }

    /// Hands `bytes` to the connection; false when the stream is over (the client left, it was
    /// closed, the server stopped) or was cut now because the client is too far behind.
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        buffer.offer(bytes, bytesMax: bufferedBytesMax)
    }

    /// Ends the stream by closing its connection (no last chunk: the client sees the stream cut,
    /// and reconnects). Idempotent.
    public func close() { buffer.abandon() }

    /// True once nothing more can be sent.
    public var isClosed: Bool { buffer.isClosed }

    /// Runs `handler` once, on any thread, when the stream is over for whatever reason; at once if
    /// it is already. It must not wait for anything that may be waiting to write to this stream.
    public func onClose(_ handler: @escaping @Sendable () -> Void) { buffer.onClose(handler) }

    /// Whether the client has closed its end or the connection has failed, found out without
    /// waiting: a peek at the socket for its end (a read of 0 bytes) or an error (a reset, or the
    /// kernel's give-up on unacknowledged data, `TCP_USER_TIMEOUT`). A client that vanished
    /// without a word is found out only through the latter, after data sent to it stayed
    /// unacknowledged. Cuts the stream when it says true.
    ///
    /// The socket number was read when the response was queued. Should MHD close the connection
    /// on its own just before this looks, the number may name another connection for a moment:
    /// a peek takes nothing from it, and a wrong answer then only ends a stream that was over.
    public func peerHasLeft() -> Bool {
        if buffer.isClosed { return true }
        // Not a TCP or Unix socket MHD told of: nothing to look at; the next write says.
        guard buffer.socket >= 0 else { return false }
        var byte: UInt8 = 0
        let count = recv(buffer.socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        let left = count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        if left { close() }
        return left
    }
}

/// Where a pushed stream's bytes go: the connection (`StreamBuffer`), or memory in-process.
protocol PushSink: AnyObject, Sendable {
    var isClosed: Bool { get }
    /// The connection's socket; -1 when there is none to look at.
    var socket: Int32 { get }
    func offer(_ chunk: [UInt8], bytesMax: Int) -> Bool
    func abandon()
    func onClose(_ handler: @escaping @Sendable () -> Void)
}

extension StreamBuffer: PushSink {}

/// A pushed stream answered in-process (`Router.respond`): what is written before it closes.
final class MemoryPushSink: PushSink {
    private let state = Mutex(State())
    private struct State {
        var bytes: [UInt8] = []
        var closed = false
        var handlers: [@Sendable () -> Void] = []
    }

    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var isClosed: Bool { state.withLock { $0.closed } }
    var socket: Int32 { -1 }

    func offer(_ chunk: [UInt8], bytesMax: Int) -> Bool {
        state.withLock {
            guard !$0.closed else { return false }
            $0.bytes += chunk
            return true
        }
    }

    func abandon() {
        let handlers = state.withLock { state in
            state.closed = true
            defer { state.handlers = [] }
            return state.handlers
        }
        for handler in handlers { handler() }
    }

    func onClose(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock {
            if $0.closed { return true }
            $0.handlers.append(handler)
            return false
        }
        if now { handler() }
    }
}

/// How a pushed response is started (`HTTPResponse.pushed`).
struct PushSetup: Sendable {
    var bufferedBytesMax: Int
    /// Set as the socket's `TCP_USER_TIMEOUT`: sent data unacknowledged this long fails the
    /// connection, so a client gone without a word is noticed. Nil: the kernel's default.
    var unacknowledgedSecondsMax: Int?
    var opened: @Sendable (PushedStream) -> Void
}

extension HTTPResponse {
    /// A body written after the handler returned, by whoever keeps the `PushedStream` that
    /// `opened` receives (see `PushedStream`). The status and headers go out first, chunked; then
    /// `opened` runs on a worker thread and must return at once (register the stream, write what
    /// is due now). In-process (`Router.respond`) the body is what `opened` wrote, and the stream
    /// is over when it returns.
    ///
    /// - Parameters:
    ///   - bufferedBytesMax: bytes held for a client that does not read before the stream is cut.
    ///   - unacknowledgedSecondsMax: see `PushSetup`; for a stream that writes at least this often
    ///     (a heartbeat), a client gone without closing is noticed within about twice this.
    public static func pushed(
        status: Int = 200, headers: HTTPHeaders = HTTPHeaders(), bufferedBytesMax: Int = 64 << 10,
        unacknowledgedSecondsMax: Int? = nil, _ opened: @escaping @Sendable (PushedStream) -> Void
    ) -> HTTPResponse {
        precondition(bufferedBytesMax > 0)
        var response = HTTPResponse(status: status, headers: headers)
        response.pusher = PushSetup(
            bufferedBytesMax: bufferedBytesMax, unacknowledgedSecondsMax: unacknowledgedSecondsMax,
            opened: opened)
        return response
    }
}

/// Applies what a pushed response asks of its socket, on the connection's event-loop thread
/// (which owns the socket while it runs).
func preparePushedSocket(_ socket: Int32, _ setup: PushSetup) {
    guard socket >= 0, let seconds = setup.unacknowledgedSecondsMax, seconds > 0 else { return }
    var millis = UInt32(min(seconds, Int(UInt32.max / 1000)) * 1000)
    // Fails on a Unix socket (no TCP): nothing to set there, a local peer's end is always seen.
    _ = setsockopt(
        socket, Int32(IPPROTO_TCP), tcpUserTimeoutOption, &millis, socklen_t(MemoryLayout<UInt32>.size))
}

/// `TCP_USER_TIMEOUT` of <netinet/tcp.h> (Linux, since 2.6.37).
private let tcpUserTimeoutOption: Int32 = 18
