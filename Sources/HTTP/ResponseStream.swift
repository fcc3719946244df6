import CMicroHTTPD
import Synchronization
import Threads

/// Where a streamed response's body goes: the client's connection (`StreamBuffer`) or, for
/// `Router.respond`, memory.
protocol StreamSink: AnyObject, Sendable {
    /// True once nothing more can be delivered (the client left, the server stopped).
    var isClosed: Bool { get }
    /// Takes a full chunk, waiting while the client is behind; throws once it is gone.
    func deliver(_ chunk: [UInt8]) throws(ResponseStreamError)
}

/// Why a streamed response's `write` failed: nobody will read what follows.
public enum ResponseStreamError: Error, Equatable, CustomStringConvertible {
    /// The client closed its connection, or the server stopped and closed it.
    case closed

    public var description: String { "the client is gone; the rest of the response cannot be sent" }
}

/// The body of a streamed response as its producer writes it. Writes are gathered into chunks of
/// `chunkBytes`, each handed to the sink whole, so a producer writing row by row pays for a lock
/// once a chunk, not once a row.
public struct ResponseStream {
    public typealias Producer = @Sendable (inout ResponseStream) throws -> Void

    /// Bytes gathered before they go to the client (and the size of each buffered chunk).
    static let chunkBytes = 64 << 10

    private let sink: any StreamSink
    private var pending: [UInt8] = []

    init(sink: any StreamSink) {
        self.sink = sink
        pending.reserveCapacity(Self.chunkBytes)
    }

    /// Appends `bytes` to the body; blocks while the client is behind, throws
    /// `ResponseStreamError.closed` once it is gone.
    public mutating func write(_ bytes: UnsafeRawBufferPointer) throws {
        if sink.isClosed { throw ResponseStreamError.closed }
        var rest = bytes[...]
        while !rest.isEmpty {
            let room = Self.chunkBytes - pending.count
            pending.append(contentsOf: rest.prefix(room))
            rest = rest.dropFirst(room)
            if pending.count == Self.chunkBytes { try handOver() }
        }
    }

    public mutating func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// Sends what has been written so far without waiting for a full chunk.
    public mutating func flush() throws {
        if !pending.isEmpty { try handOver() }
    }

    private mutating func handOver() throws {
        var chunk: [UInt8] = []
        chunk.reserveCapacity(Self.chunkBytes)
        swap(&chunk, &pending)
        try sink.deliver(chunk)
    }
}

extension HTTPResponse {
    /// A body written while it is sent, with chunked framing: `produce` runs on a worker thread of
    /// the server; `write` blocks while the client is behind (a few chunks are buffered, so memory
    /// stays flat whatever the body's size) and throws once the client is gone. The status and
    /// headers go out before `produce` runs, so check everything that can be refused first: an
    /// error thrown by `produce` ends the connection without the last chunk (the client sees a cut
    /// body, never a complete-looking one).
    public static func streamed(
        status: Int = 200, headers: HTTPHeaders = HTTPHeaders(),
        _ produce: @escaping @Sendable (inout ResponseStream) throws -> Void
    ) -> HTTPResponse {
        var response = HTTPResponse(status: status, headers: headers)
        response.producer = produce
        return response
    }

    /// The response with a streamed body produced into `body`, for in-process callers.
    func produced() -> HTTPResponse {
        if let pusher { return pushedInProcess(pusher) }
        guard let producer else { return self }
        let collected = CollectedBody()
        var stream = ResponseStream(sink: collected)
        do {
            try producer(&stream)
            try stream.flush()
        } catch {
            return .error(
                status: 500, code: "stream_failed",
                message: "the response failed while it was written (\(error)); try again")
        }
        var response = HTTPResponse(status: status, headers: headers)
        response.body = collected.bytes.withLock { $0 }
        return response
    }
}

extension HTTPResponse {
    /// A pushed response for an in-process caller: what `opened` wrote before it returned; the
    /// stream is over then (its close handlers run).
    fileprivate func pushedInProcess(_ pusher: PushSetup) -> HTTPResponse {
        let memory = MemoryPushSink()
        let stream = PushedStream(buffer: memory, bufferedBytesMax: pusher.bufferedBytesMax)
        pusher.opened(stream)
        stream.close()
        var response = HTTPResponse(status: status, headers: headers)
        response.body = memory.bytes
        return response
    }
}

/// `Router.respond`'s sink: the whole body in memory.
private final class CollectedBody: StreamSink {
    let bytes = Mutex<[UInt8]>([])
    var isClosed: Bool { false }
    func deliver(_ chunk: [UInt8]) throws(ResponseStreamError) {
        bytes.withLock { $0 += chunk }
    }
}

/// The chunks between a streamed response's producer (a worker thread) and MHD's content reader
/// (the connection's event-loop thread, which must never wait). At most `chunksMax` chunks are
/// held; the producer waits for room. With nothing to give, the reader suspends the connection and
/// returns 0 (MHD calls it again once resumed; returning 0 without suspending would spin), and the
/// producer's next chunk, its end or its failure resumes it.
///
/// The suspension happens under `lock`, so a resume always follows its suspend. The resume itself
/// is made outside the lock by whoever clears `readerSuspended`: a suspended connection is never
/// closed by MHD, so it is still there.
final class StreamBuffer: StreamSink, @unchecked Sendable {
    static let chunksMax = 4

