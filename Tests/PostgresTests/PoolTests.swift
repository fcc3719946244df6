import Foundation
import Postgres
import Synchronization
import Testing

extension PostgresTests {
    @Test func thePoolRunsStatementsOnSeveralConnectionsAtOnce() throws {
        let pool = PostgresPool(conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 3))
        // Three threads each keep their connection until all three hold one at once: a pool that
        // handed out one connection at a time would never get there.
        let holding = Mutex(0)
        let met = Mutex<[Bool]>([])
        let backends = Mutex<Set<Int64>>([])
        let done = DispatchGroup()
        for _ in 0..<3 {
            done.enter()
            Thread {  // threads, not concurrentPerform, which runs only as many as there are cores
                let pid = try? pool.withConnection { connection -> Int64? in
                    holding.withLock { $0 += 1 }
                    let together = waitUntil { holding.withLock { $0 } == 3 }
                    met.withLock { $0.append(together) }
                    return try connection.execute("SELECT pg_backend_pid()::bigint").int64(0, 0)
                }
                if let pid = pid ?? nil { backends.withLock { _ = $0.insert(pid) } }
                done.leave()
            }.start()
        }
        done.wait()
        #expect(met.withLock { $0 } == [true, true, true])
        #expect(backends.withLock { $0.count } == 3)
        #expect(pool.openConnections == 3)
        // Later borrowers reuse the idle connections.
        for _ in 0..<10 { #expect(try pool.execute("SELECT 1").int64(0, 0) == 1) }
        #expect(pool.connectCount == 3)
    }

    /// Borrows `pool`'s connection on another thread and keeps it until `release` is signalled;
    /// returns once it is held.
    func holdConnection(_ pool: PostgresPool, until release: DispatchSemaphore) -> DispatchGroup {
        let holding = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        done.enter()
        Thread {
            _ = try? pool.withConnection { _ in
                holding.signal()
                release.wait()
            }
            done.leave()
        }.start()
        holding.wait()
        return done
    }

    @Test func aBorrowerGivesUpAtTheBoundWhileEveryConnectionIsBusy() throws {
        let pool = PostgresPool(
            conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 1, acquireWaitMillisMax: 100))
        let release = DispatchSemaphore(value: 0)
        let holder = holdConnection(pool, until: release)
        let error = expectPostgresError(kind: .connect) { try pool.execute("SELECT 1") }
        #expect(error?.message.contains("all 1 connections stayed busy for 100 ms") == true)
        release.signal()
        holder.wait()
        #expect(try pool.execute("SELECT 2").int64(0, 0) == 2)
        #expect(pool.connectCount == 1)
    }

    @Test func aBorrowerWaitsForAReturnedConnection() throws {
        let pool = PostgresPool(
            conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 1, acquireWaitMillisMax: 120_000)
        )
        let release = DispatchSemaphore(value: 0)
        let holder = holdConnection(pool, until: release)
        let answer = Mutex<Int64?>(nil)
        let borrower = DispatchGroup()
        borrower.enter()
        Thread {
            let value = try? pool.execute("SELECT 4").int64(0, 0)
            answer.withLock { $0 = value }
            borrower.leave()
        }.start()
        #expect(answer.withLock { $0 } == nil, "no connection is free before the holder returns it")
        release.signal()
        holder.wait()
        borrower.wait()
        #expect(answer.withLock { $0 } == 4)
        #expect(pool.connectCount == 1, "the borrower got the returned connection, not a new one")
    }

    @Test func aBrokenConnectionIsReplacedAndAStatementErrorKeepsIt() throws {
        let pool = PostgresPool(conninfo: Cluster.shared.conninfo, limits: .init(connectionsMax: 1))
        _ = expectPostgresError(sqlState: PostgresError.syntaxError) { try pool.execute("SELEKT 1") }
        #expect(pool.connectCount == 1 && pool.openConnections == 1)
        let pid = try #require(try pool.execute("SELECT pg_backend_pid()::bigint").int64(0, 0))
        let observer = try Cluster.connect()
        try observer.execute("SELECT pg_terminate_backend($1::int)", [.int64(pid)])
        // pg_terminate_backend only signals the backend: wait until its process has exited (gone,
        // or a zombie), which is when its socket is closed. Leaving pg_stat_activity comes earlier,
        // while the pool's connection could still look alive.
        #expect(
            waitUntil {
                guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else {
                    return true
                }
                return stat.split(separator: ")").last?.split(separator: " ").first == "Z"
            })
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
