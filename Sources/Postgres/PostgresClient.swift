import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A connection shared by threads: one at a time holds it, and a broken one is reopened with
/// exponential backoff before the next use.
///
/// Statements are never retried here: a statement that fails because the connection broke under it
/// may or may not have taken effect (a COMMIT in particular), and only the caller knows how to find
/// out (the projector rereads its checkpoint). Before each use the connection is checked for a
/// closure the server already announced (`PostgresConnection.isAlive`), so after a server restart
/// the next statement normally goes to a fresh connection.
public final class PostgresClient: Sendable {
    public struct ReconnectPolicy: Sendable {
        /// Wait before the second attempt; doubled after each failure up to the maximum.
        public var reconnectDelayMillisMin: Int
        public var reconnectDelayMillisMax: Int
        /// Attempts within one call before its last error is thrown; the delay keeps growing across
        /// calls until a connection succeeds.
        public var reconnectAttemptsMax: Int

        public init(
            reconnectDelayMillisMin: Int = 100, reconnectDelayMillisMax: Int = 5_000,
            reconnectAttemptsMax: Int = 8
        ) {
            precondition(reconnectDelayMillisMin > 0 && reconnectDelayMillisMin <= reconnectDelayMillisMax)
            precondition(reconnectAttemptsMax >= 1)
            self.reconnectDelayMillisMin = reconnectDelayMillisMin
            self.reconnectDelayMillisMax = reconnectDelayMillisMax
            self.reconnectAttemptsMax = reconnectAttemptsMax
        }
    }

    private struct State {
        var connection: PostgresConnection?
        var delayMillis: Int
        var connects = 0
    }

    public let conninfo: String
    public let policy: ReconnectPolicy
    private let state: Mutex<State>

    /// Connects lazily, on first use.
    public init(conninfo: String, policy: ReconnectPolicy = ReconnectPolicy()) {
        self.conninfo = conninfo
        self.policy = policy
        state = Mutex(State(delayMillis: policy.reconnectDelayMillisMin))
    }

    /// How many connections were opened so far; a reconnect adds one.
    public var connectCount: Int { state.withLock { $0.connects } }

    /// Runs `body` with the connection, reconnecting first when it is broken.
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try state.withLock { state throws -> T in
            let connection = try connected(&state)
            return try body(connection)
        }
    }

    @discardableResult
    public func execute(_ sql: String, _ parameters: [PostgresValue?] = []) throws -> PostgresResult {
        try withConnection { try $0.execute(sql, parameters) }
    }

    @discardableResult
    public func transaction<T: Sendable>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try withConnection { try $0.transaction(body) }
    }

    public func close() {
        state.withLock {
            $0.connection?.close()
            $0.connection = nil
        }
    }

    private func connected(_ state: inout State) throws(PostgresError) -> PostgresConnection {
        if let connection = state.connection, connection.isAlive { return connection }
        state.connection = nil
        var attempt = 1
        while true {
            do throws(PostgresError) {
                let connection = try PostgresConnection(conninfo)
                state.connection = connection
                state.connects += 1
                state.delayMillis = policy.reconnectDelayMillisMin
                return connection
            } catch {
                guard attempt < policy.reconnectAttemptsMax else { throw error }
                usleep(UInt32(state.delayMillis) * 1000)
                state.delayMillis = min(state.delayMillis * 2, policy.reconnectDelayMillisMax)
                attempt += 1
            }
        }
    }
}
