import Events
import Foundation
import Postgres
import Projector
import Testing

/// A transaction's history rows are stored in the order of the history's indexes, by device and
/// time, whatever order the devices' batches arrived in: index upkeep is cheaper that way
/// (ProjectionStore.indexOrder), and a device's history is read from neighbouring pages.
@Suite(ProjectorClusterTrait()) struct IndexOrderTests {
    @Test func aTransactionStoresItsFixesGroupedByDeviceInTimeOrder() throws {
        let log = TemporaryLog()
        // Batches of 3 devices in turn: in the log, every batch is another device's.
        let writer = try writeLog(log.path, devices: 3, batches: 30, fixesPerBatch: 4)
        defer { writer.close() }
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        #expect(try projector.step(logEnd: writer.durableEnd) > 0)
        #expect(projector.status.transactions == 1 && projector.status.checkpoint == writer.durableEnd)

        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        // Each partition's rows in the order they lie in its pages.
        let rows = try connection.execute(
            """
            SELECT tableoid::bigint, device_id, (extract(epoch FROM recorded_at) * 1000000)::bigint
            FROM findmy.device_locations ORDER BY tableoid, ctid
            """)
        #expect(rows.rowCount == 30 * 4)
        var previous: (partition: Int64, device: Int64, micros: Int64)?
        var outOfOrder = 0
        for row in 0..<rows.rowCount {
            let current = (
                try rows.int64(row, 0) ?? 0, try rows.int64(row, 1) ?? 0, try rows.int64(row, 2) ?? 0
            )
            if let previous, previous.partition == current.0,
                (previous.device, previous.micros) > (current.1, current.2)
            {
                outOfOrder += 1
            }
            previous = current
        }
        #expect(outOfOrder == 0)
    }
}
