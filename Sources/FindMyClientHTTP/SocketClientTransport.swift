// FindMyClient's transport for programs that must stay small (the agent, and the tests): HTTP/1.1
// over POSIX sockets, TLS through Crypto's TLSClientStream (OpenSSL's libssl) with the server's
// certificate checked against the system's CA store. No libcurl: it would bring its protocols'
// libraries (GnuTLS through librtmp, Kerberos, LDAP, SSH) into the process, several megabytes
// resident (docs/benchmarks.md, the agent). No proxy support: the agent talks to its server directly.
// Each exchange runs on a thread of its own (the I/O blocks); connections of finished requests are
// kept for the next one to the same server.
import FindMyClient
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

public final class SocketClientTransport: ClientTransport {
    /// Connecting, and each wait for the next byte of an answer, gives up after this long.
    public let timeoutSeconds: Int
    /// A stream that sends nothing (not even a heartbeat, every 25 s by default) for this long is
    /// taken as cut.
    public let streamIdleSeconds: Int
    /// PEM certificates to trust instead of the system's CA store (a private CA); nil: the system's.
    public let caFile: String?
    /// At most this many idle connections are kept per server.
    static let idleConnectionsMax = 2
    /// An answer's body of `send` may take at most this many bytes.
    static let bodyBytesMax = 16 << 20

    private final class Connection: @unchecked Sendable {
        let value: WireConnection
        init(_ value: WireConnection) { self.value = value }
    }
    private let idle = Mutex<[Origin: [Connection]]>([:])

    public init(timeoutSeconds: Int = 30, streamIdleSeconds: Int = 90, caFile: String? = nil) {
        self.timeoutSeconds = timeoutSeconds
        self.streamIdleSeconds = streamIdleSeconds
        self.caFile = caFile
    }

    public func send(_ request: ClientRequest) async throws -> ClientResponse {
        let (origin, target) = try Origin.split(request.url)
        let bytes = HTTPExchange.requestBytes(request, target: target, authority: origin.authority)
        return try await withCheckedThrowingContinuation { continuation in
            Self.detached {
                do {
                    continuation.resume(returning: try self.sendBlocking(bytes, origin))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// On a kept connection first; when that turns out closed before any byte of the answer came
    /// (the server's idle timeout, almost always: the request was not processed), once more on a
    /// new one. The server takes a report sent twice as a duplicate (its batch id), so a resend
    /// after a crash mid-request stores nothing twice.
    private func sendBlocking(_ bytes: [UInt8], _ origin: Origin) throws(TransportError) -> ClientResponse {
        if let kept = idle.withLock({ $0[origin]?.popLast() }) {
            var exchange = HTTPExchange(kept.value)
            do {
                return try collect(&exchange, bytes, origin)
            } catch {
                kept.value.close()
                guard exchange.bytesRead == 0 else { throw error }
            }
        }
        let connection = try WireConnection(origin, timeoutSeconds: timeoutSeconds, caFile: caFile)
        var exchange = HTTPExchange(connection)
        do {
            return try collect(&exchange, bytes, origin)
        } catch {
            connection.close()
            throw error
        }
    }

    private func collect(_ exchange: inout HTTPExchange, _ bytes: [UInt8], _ origin: Origin)
        throws(TransportError) -> ClientResponse
    {
        var response = ClientResponse(status: 0, headers: [])
        var tooLong = false
        _ = try exchange.run(
            bytes, onHead: { response = $0 },
            onBody: { piece in
                if response.body.count + piece.count > Self.bodyBytesMax {
                    tooLong = true
                } else {
                    response.body += piece
                }
            }, shouldStop: { tooLong })
        if tooLong { throw .malformedAnswer("a body longer than \(Self.bodyBytesMax) bytes") }
        if exchange.reusable {
            let connection = Connection(exchange.connection)
            idle.withLock { idle in
                if idle[origin, default: []].count < Self.idleConnectionsMax {
                    idle[origin, default: []].append(connection)
                }
            }
        } else {
            exchange.connection.close()
        }
        return response
    }

    public func stream(
        _ request: ClientRequest, onHead: @escaping @Sendable (ClientResponse) -> Void,
        onBytes: @escaping @Sendable ([UInt8]) -> Void
    ) async throws {
        let (origin, target) = try Origin.split(request.url)
        let bytes = HTTPExchange.requestBytes(request, target: target, authority: origin.authority)
        let cancelled = Mutex(false)
        let (timeout, caFile) = (streamIdleSeconds, self.caFile)
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation {
                (continuation: CheckedContinuation<Void, any Error>) in
                Self.detached {
                    do {
                        // A connection of its own, never kept: it ends with the stream.
                        let connection = try WireConnection(origin, timeoutSeconds: timeout, caFile: caFile)
                        defer { connection.close() }
                        var exchange = HTTPExchange(connection)
                        _ = try exchange.run(
                            bytes, onHead: onHead, onBody: onBytes, shouldStop: { cancelled.withLock { $0 } })
                        continuation.resume()
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
        } onCancel: {
            cancelled.withLock { $0 = true }
        }
    }

    private static func detached(_ body: @escaping @Sendable () -> Void) {
        pthread_detach(spawnThread(body))
    }
}
