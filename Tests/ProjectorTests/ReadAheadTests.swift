import Events
import Foundation
import Postgres
import Projector
import Testing

/// While draining, the projector reads and folds the next run of records while PostgreSQL writes
/// the current one. The run read ahead is used only when the transaction before it committed.
@Suite(ProjectorClusterTrait()) struct ReadAheadTests {
    /// The same log folded in one transaction: what any run of transactions must come to.
    private func foldedWhole(_ log: String) throws -> [String: [String]] {
        let (connection, helper) = try freshProjection()
        defer { connection.close() }
        helper.close()
        try ProjectionStore().apply(try foldedBatch(log), nowMicros: wallClockMicros(), connection)
        return try projectionTables(connection)
    }

    private func draining(recordsPerTransaction: Int) -> Projector.Options {
        var options = Projector.Options()
        options.recordsPerTransactionMax = recordsPerTransaction
        return options
    }

    @Test func aDrainInShortTransactionsFoldsWhatOneTransactionFolds() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 5, batches: 90, fixesPerBatch: 6)
        defer { writer.close() }
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        defer { client.close() }
        let projector = Projector(
            client: client, reader: LogReader(directory: log.path, writer: writer),
            options: draining(recordsPerTransaction: 7))
        try projector.prepare()
        try catchUp(projector)
        let records = Int(writer.durableEnd)
        #expect(projector.status.transactions == (records + 6) / 7)
        #expect(projector.status.recordsFolded == records)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        #expect(try projectionTables(connection) == foldedWhole(log.path))
    }

    /// Another projector folded the runs this one had read ahead: the checkpoint is past them, so
    /// they are dropped and the runs after the checkpoint read instead.
    @Test func aRunReadAheadIsDroppedWhenTheCheckpointMovedPastIt() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 4, batches: 60, fixesPerBatch: 5)
        defer { writer.close() }
        let conninfo = try TestCluster.freshDatabase()
        let first = PostgresClient(conninfo: conninfo)
        let second = PostgresClient(conninfo: conninfo)
        defer {
            first.close()
            second.close()
        }
        let reader = LogReader(directory: log.path, writer: writer)
        let a = Projector(client: first, reader: reader, options: draining(recordsPerTransaction: 10))
        let b = Projector(client: second, reader: reader, options: draining(recordsPerTransaction: 10))
        try a.prepare()
        try b.prepare()
        let end = writer.durableEnd
        #expect(try a.step(logEnd: end) == 10)  // reads the next 10 ahead
        #expect(try b.step(logEnd: end) == 10)  // folds those
        #expect(try b.step(logEnd: end) == 10)
        #expect(a.status.checkpoint == 10)
        // a's run read ahead starts at 10; the checkpoint is at 30.
        #expect(try a.step(logEnd: end) == 10)
        #expect(a.status.checkpoint == 40)
        try catchUp(a)
        #expect(a.status.checkpoint == end)
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        #expect(try projectionTables(connection) == foldedWhole(log.path))
    }
}
