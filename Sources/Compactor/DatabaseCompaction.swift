import Events
import Postgres
import Projector

/// What one compaction did to PostgreSQL (or, in a dry run, would do).
public struct DatabaseCompactionReport: Sendable, Equatable {
    public var locationRowsDeleted = 0
    public var partitionsDropped: [String] = []
    public var batchRowsDeleted = 0
    public var latestRecomputed = 0
    /// Why the database was not compacted (no projection yet), or nil.
    public var skipped: String?

    public init() {}
}

/// The PostgreSQL half of a compaction run: the same policy as the log, applied to the live
/// projection. Every statement is bounded (`rowsPerStatementMax`) and commits by itself, so the
/// projector and readers are never blocked for long, and a crash anywhere leaves rows that the next
/// run deletes. Rows of registry tables (users, devices, push tokens) are left to the projector,
/// whose fold of `device_removed` deletes them in log order: deleting them here could break the
/// projector's foreign keys while it is behind.
public struct DatabaseCompaction {
    public let policy: RetentionPolicy
    public let nowMicros: Int64
    public let rowsPerStatementMax: Int
    public let schema: String
    /// The log `policy` was folded from: only a projection bound to it is compacted.
    public let logID: UUID128

    public init(
        policy: RetentionPolicy, nowMicros: Int64, rowsPerStatementMax: Int, logID: UUID128,
        schema: String = Schema.live
    ) {
        precondition(rowsPerStatementMax > 0)
        self.policy = policy
        self.nowMicros = nowMicros
        self.rowsPerStatementMax = rowsPerStatementMax
        self.logID = logID
        self.schema = schema
    }

    private var s: String { PostgresConnection.quoteIdentifier(schema) }

    public func run(_ connection: PostgresConnection, dryRun: Bool) throws -> DatabaseCompactionReport {
        var report = DatabaseCompactionReport()
        guard let generation = try Schema.generation(of: schema, connection) else {
            report.skipped = "no projection in schema \(schema) yet"
            return report
        }
        // Another log's projection (a database left from an older installation, not yet dropped by
        // the projector) holds other people's rows under the same device ids: this log's
        // retention says nothing about them, and the projector drops them all anyway.
        guard generation.logID == logID else {
            report.skipped =
                "the projection in schema \(schema) was folded from log \(generation.logID.map { "\($0)" } ?? "unknown"), "
                + "not from this log \(logID); the projector rebuilds it"
            return report
        }
        report.partitionsDropped = try dropExpiredPartitions(connection, dryRun: dryRun, report: &report)
        let overridden = policy.overriddenCutoffs(nowMicros: nowMicros)
        let defaultCutoff =
            nowMicros - Int64(min(policy.settings.retentionDays, RetentionPolicy.windowDaysMax))
            * RetentionPolicy.microsPerDay
        let others: PostgresValue = .int64Array(overridden.keys.map { Int64($0) })

        // Expired fixes: per overridden device with its cutoff, then everyone else with the default.
        for (device, cutoff) in overridden.sorted(by: { $0.key < $1.key }) {
            report.locationRowsDeleted += try deleteBounded(
                "device_locations", key: "device_id, log_offset, fix_index, recorded_at",
                where: "device_id = $1 AND (recorded_at < $2 OR received_at < $2)",
                [.int64(Int64(device)), .timestamp(micros: cutoff)], connection, dryRun: dryRun)
        }
        report.locationRowsDeleted += try deleteBounded(
            "device_locations", key: "device_id, log_offset, fix_index, recorded_at",
            where: "device_id <> ALL($1::bigint[]) AND (recorded_at < $2 OR received_at < $2)",
            [others, .timestamp(micros: defaultCutoff)], connection, dryRun: dryRun)
        // Erasures and removals (the projector deletes these when it folds the event; this catches
        // rows a lagging projector inserted before reaching it, and costs nothing otherwise).
        for (device, list) in policy.erasures.sorted(by: { $0.key < $1.key }) {
            for entry in list {
                report.locationRowsDeleted += try deleteBounded(
                    "device_locations", key: "device_id, log_offset, fix_index, recorded_at",
                    where: """
                        device_id = $1 AND log_offset < $2 AND ($3::timestamptz IS NULL OR recorded_at >= $3)
                        AND ($4::timestamptz IS NULL OR recorded_at < $4)
                        """,
                    [
                        .int64(Int64(device)), .int64(Int64(entry.offset)),
                        entry.erase.fromMicros.map { .timestamp(micros: $0) },
                        entry.erase.toMicros.map { .timestamp(micros: $0) },
                    ], connection, dryRun: dryRun)
            }
        }
        for (device, offset) in policy.removedAt.sorted(by: { $0.key < $1.key }) {
            let parameters: [PostgresValue?] = [.int64(Int64(device)), .int64(Int64(offset))]
            report.locationRowsDeleted += try deleteBounded(
                "device_locations", key: "device_id, log_offset, fix_index, recorded_at",
                where: "device_id = $1 AND log_offset < $2", parameters, connection, dryRun: dryRun)
            report.batchRowsDeleted += try deleteBounded(
                "device_batches", key: "log_offset", where: "device_id = $1 AND log_offset < $2", parameters,
                connection, dryRun: dryRun)
        }
        // Envelopes past the arrivals window (or the device's fix window, when longer).
        let devices = Set(policy.userOfDevice.keys).union(policy.deviceDays.keys)
        var envelopeCutoffs: [Int64: [Int64]] = [:]
        let defaultEnvelopeCutoff = policy.envelopeCutoffMicros(device: UInt64.max, nowMicros: nowMicros)
        for device in devices {
            let cutoff = policy.envelopeCutoffMicros(device: device, nowMicros: nowMicros)
            if cutoff != defaultEnvelopeCutoff { envelopeCutoffs[cutoff, default: []].append(Int64(device)) }
        }
        for (cutoff, ids) in envelopeCutoffs.sorted(by: { $0.key < $1.key }) {
            report.batchRowsDeleted += try deleteBounded(
                "device_batches", key: "log_offset",
                where: "device_id = ANY($1::bigint[]) AND received_at < $2",
                [.int64Array(ids), .timestamp(micros: cutoff)], connection, dryRun: dryRun)
        }
        report.batchRowsDeleted += try deleteBounded(
            "device_batches", key: "log_offset", where: "device_id <> ALL($1::bigint[]) AND received_at < $2",
            [.int64Array(envelopeCutoffs.values.flatMap { $0 }), .timestamp(micros: defaultEnvelopeCutoff)],
            connection, dryRun: dryRun)
        report.latestRecomputed = try recomputeStaleLatest(connection, dryRun: dryRun)
        return report
    }

