import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Up to `connectionsMax` connections for threads that read concurrently (the HTTP handlers of the
/// read API): a thread borrows an idle connection, opens a new one while fewer than the maximum are
/// open, or waits for one to come back.
///
/// Connections are opened lazily and kept. One that is found broken (before use by
/// `PostgresConnection.isAlive`, or after a statement failed with `connectionBroken`) is closed and
/// forgotten, so the next borrower opens a fresh one. Statements are never retried here, for the
/// reason `PostgresClient` gives; a failed connect is thrown at once (a reader gets an error answer
/// instead of waiting through a backoff).
///
/// Why not `Synchronization.Mutex`: borrowers must sleep until a connection is returned, which needs
/// a condition variable (`ConditionLock`).
public final class PostgresPool: @unchecked Sendable {
    public struct Limits: Sendable {
        /// Connections open at most; each is one PostgreSQL backend process.
        public var connectionsMax: Int
        /// How long a borrower waits for a connection when all are in use before giving up.
        public var acquireWaitMillisMax: Int

        public init(connectionsMax: Int = 8, acquireWaitMillisMax: Int = 2_000) {
            precondition(connectionsMax >= 1, "a pool needs at least one connection")
            precondition(acquireWaitMillisMax >= 0)
            self.connectionsMax = connectionsMax
            self.acquireWaitMillisMax = acquireWaitMillisMax
        }
    }

    public let conninfo: String
    public let limits: Limits
    /// Asked before every borrow: nil lets it through, a reason refuses it with a `.connect` error
    /// that says so. The read API's pool reads nothing until the projector has checked that the
    /// projection belongs to this server's log (docs/postgres.md).
    public let admission: @Sendable () -> String?
    /// Its one condition: a connection came back (or a reserved slot was given up).
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var idle: [PostgresConnection] = []
    private var openCount = 0
    private var connects = 0
    private var closed = false

    public init(
        conninfo: String, limits: Limits = Limits(), admission: @escaping @Sendable () -> String? = { nil }
    ) {
        self.conninfo = conninfo
        self.limits = limits
        self.admission = admission
    }

    deinit { close() }

    /// Connections open now (idle and borrowed).
    public var openConnections: Int { lock.withLock { openCount } }
    /// Connections opened since the pool was made; a replaced broken one adds one.
    public var connectCount: Int { lock.withLock { connects } }

    /// Runs `body` with a connection of its own. Throws a `.connect` error when no connection can be
    /// had: PostgreSQL refuses, or all `connectionsMax` stay busy for `acquireWaitMillisMax`.
    public func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try acquire()
        var broken = true
        defer { release(connection, broken: broken) }
        do {
            let value = try body(connection)
            broken = false
            return value
        } catch let error as PostgresError {
            broken = error.connectionBroken || !connection.isAlive
            throw error
        } catch {
            broken = !connection.isAlive
            throw error
        }
    }

    @discardableResult
    public func execute(
        _ sql: String, _ parameters: [PostgresValue?] = [], format: PostgresResultFormat = .text
    ) throws -> PostgresResult {
        try withConnection { try $0.execute(sql, parameters, format: format) }
    }

    /// Closes the idle connections and refuses new borrowers; borrowed ones close when returned.
    public func close() {
        let connections = lock.withLock { () -> [PostgresConnection] in
            closed = true
            defer { idle.removeAll() }
            openCount -= idle.count
            return idle
        }
        for connection in connections { connection.close() }
        lock.broadcast()
    }

    private func acquire() throws(PostgresError) -> PostgresConnection {
        if let refusal = admission() {
            throw PostgresError(.refused, message: refusal, target: "PostgreSQL")
        }
        let deadline = monotonicNow() + Int64(limits.acquireWaitMillisMax) * 1_000
        lock.lock()
        while true {
            guard !closed else {
                lock.unlock()
                throw PostgresError(
                    .connect, message: "the connection pool is closed (the server is shutting down)",
                    connectionBroken: true, target: "PostgreSQL")
            }
            if let connection = idle.popLast() {
                lock.unlock()
                if connection.isAlive { return connection }
                connection.close()
                lock.lock()
                openCount -= 1
                continue
            }
            if openCount < limits.connectionsMax {
                openCount += 1  // reserved before connecting, outside the lock
                lock.unlock()
                do throws(PostgresError) {
                    let connection = try PostgresConnection(conninfo)
                    lock.withLock { connects += 1 }
                    return connection
                } catch {
                    lock.withLock { openCount -= 1 }
                    lock.signal()
                    throw error
                }
            }
            guard waitForReturn(until: deadline) else {
                lock.unlock()
                throw PostgresError(
                    .connect,
                    message:
                        "all \(limits.connectionsMax) connections stayed busy for \(limits.acquireWaitMillisMax) ms; "
                        + "the database is overloaded or a statement hangs",
                    target: "PostgreSQL")
            }
        }
    }

    private func release(_ connection: PostgresConnection, broken: Bool) {
        // A connection left inside a transaction (a ROLLBACK that failed) or with a statement in
        // flight would break its next borrower: close it instead.
        let reusable = !broken && connection.isIdle
        let keep = lock.withLock { () -> Bool in
            guard reusable && !closed else {
                openCount -= 1
                return false
            }
            idle.append(connection)
            return true
        }
        if !keep { connection.close() }
        lock.signal()
    }

    /// Waits for a connection to come back, with the lock held; false once the deadline has passed.
    private func waitForReturn(until deadline: Int64) -> Bool {
        guard monotonicNow() < deadline else { return false }
        return lock.wait(0, untilMonotonicMicros: deadline) || monotonicNow() < deadline
    }
}

private func monotonicNow() -> Int64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Int64(time.tv_sec) * 1_000_000 + Int64(time.tv_nsec) / 1_000
}
