import Postgres
import Synchronization
import Testing

extension PostgresTests {
    /// The read API's pool lends nothing until the projector has bound the projection to the
    /// server's log: a refused borrow is a `.connect` error with the reason, and opens no connection.
    @Test func thePoolLendsNothingUntilAdmissionAllowsIt() throws {
        let bound = Atomic<Bool>(false)
        let pool = PostgresPool(
            conninfo: Cluster.shared.conninfo,
            admission: { bound.load(ordering: .relaxed) ? nil : "not bound to this log yet" })
        #expect {
            try pool.execute("SELECT 1")
        } throws: { error in
            (error as? PostgresError)?.kind == .refused && "\(error)".contains("not bound to this log yet")
        }
        #expect(pool.connectCount == 0 && pool.openConnections == 0)
        bound.store(true, ordering: .relaxed)
        #expect(try pool.execute("SELECT 1").int64(0, 0) == 1)
        pool.close()
    }
}
