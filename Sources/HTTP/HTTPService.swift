import Synchronization
import Threads

/// An HTTP listener as a service of the server's group: `start` binds and serves (a port in use
/// throws), `stop` stops accepting, lets requests in flight finish within the grace period, and
/// returns once the daemon's threads are gone.
public final class HTTPService: Service {
    public let name: String
    private let open: @Sendable () throws -> HTTPServer
    private let server = Mutex<HTTPServer?>(nil)
    private let current = Mutex<ServiceState>(.idle)

    /// `open` starts the server (`HTTPServer.start(...)`); it runs in `start`.
    public init(name: String, open: @escaping @Sendable () throws -> HTTPServer) {
        self.name = name
        self.open = open
    }

    /// The running server; nil before `start` succeeded.
    public var running: HTTPServer? { server.withLock { $0 } }

    public var state: ServiceState { current.withLock { $0 } }

    public func start() throws {
        do {
            let started = try open()
            server.withLock { $0 = started }
            current.withLock { $0 = .running }
        } catch {
            current.withLock { $0 = .failed("\(error)") }
            throw error
        }
    }

    public func stop(graceMicros: Int64) {
        server.withLock { $0 }?.stop(gracePeriodSeconds: Double(graceMicros) / 1_000_000)
        current.withLock { $0 = .stopped }
    }
}