    private let connection: OpaquePointer
    /// Tells the server the stream is over, so that stop() no longer looks for it.
    private let forget: @Sendable (StreamBuffer) -> Void
    /// A pushed stream (`HTTPResponse.pushed`): never ends by itself, so stop() cuts it at once.
    let isPushed: Bool
    /// The connection's socket, read on its event-loop thread when the response was queued; -1
    /// when MHD did not say. For `PushedStream.peerHasLeft` only.
    let socket: Int32
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var chunks: [[UInt8]] = []
    private var headOffset = 0
    private var bufferedBytes = 0
    private var readerSuspended = false
    private var end = End.open
    private var closeHandlers: [@Sendable () -> Void] = []
    /// Set once MHD released the response (sent, or the connection closed) or the server stopped.
    private let gone = Atomic(false)

    private enum End {
        case open
        case finished
        case failed
    }

    init(
        connection: OpaquePointer, isPushed: Bool = false, socket: Int32 = -1,
        forget: @escaping @Sendable (StreamBuffer) -> Void
    ) {
        self.connection = connection
        self.isPushed = isPushed
        self.socket = socket
        self.forget = forget
    }

    var isClosed: Bool { gone.load(ordering: .relaxed) }

    func deliver(_ chunk: [UInt8]) throws(ResponseStreamError) {
        lock.lock()
        while chunks.count >= Self.chunksMax && !isClosed { lock.wait() }
        if isClosed {
            lock.unlock()
            throw .closed
        }
        chunks.append(chunk)
        let resume = takeSuspension()
        lock.unlock()
        if resume { MHD_resume_connection(connection) }
    }

    /// A pushed stream's write: never waits. False, and the stream cut (its connection closed),
    /// when the client has not read what is buffered and `bytesMax` would be passed; false when
    /// the stream is already over.
    func offer(_ chunk: [UInt8], bytesMax: Int) -> Bool {
        lock.lock()
        if isClosed {
            lock.unlock()
            return false
        }
        if bufferedBytes + chunk.count > bytesMax {
            lock.unlock()
            abandon()
            return false
        }
        chunks.append(chunk)
        bufferedBytes += chunk.count
        let resume = takeSuspension()
        lock.unlock()
        if resume { MHD_resume_connection(connection) }
        return true
    }

    /// Runs `handler` once the stream is over (released by MHD, or cut); at once when it is.
    func onClose(_ handler: @escaping @Sendable () -> Void) {
        let now = lock.withLock {
            if isClosed { return true }
            closeHandlers.append(handler)
            return false
        }
        if now { handler() }
    }

    private func runCloseHandlers() {
        let handlers = lock.withLock {
            defer { closeHandlers = [] }
            return closeHandlers
        }
        for handler in handlers { handler() }
    }

    /// Runs the producer to its end on the calling (worker) thread.
    func run(_ producer: ResponseStream.Producer) {
        var stream = ResponseStream(sink: self)
        var outcome = End.finished
        do {
            try producer(&stream)
            try stream.flush()
        } catch {
            outcome = .failed
        }
        let resume = lock.withLock {
            end = outcome
            return takeSuspension()
        }
        if resume { MHD_resume_connection(connection) }
    }

    /// MHD's content reader: what the buffer holds, up to `max` bytes; or the end; or 0 with the
    /// connection suspended.
    func read(into buffer: UnsafeMutableRawPointer, max: Int) -> Int {
        lock.withLock {
            if isClosed { return endWithError }
            guard let head = chunks.first else {
                switch end {
                case .finished: return endOfStream
                case .failed: return endWithError
                case .open:
                    readerSuspended = true
                    MHD_suspend_connection(connection)
                    return 0
                }
            }
            let count = min(max, head.count - headOffset)
            head.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress! + headOffset, byteCount: count) }
            headOffset += count
            bufferedBytes -= count
            if headOffset == head.count {
                chunks.removeFirst()
                headOffset = 0
                lock.signal()
            }
            return count
        }
    }

    /// MHD released the response: sent whole, or the connection closed. The producer's next write
    /// throws, and one waiting for room wakes to throw.
    func released() {
        lock.withLock {
            gone.store(true, ordering: .relaxed)
            chunks = []
            bufferedBytes = 0
            lock.broadcast()
        }
        forget(self)
        runCloseHandlers()
    }

    /// From stop(), after the grace period: the body is cut, and a suspended connection resumed
    /// so that MHD can close it (MHD_stop_daemon must not meet a suspended connection).
    func abandon() {
        let resume = lock.withLock {
            gone.store(true, ordering: .relaxed)
            lock.broadcast()
            return takeSuspension()
        }
        if resume { MHD_resume_connection(connection) }
        runCloseHandlers()
    }

    /// Under `lock`: whether the caller must resume the connection (and now owns that duty).
    private func takeSuspension() -> Bool {
        defer { readerSuspended = false }
        return readerSuspended
    }

    /// MHD_CONTENT_READER_END_OF_STREAM and MHD_CONTENT_READER_END_WITH_ERROR, macros with casts
    /// that Swift does not import.
    private var endOfStream: Int { -1 }
    private var endWithError: Int { -2 }
}

/// MHD_ContentReaderCallback: `context` is the retained `StreamBuffer`.
func streamReaderCalled(
    _ context: UnsafeMutableRawPointer?, _ position: UInt64, _ buffer: UnsafeMutablePointer<CChar>?,
    _ max: Int
) -> Int {
    guard let context, let buffer else { return -2 }
    return Unmanaged<StreamBuffer>.fromOpaque(context).takeUnretainedValue().read(into: buffer, max: max)
}

/// MHD_ContentReaderFreeCallback: MHD is done with the response; releases its retain.
func streamReleased(_ context: UnsafeMutableRawPointer?) {
    guard let context else { return }
    Unmanaged<StreamBuffer>.fromOpaque(context).takeRetainedValue().released()
}
