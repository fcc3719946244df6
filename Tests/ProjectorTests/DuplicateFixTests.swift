import Events
import Foundation
import Postgres
import Projector
import Testing

/// The same fix (device, recorded_at, latitude, longitude) arriving twice, whatever the batch ids
/// and the path, is one row of history and counts once for the latest position.
@Suite(ProjectorClusterTrait()) struct DuplicateFixTests {
    private func fix(latitude: Double, at micros: Int64) -> Fix {
        Fix(
            latitude: latitude, longitude: 2.3522, accuracyMeters: 5, source: "manual",
            recordedAtMicros: micros)
    }

    /// History as (offset, latitude) in order, and device 1's latest (offset, latitude).
    private func rows(_ connection: PostgresConnection) throws -> (history: [String], latest: String) {
        let history = try connection.execute(
            "SELECT log_offset || ':' || latitude FROM findmy.device_locations WHERE device_id = 1 "
                + "ORDER BY recorded_at, log_offset, fix_index")
        let latest = try connection.execute(
            "SELECT log_offset || ':' || latitude FROM findmy.device_latest WHERE device_id = 1")
        return ((0..<history.rowCount).compactMap { history.string($0, 0) }, latest.string(0, 0) ?? "none")
    }

    @Test(arguments: [1, 5_000])
    func theSameFixTwiceIsOneRowAndTheLatestStays(recordsPerTransaction: Int) throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 0, fixesPerBatch: 0)
        defer { writer.close() }
        let now = wallClockMicros()
        let first = try writer.append(
            .fixBatch(
                FixBatch(
                    deviceID: 1, batchID: .random(),
                    fixes: [fix(latitude: 48.1, at: now - 60_000_000), fix(latitude: 48.2, at: now)])))
        // Another batch id: a client's resend without one, or the same fix through another path.
        let again = try writer.append(
            .fixBatch(FixBatch(deviceID: 1, batchID: .random(), fixes: [fix(latitude: 48.2, at: now)])))
        // Differs only in latitude: another fix.
        let other = try writer.append(
            .fixBatch(FixBatch(deviceID: 1, batchID: .random(), fixes: [fix(latitude: 48.3, at: now)])))
        // A batch holding the same fix twice.
        let twice = try writer.append(
            .fixBatch(
                FixBatch(
                    deviceID: 1, batchID: .random(),
                    fixes: [
                        fix(latitude: 48.0, at: now - 120_000_000),
                        fix(latitude: 48.0, at: now - 120_000_000),
                    ])
            ))
        var options = Projector.Options()
        options.recordsPerTransactionMax = recordsPerTransaction
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        defer { client.close() }
        let reader = LogReader(directory: log.path, writer: writer)
        let projector = Projector(client: client, reader: reader, options: options)
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        let expected = [
            "\(twice):48", "\(first):48.1", "\(first):48.2", "\(other):48.3",
        ]
        let projected = try rows(connection)
        #expect(projected.history == expected)
        // 48.2 and 48.3 share recorded_at; the later log position wins, and the resend of 48.2 between
        // them is not a newer fix.
        #expect(projected.latest == "\(other):48.3")
        #expect(again > first)
        // A rebuild from the log gives the same rows.
        _ = try Rebuild.run(client: client, reader: reader, options: options) { _ in }
        #expect(try rows(connection) == projected)
    }

    @Test func aResendOfTheLatestFixLeavesTheLatestAlone() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 0, fixesPerBatch: 0)
        defer { writer.close() }
        let now = wallClockMicros()
        let first = try writer.append(
            .fixBatch(FixBatch(deviceID: 1, batchID: .random(), fixes: [fix(latitude: 48.2, at: now)])))
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        defer { client.close() }
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        try catchUp(projector)
        try writer.append(
            .fixBatch(FixBatch(deviceID: 1, batchID: .random(), fixes: [fix(latitude: 48.2, at: now)])))
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        let projected = try rows(connection)
        #expect(projected.history == ["\(first):48.2"])
        #expect(projected.latest == "\(first):48.2")
    }
}
