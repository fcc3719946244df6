import Events
import Foundation
import Postgres
import Projector
import ReadAPI
import Testing

@testable import WebPanel

@Suite(ProjectorClusterTrait()) struct ProjectorStoreTests {
    @Test func everyFixIsProjectedOnceAndLatestMatchesHistory() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 7, batches: 300, fixesPerBatch: 9)
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 300 * 9)
        #expect(
            try count(
                connection, "SELECT count(DISTINCT (log_offset, fix_index)) FROM findmy.device_locations")
                == 300 * 9)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_batches") == 300)
        #expect(
            try count(connection, "SELECT count(*) FROM findmy.devices WHERE last_seen_at IS NOT NULL") == 7)
        #expect(
            try count(connection, "SELECT next_offset FROM findmy.projector_checkpoints")
                == Int64(writer.durableEnd))
        // device_latest equals a recomputation from history by the same rule.
        let mismatches = try count(
            connection,
            """
            SELECT count(*) FROM findmy.device_latest l FULL JOIN (
                SELECT DISTINCT ON (device_id) device_id, log_offset, fix_index FROM findmy.device_locations
                ORDER BY device_id, \(LatestRule.sqlOrder)
            ) r USING (device_id)
            WHERE l.log_offset IS DISTINCT FROM r.log_offset OR l.fix_index IS DISTINCT FROM r.fix_index
            """)
        #expect(mismatches == 0)
        // Both clocks are kept as sent and received.
        #expect(
            try count(
                connection,
                "SELECT count(*) FROM findmy.device_locations WHERE received_at IS NULL OR recorded_at IS NULL"
            ) == 0)
        // The month partitions exist; a clock a year ahead lands in the default partition.
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations_default") > 0)
        #expect(
            try count(
                connection,
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE c.relname LIKE 'device_locations_y%'"
            ) >= 1)
        writer.close()
    }

    /// The arrivals have one index, their primary key in the order they are read in (device,
    /// `received_at`, offset); it still refuses the same record folded twice, as the primary key
    /// of `log_offset` it replaced did.
    @Test func theArrivalsHaveOneIndexWhichRefusesARecordFoldedTwice() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 3, batches: 30, fixesPerBatch: 2)
        defer { writer.close() }
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        let indexes = try connection.execute(
            """
            SELECT i.indisprimary, pg_get_indexdef(i.indexrelid) FROM pg_index i
            WHERE i.indrelid = 'findmy.device_batches'::regclass
            """)
        #expect(indexes.rowCount == 1)
        #expect(indexes.string(0, 0) == "t")
        #expect(indexes.string(0, 1)?.hasSuffix("(device_id, received_at, log_offset)") == true)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_batches") == 30)
        let again = #expect(throws: PostgresError.self) {
            _ = try connection.execute(
                "INSERT INTO findmy.device_batches SELECT * FROM findmy.device_batches ORDER BY log_offset LIMIT 1"
            )
        }
        #expect(again?.sqlState == "23505")
    }

    @Test func aBatchAppliesOnlyOnTopOfItsCheckpoint() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 20, fixesPerBatch: 3)
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        var batch = ProjectionBatch(firstOffset: 0)
        try LogReader(directory: log.path).read(from: 0) { record in
            try batch.add(record)
            return true
        }
        let store = ProjectionStore()
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        try store.apply(batch, nowMicros: wallClockMicros(), connection)
        // The same batch again (a second projector, or a retry after a commit that did succeed).
        #expect(throws: ProjectorError.checkpointMoved(expected: 0, found: batch.nextOffset)) {
            try store.apply(batch, nowMicros: wallClockMicros(), connection)
        }
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 60)
        writer.close()
    }

    @Test func aLogBehindTheCheckpointStopsTheProjector() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 10, fixesPerBatch: 2)
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        try catchUp(projector)
        // As if the log had been restored from an older backup: it now ends before the checkpoint.
        #expect(throws: ProjectorError.logBehindCheckpoint(logEnd: 5, checkpoint: writer.durableEnd)) {
            try projector.step(logEnd: 5)
        }
        writer.close()
    }

    @Test func aRebuildWhileServingGivesTheSameRows() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 5, batches: 200, fixesPerBatch: 5)
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let reader = LogReader(directory: log.path, writer: writer)
        let projector = Projector(client: client, reader: reader)
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        let fingerprint = """
            SELECT md5(string_agg(concat_ws(',', device_id, log_offset, fix_index, recorded_at, received_at, latitude,
                longitude, accuracy_m, altitude_m, battery_pct, source, clock_suspect), ';'
                ORDER BY log_offset, fix_index)) FROM findmy.device_locations
            """
        let latestPrint =
            "SELECT md5(string_agg(concat_ws(',', device_id, log_offset, fix_index), ';' ORDER BY device_id)) FROM findmy.device_latest"
        // Every column but as_of_offset, the checkpoint of the transaction that last wrote the row:
        // the rebuild folds the log in other transactions (the read API only compares it with itself).
        let devicesPrint = """
            SELECT md5(string_agg(concat_ws(',', id, user_id, device_uuid, name, platform, model, created_at,
                last_seen_at, paused), ';' ORDER BY id)) FROM findmy.devices
            """
        let before = try connection.execute(fingerprint).string(0, 0)
        let latestBefore = try connection.execute(latestPrint).string(0, 0)
        let devicesBefore = try connection.execute(devicesPrint).string(0, 0)
        // Each row's stamp is a checkpoint the live projection passed through, at most its last.
        #expect(
            try count(
                connection,
                "SELECT count(*) FROM findmy.devices WHERE as_of_offset <= 0 OR as_of_offset > (SELECT next_offset FROM findmy.projector_checkpoints)"
            ) == 0)
        var progressLines = 0
        let result = try Rebuild.run(client: client, reader: reader) { _ in progressLines += 1 }
        #expect(result.checkpoint == writer.durableEnd)
        #expect(progressLines > 0)
        #expect(try connection.execute(fingerprint).string(0, 0) == before)
        #expect(try connection.execute(latestPrint).string(0, 0) == latestBefore)
        #expect(try connection.execute(devicesPrint).string(0, 0) == devicesBefore)
        // The live projector goes on with the new generation.
        try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
        try catchUp(projector)
        #expect(try count(connection, "SELECT count(*) FROM findmy.devices WHERE paused") == 1)
        // The paused device's row carries the checkpoint of the transaction that paused it.
        #expect(
            try count(
                connection,
                "SELECT count(*) FROM findmy.devices WHERE paused AND as_of_offset = (SELECT next_offset FROM findmy.projector_checkpoints)"
            ) == 1)
        writer.close()
    }
}

