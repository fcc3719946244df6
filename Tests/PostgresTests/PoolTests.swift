import Foundation
import Postgres
import Synchronization
import Testing

extension PostgresTests {
    @Test func thePoolRunsStatementsOnSeveralConnectionsAtOnce() throws {
        let pool = PostgresPool(conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 3))
        // Three threads each hold a connection for 300 ms: together they take about 300 ms, not 900.
        let started = Date()
        let backends = Mutex<Set<Int64>>([])
        let done = DispatchGroup()
        for _ in 0..<3 {
            done.enter()
            Thread {  // threads, not concurrentPerform, which runs only as many as there are cores
                let pid = try? pool.withConnection { connection -> Int64? in
                    _ = try connection.execute("SELECT pg_sleep(0.3)")
                    return try connection.execute("SELECT pg_backend_pid()::bigint").int64(0, 0)
                }
                if let pid = pid ?? nil { backends.withLock { _ = $0.insert(pid) } }
                done.leave()
            }.start()
        }
        done.wait()
        #expect(Date().timeIntervalSince(started) < 0.8)
        #expect(backends.withLock { $0.count } == 3)
        #expect(pool.openConnections == 3)
        // Later borrowers reuse the idle connections.
        for _ in 0..<10 { #expect(try pool.execute("SELECT 1").int64(0, 0) == 1) }
        #expect(pool.connectCount == 3)
    }

    @Test func aBorrowerWaitsForAReturnedConnectionAndGivesUpAtTheBound() throws {
        let pool = PostgresPool(
            conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 1, acquireWaitMillisMax: 100))
        let holding = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = try? pool.withConnection { connection in
                holding.signal()
                _ = try connection.execute("SELECT pg_sleep(0.5)")
            }
            done.signal()
        }.start()
        holding.wait()
        let error = expectPostgresError(kind: .connect) { try pool.execute("SELECT 1") }
        #expect(error?.message.contains("all 1 connections stayed busy for 100 ms") == true)
        done.wait()
        #expect(try pool.execute("SELECT 2").int64(0, 0) == 2)
        #expect(pool.connectCount == 1)
    }

    @Test func aBrokenConnectionIsReplacedAndAStatementErrorKeepsIt() throws {
        let pool = PostgresPool(conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 1))
        _ = expectPostgresError(sqlState: PostgresError.syntaxError) { try pool.execute("SELEKT 1") }
        #expect(pool.connectCount == 1 && pool.openConnections == 1)
        let pid = try #require(try pool.execute("SELECT pg_backend_pid()::bigint").int64(0, 0))
        try Cluster.connect().execute("SELECT pg_terminate_backend($1::int)", [.int64(pid)])
        usleep(100_000)
        #expect(try pool.execute("SELECT 3").int64(0, 0) == 3)
        #expect(pool.connectCount == 2 && pool.openConnections == 1)
    }

    @Test func aClosedPoolRefusesBorrowers() throws {
        let pool = PostgresPool(conninfo: Cluster.shared.conninfo)
        #expect(try pool.execute("SELECT 1").int64(0, 0) == 1)
        pool.close()
        #expect(pool.openConnections == 0)
        let error = expectPostgresError(kind: .connect) { try pool.execute("SELECT 1") }
        #expect(error?.message.contains("closed") == true)
    }
}