    /// Deletes the rows matching `condition`, at most `rowsPerStatementMax` per statement (each its
    /// own transaction), until none is left. `key` identifies a row within the table.
    private func deleteBounded(
        _ table: String, key: String, where condition: String, _ parameters: [PostgresValue?],
        _ connection: PostgresConnection, dryRun: Bool
    ) throws -> Int {
        if dryRun {
            let result = try connection.execute(
                "SELECT count(*) FROM \(s).\(table) WHERE \(condition)", parameters)
            return Int(try result.int64(0, 0) ?? 0)
        }
        var total = 0
        while true {
            let result = try connection.execute(
                """
                DELETE FROM \(s).\(table) WHERE (\(key)) IN (
                    SELECT \(key) FROM \(s).\(table) WHERE \(condition) LIMIT \(rowsPerStatementMax))
                """, parameters)
            total += result.affectedRows
            if result.affectedRows < rowsPerStatementMax { return total }
        }
    }

    /// Monthly partitions of `device_locations` that ended before the longest window of anyone:
    /// every row in them is expired for every device, so the whole table goes at once.
    private func dropExpiredPartitions(
        _ connection: PostgresConnection, dryRun: Bool, report: inout DatabaseCompactionReport
    ) throws -> [String] {
        let result = try connection.execute(
            """
            SELECT c.relname FROM pg_inherits i
            JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
            JOIN pg_namespace n ON n.oid = p.relnamespace
            WHERE n.nspname = $1 AND p.relname = 'device_locations' ORDER BY c.relname
            """, [.text(schema)])
        let cutoff = nowMicros - Int64(policy.longestWindowDays) * RetentionPolicy.microsPerDay
        var dropped: [String] = []
        for row in 0..<result.rowCount {
            guard let name = result.string(row, 0), let end = Self.partitionEndMicros(name), end <= cutoff
            else {
                continue
            }
            let rows = try connection.execute(
                "SELECT count(*) FROM \(s).\(PostgresConnection.quoteIdentifier(name))")
            report.locationRowsDeleted += Int(try rows.int64(0, 0) ?? 0)
            if !dryRun {
                _ = try connection.execute(
                    "DROP TABLE IF EXISTS \(s).\(PostgresConnection.quoteIdentifier(name))")
            }
            dropped.append(name)
        }
        return dropped
    }

    /// The end of the month a partition named `device_locations_yYYYYmMM` covers, or nil for
    /// another name (the default partition).
    static func partitionEndMicros(_ name: String) -> Int64? {
        Month(partitionName: name).map { Month(index: $0.index + 1).startMicros }
    }

    /// Devices whose `device_latest` row is no longer in the history get it recomputed, under a lock
    /// that keeps the projector's upsert of a newer fix from interleaving.
    private func recomputeStaleLatest(_ connection: PostgresConnection, dryRun: Bool) throws -> Int {
        let stale = """
            SELECT l.device_id FROM \(s).device_latest l WHERE NOT EXISTS (
                SELECT 1 FROM \(s).device_locations d WHERE d.device_id = l.device_id AND d.log_offset = l.log_offset
                    AND d.fix_index = l.fix_index AND d.recorded_at = l.recorded_at)
            """
        if dryRun { return try connection.execute(stale).rowCount }
        return try connection.transaction { connection in
            _ = try connection.execute("LOCK TABLE \(s).device_latest IN SHARE ROW EXCLUSIVE MODE")
            let result = try connection.execute(stale)
            var ids: [UInt64] = []
            for row in 0..<result.rowCount { ids.append(UInt64(bitPattern: try result.int64(row, 0) ?? 0)) }
            try ProjectionStore.recomputeLatest(schema: schema, deviceIDs: ids, connection)
            return ids.count
        }
    }
}