extension ProjectorStoreTests {
    /// After a catch-up the partitioned history has statistics (autovacuum never analyzes the
    /// partitioned table itself), and the history is read in index order without a sort.
    @Test func aCatchUpIsAnalyzedAndTheHistoryNeedsNoFullSort() throws {
        let log = TemporaryLog()
        let (writer, client, projector) = try analyzingProjector(
            log, devices: 3, batches: 60, fixesPerBatch: 9)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        let statistics =
            "SELECT count(*) FROM pg_stats WHERE schemaname = 'findmy' AND tablename = 'device_locations'"
        #expect(try projector.analyzeIfDue() == false)
        try catchUp(projector)
        #expect(try count(connection, statistics) == 0)
        #expect(try projector.analyzeIfDue() == true)
        #expect(try count(connection, statistics) > 0)
        #expect(projector.status.analyzes == 1)
        #expect(try projector.analyzeIfDue() == false, "nothing folded since")
        // Without a full sort, unless nothing else gives the order: the unique key's index gives
        // it by recorded_at, and only ties are sorted (an incremental sort).
        try connection.executeScript("SET enable_sort = off")
        let lines = try plan(
            connection,
            """
            SELECT * FROM findmy.device_locations WHERE device_id = 1
            ORDER BY recorded_at, log_offset, fix_index LIMIT 10001
            """)
        #expect(
            !lines.contains { $0.contains("Sort  (") && !$0.contains("Incremental Sort") },
            "\(lines.joined(separator: "\n"))")
        #expect(lines.contains { $0.contains("Index Scan") }, "\(lines.joined(separator: "\n"))")
        writer.close()
    }
}

extension ProjectorStoreTests {
    /// The history page's COPY, with the settings it runs with, walks the history's index and sorts
    /// nothing, even for a page that holds a device's whole history (where a plan of its own makes
    /// PostgreSQL read and sort every row before it sends the first).
    @Test func aHistoryPageIsReadInTheIndexsOrder() throws {
        let log = TemporaryLog()
        let (writer, client, projector) = try analyzingProjector(
            log, devices: 30, batches: 600, fixesPerBatch: 20)
        try catchUp(projector)
        #expect(try projector.analyzeIfDue() == true)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        for query in [HistoryQuery(limit: 10_000), HistoryQuery(limit: 100)] {
            try connection.executeScript(
                (["BEGIN"] + ReadService.locationsCopySettings.map(\.setLocal)).joined(separator: "; "))
            let lines = try plan(connection, ReadService.locationsCopyQuery(deviceID: 1, query))
            try connection.executeScript("ROLLBACK")
            #expect(!lines.contains { $0.contains("Sort  (") }, "\(lines.joined(separator: "\n"))")
            #expect(lines.contains { $0.contains("Index Scan") }, "\(lines.joined(separator: "\n"))")
        }
        // The panel's track of the last 30 days, with the setting it runs with.
        let now = wallClockMicros()
        let (sql, parameters) = PanelData.historyStatement(
            deviceID: 1, fromMicros: now - 30 * 86_400_000_000, toMicros: now + 86_400_000_000)
        try connection.executeScript("BEGIN; " + PanelData.historySetting.setLocal)
        let lines = try plan(connection, sql, parameters)
        try connection.executeScript("ROLLBACK")
        #expect(!lines.contains { $0.contains("Sort  (") }, "\(lines.joined(separator: "\n"))")
        #expect(lines.contains { $0.contains("Index Scan") }, "\(lines.joined(separator: "\n"))")
        writer.close()
    }
}

extension ProjectorStoreTests {
    /// A projector on a fresh database over a log of `writeLog`'s, prepared, that analyzes the
    /// history after 500 folded fixes.
    func analyzingProjector(_ log: TemporaryLog, devices: Int, batches: Int, fixesPerBatch: Int) throws
        -> (LogWriter, PostgresClient, Projector)
    {
        let writer = try writeLog(log.path, devices: devices, batches: batches, fixesPerBatch: fixesPerBatch)
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        var options = Projector.Options()
        options.analyzeAfterFixesMin = 500
        let projector = Projector(
            client: client, reader: LogReader(directory: log.path, writer: writer), options: options)
        try projector.prepare()
        return (writer, client, projector)
    }

    /// The lines of `EXPLAIN query`.
    func plan(_ connection: PostgresConnection, _ query: String, _ parameters: [PostgresValue?] = []) throws
        -> [String]
    {
        let plan = try connection.execute("EXPLAIN " + query, parameters)
        return (0..<plan.rowCount).compactMap { plan.string($0, 0) }
    }
}
