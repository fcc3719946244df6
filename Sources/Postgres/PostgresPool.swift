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
/// a condition variable.
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
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let returned = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    // Guarded by `mutex`.
    private var idle: [PostgresConnection] = []
    private var openCount = 0
    private var connects = 0
    private var closed = false

    public init(conninfo: String, limits: Limits = Limits()) {
        self.conninfo = conninfo
        self.limits = limits
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(returned, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        close()
        pthread_cond_destroy(returned)
        pthread_mutex_destroy(mutex)
        returned.deallocate()
        mutex.deallocate()
    }

    /// Connections open now (idle and borrowed).
    public var openConnections: Int { locked { openCount } }
    /// Connections opened since the pool was made; a replaced broken one adds one.
    public var connectCount: Int { locked { connects } }

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
        let connections = locked { () -> [PostgresConnection] in
            closed = true
            defer { idle.removeAll() }
            openCount -= idle.count
            return idle
        }
        for connection in connections { connection.close() }
        pthread_cond_broadcast(returned)
    }

    private func acquire() throws(PostgresError) -> PostgresConnection {
        let deadline = monotonicNow() + Int64(limits.acquireWaitMillisMax) * 1_000
        pthread_mutex_lock(mutex)
        while true {
            guard !closed else {
                pthread_mutex_unlock(mutex)
                throw PostgresError(
                    .connect, message: "the connection pool is closed (the server is shutting down)",
                    connectionBroken: true, target: "PostgreSQL")
            }
            if let connection = idle.popLast() {
                pthread_mutex_unlock(mutex)
                if connection.isAlive { return connection }
                connection.close()
                pthread_mutex_lock(mutex)
                openCount -= 1
                continue
            }
            if openCount < limits.connectionsMax {
                openCount += 1  // reserved before connecting, outside the lock
                pthread_mutex_unlock(mutex)
                do throws(PostgresError) {
                    let connection = try PostgresConnection(conninfo)
                    locked { connects += 1 }
                    return connection
                } catch {
                    locked { openCount -= 1 }
                    pthread_cond_signal(returned)
                    throw error
                }
            }
            guard waitForReturn(until: deadline) else {
                pthread_mutex_unlock(mutex)
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
        let keep = locked { () -> Bool in
            guard reusable && !closed else {
                openCount -= 1
                return false
            }
            idle.append(connection)
            return true
        }
        if !keep { connection.close() }
        pthread_cond_signal(returned)
    }

    /// Waits on `returned` with the mutex held; false once the deadline has passed.
    private func waitForReturn(until deadline: Int64) -> Bool {
        guard monotonicNow() < deadline else { return false }
        var time = timespec(tv_sec: Int(deadline / 1_000_000), tv_nsec: Int(deadline % 1_000_000) * 1_000)
        let status = pthread_cond_timedwait(returned, mutex, &time)
        return status == 0 || monotonicNow() < deadline
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }
}

private func monotonicNow() -> Int64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Int64(time.tv_sec) * 1_000_000 + Int64(time.tv_nsec) / 1_000
}
