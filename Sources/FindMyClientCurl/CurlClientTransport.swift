// FindMyClient's transport over libcurl (HTTPClient's HTTPConnection), for programs that must stay
// small: the agent (URLSession would bring FoundationNetworking, ~30 MB resident) and the tests.
// Each exchange runs on a thread of its own (libcurl's easy interface blocks); connections of
// finished requests are kept for the next one to the same server.
import FindMyClient
import HTTPClient
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

public final class CurlClientTransport: ClientTransport {
    /// Connecting, and each wait for the next byte of an answer, gives up after this long.
    public let timeoutSeconds: Int
    /// A stream that sends nothing (not even a heartbeat, every 25 s by default) for this long is
    /// taken as cut.
    public let streamIdleSeconds: Int
    /// At most this many idle connections are kept per server.
    static let idleConnectionsMax = 2

    private final class Connection: @unchecked Sendable {
        let value: HTTPConnection
        init(_ value: HTTPConnection) { self.value = value }
    }
    private let idle = Mutex<[String: [Connection]]>([:])

    public init(timeoutSeconds: Int = 30, streamIdleSeconds: Int = 90) {
        self.timeoutSeconds = timeoutSeconds
        self.streamIdleSeconds = streamIdleSeconds
    }

    public func send(_ request: ClientRequest) async throws -> ClientResponse {
        let (base, target) = try Self.split(request.url)
        let connection =
            idle.withLock { $0[base]?.popLast() }
            ?? Connection(HTTPConnection(address: base, timeoutSeconds: timeoutSeconds))
        let outgoing = Self.request(request, target: target)
        return try await withCheckedThrowingContinuation { continuation in
            Self.detached {
                do {
                    let answer = try connection.value.send(outgoing)
                    self.idle.withLock { idle in
                        if idle[base, default: []].count < Self.idleConnectionsMax {
                            idle[base, default: []].append(connection)
                        }
                    }
                    continuation.resume(
                        returning: ClientResponse(
                            status: answer.status,
                            headers: answer.headers.map { ClientHeader($0.name, $0.value) },
                            body: answer.body))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    public func stream(
        _ request: ClientRequest, onHead: @escaping @Sendable (ClientResponse) -> Void,
        onBytes: @escaping @Sendable ([UInt8]) -> Void
    ) async throws {
        let (base, target) = try Self.split(request.url)
        let outgoing = Self.request(request, target: target)
        let cancelled = Mutex(false)
        let timeout = streamIdleSeconds
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation {
                (continuation: CheckedContinuation<Void, any Error>) in
                Self.detached {
                    // A connection of its own, never kept: it ends with the stream.
                    let connection = HTTPConnection(address: base, reconnect: false, timeoutSeconds: timeout)
                    do {
                        try connection.stream(
                            outgoing,
                            onHead: { status, headers in
                                onHead(
                                    ClientResponse(
                                        status: status,
                                        headers: headers.map { ClientHeader($0.name, $0.value) }))
                            },
                            onBody: { piece in onBytes(Array(piece)) },
                            shouldStop: { cancelled.withLock { $0 } })
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

    /// `https://host:port/path?query` as the connection's address and the request's target.
    static func split(_ url: String) throws(HTTPClientError) -> (base: String, target: String) {
        let scheme = url.hasPrefix("https://") ? "https://" : "http://"
        guard url.hasPrefix(scheme) else { throw .badAddress(url) }
        let rest = url.dropFirst(scheme.count)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let target = rest[slash...]
        return (String(url[..<slash]), target.isEmpty ? "/" : String(target))
    }

    private static func request(_ request: ClientRequest, target: String) -> HTTPClientRequest {
        HTTPClientRequest(
            method: request.method, target: target, headers: request.headers.map { ($0.name, $0.value) },
            body: request.body)
    }

    private static func detached(_ body: @escaping @Sendable () -> Void) {
        pthread_detach(spawnThread(body))
    }
}
