import Events
import Postgres
import ProjectionSchema
import Projector

/// What one compaction did to PostgreSQL (or, in a dry run, would do).
public struct DatabaseCompactionReport: Sendable, Equatable {
    public var locationRowsDeleted = 0
    public var partitionsDropped: [String] = []
    public var batchRowsDeleted = 0
    /// Rows of `device_imports` deleted: an import's row goes as its batches' envelopes do.
    public var importRowsDeleted = 0
    /// Rows of `commands` deleted (with their `command_deliveries`; docs/retention.md, "Commands").
    public var commandRowsDeleted = 0
    /// Rows of the geofence projection deleted (fixes, transitions, found notices) and of the
    /// notifier's deliveries (GeofenceCompaction.swift).
    public var geofenceRowsDeleted = 0
    public var latestRecomputed = 0
    /// Tables rewritten (`VACUUM FULL`) because erased rows left their bytes in them, in order.
    public var relationsRewritten: [String] = []
    /// Whether a WAL switch and a `CHECKPOINT` followed them (so old WAL segments are removed).
    public var checkpoint = false
    /// Why a checkpoint was due but not made (an external server without the privilege), or nil.
    public var checkpointSkipped: String?
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
///
/// A deleted row is not gone from disk: PostgreSQL marks it dead, and its bytes stay in the table's
/// page (a plain `VACUUM` frees the space but leaves the bytes until a new row is written over
/// them) and in the WAL segments that recorded its insertion and deletion. So after an erasure or
/// a removal the projector has folded, the run also *scrubs* (`scrub`): it rewrites the affected
/// tables with `VACUUM FULL` (a new file of the live rows; the old one is deleted), analyzes them
/// again and rewrites `pg_statistic` (whose sampled values may hold erased ones), switches to a
/// new WAL segment and makes a `CHECKPOINT`, after which PostgreSQL deletes the older segments (the
/// embedded cluster runs with `wal_recycle = off`, so they are deleted rather than kept for reuse).
/// Measured with ops/bench/erasure-residue.py (docs/benchmarks.md).
public struct DatabaseCompaction {
    public let policy: RetentionPolicy
    public let nowMicros: Int64
    public let rowsPerStatementMax: Int
    public let schema: String
    /// The log `policy` was folded from: only a projection bound to it is compacted.
    public let logID: UUID128
    /// How long one `VACUUM FULL` of the scrub waits for its table's lock: behind it, every new
    /// reader of the table waits too, so a long reader makes the run fail (retried at the next
    /// interval, the mark unmoved) rather than stall the read side.
    public static let scrubLockWaitMillisMax = 10_000

    public init(
        policy: RetentionPolicy, nowMicros: Int64, rowsPerStatementMax: Int, logID: UUID128,
        schema: String = ProjectionSchema.live
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
        // Another version's tables (the projector rebuilds it at its next start) may lack a table
        // this run deletes from; the rebuild folds the compacted log anyway.
        guard generation.version == Schema.projectionVersion else {
            report.skipped =
                "the projection in schema \(schema) is of version \(generation.version), not \(Schema.projectionVersion); "
                + "the projector rebuilds it"
            return report
        }
        report.partitionsDropped = try dropExpiredPartitions(connection, dryRun: dryRun, report: &report)
        let overridden = policy.overriddenCutoffs(nowMicros: nowMicros)
        let defaultCutoff =
            nowMicros - Int64(min(policy.settings.retentionDays, RetentionPolicy.windowDaysMax))
            * RetentionPolicy.microsPerDay

        report.locationRowsDeleted += try deleteExpiredFixes(
            overridden: overridden, defaultCutoff: defaultCutoff, connection, dryRun: dryRun)
        try deleteErasedAndRemoved(connection, dryRun: dryRun, report: &report)
        report.batchRowsDeleted += try deleteExpiredEnvelopes(
            ProjectionSchema.Table.deviceBatches, key: batchKey, connection, dryRun: dryRun)
        report.importRowsDeleted += try deleteExpiredEnvelopes(
            ProjectionSchema.Table.deviceImports, key: "import_id", connection, dryRun: dryRun)
        report.commandRowsDeleted = try deleteDeadCommands(
            overridden: overridden, defaultCutoff: defaultCutoff, connection, dryRun: dryRun)
        report.latestRecomputed = try recomputeStaleLatest(connection, dryRun: dryRun)
        try scrub(connection, dryRun: dryRun, report: &report)
        try compactGeofences(
            overridden: overridden, defaultCutoff: defaultCutoff, connection, dryRun: dryRun, report: &report)
        return report
    }

    /// Expired fixes: per overridden device with its cutoff, then everyone else with the default.
    private func deleteExpiredFixes(
        overridden: [UInt64: Int64], defaultCutoff: Int64, _ connection: PostgresConnection, dryRun: Bool
    ) throws -> Int {
        let others: PostgresValue = .int64Array(overridden.keys.map { Int64($0) })
        var deleted = 0
        for (device, cutoff) in overridden.sorted(by: { $0.key < $1.key }) {
            deleted += try deleteBounded(
                ProjectionSchema.Table.deviceLocations.rawValue,
                key: historyKey,
                where: "device_id = $1 AND (recorded_at < $2 OR received_at < $2)",
                [.int64(Int64(device)), .timestamp(micros: cutoff)], connection, dryRun: dryRun)
        }
        deleted += try deleteBounded(
            ProjectionSchema.Table.deviceLocations.rawValue,
            key: historyKey,
            where: "device_id <> ALL($1::bigint[]) AND (recorded_at < $2 OR received_at < $2)",
            [others, .timestamp(micros: defaultCutoff)], connection, dryRun: dryRun)
        return deleted
    }

    /// Erasures and removals (the projector deletes these when it folds the event; this catches
    /// rows a lagging projector inserted before reaching it, and costs nothing otherwise).
    private func deleteErasedAndRemoved(
        _ connection: PostgresConnection, dryRun: Bool, report: inout DatabaseCompactionReport
    ) throws {
        for (device, list) in policy.erasures.sorted(by: { $0.key < $1.key }) {
            for entry in list {
                report.locationRowsDeleted += try deleteBounded(
                    ProjectionSchema.Table.deviceLocations.rawValue,
                    key: historyKey,
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
                ProjectionSchema.Table.deviceLocations.rawValue,
                key: historyKey,
                where: "device_id = $1 AND log_offset < $2", parameters, connection, dryRun: dryRun)
            report.batchRowsDeleted += try deleteBounded(
                ProjectionSchema.Table.deviceBatches.rawValue, key: batchKey,
                where: "device_id = $1 AND log_offset < $2", parameters,
                connection, dryRun: dryRun)
            report.importRowsDeleted += try deleteBounded(
                ProjectionSchema.Table.deviceImports.rawValue, key: "import_id",
                where: "device_id = $1 AND log_offset < $2", parameters,
                connection, dryRun: dryRun)
        }
    }

    /// Envelopes past the arrivals window (or the device's fix window, when longer): rows of
    /// `table` (`device_batches`, or `device_imports`, which follow the same rule) by `received_at`.
    private func deleteExpiredEnvelopes(
        _ table: ProjectionSchema.Table, key: String, _ connection: PostgresConnection, dryRun: Bool
    ) throws -> Int {
        var deleted = 0
        let devices = Set(policy.userOfDevice.keys).union(policy.deviceDays.keys)
        var envelopeCutoffs: [Int64: [Int64]] = [:]
        let defaultEnvelopeCutoff = policy.envelopeCutoffMicros(device: UInt64.max, nowMicros: nowMicros)
        for device in devices {
            let cutoff = policy.envelopeCutoffMicros(device: device, nowMicros: nowMicros)
            if cutoff != defaultEnvelopeCutoff { envelopeCutoffs[cutoff, default: []].append(Int64(device)) }
        }
        for (cutoff, ids) in envelopeCutoffs.sorted(by: { $0.key < $1.key }) {
            deleted += try deleteBounded(
                table.rawValue, key: key,
                where: "device_id = ANY($1::bigint[]) AND received_at < $2",
                [.int64Array(ids), .timestamp(micros: cutoff)], connection, dryRun: dryRun)
        }
        deleted += try deleteBounded(
            table.rawValue, key: key,
            where: "device_id <> ALL($1::bigint[]) AND received_at < $2",
            [.int64Array(envelopeCutoffs.values.flatMap { $0 }), .timestamp(micros: defaultEnvelopeCutoff)],
            connection, dryRun: dryRun)
        return deleted
    }

    /// Closed commands (answered or expired) requested before their device's cutoff, or covered by
    /// an erasure after them, and every command of a removed device, with their deliveries: the
    /// rule the log half applies to their events (docs/retention.md, "Commands"), decided here from
    /// the rows themselves, so rows whose events an earlier run already removed from the log still
    /// go. Open commands stay.
    private func deleteDeadCommands(
        overridden: [UInt64: Int64], defaultCutoff: Int64, _ connection: PostgresConnection, dryRun: Bool
    ) throws -> Int {
        let closed = "state IN ('answered', 'expired')"
        let commands = "\(s).\(ProjectionSchema.Table.commands.rawValue)"
        var deleted = 0
        func delete(_ condition: String, _ parameters: [PostgresValue?]) throws {
            // Deliveries first: a crash between the two leaves a command without its deliveries,
            // which the next run deletes, never a delivery without its command.
            _ = try deleteBounded(
                ProjectionSchema.Table.commandDeliveries.rawValue, key: "log_offset",
                where: "command_id IN (SELECT command_id FROM \(commands) WHERE \(condition))", parameters,
                connection, dryRun: dryRun)
            deleted += try deleteBounded(
                ProjectionSchema.Table.commands.rawValue, key: "command_id", where: condition, parameters,
                connection, dryRun: dryRun)
        }
        for (device, cutoff) in overridden.sorted(by: { $0.key < $1.key }) {
            try delete(
                "device_id = $1 AND \(closed) AND requested_at < $2",
                [.int64(Int64(device)), .timestamp(micros: cutoff)])
        }
        try delete(
            "device_id <> ALL($1::bigint[]) AND \(closed) AND requested_at < $2",
            [.int64Array(overridden.keys.map { Int64($0) }), .timestamp(micros: defaultCutoff)])
        for (device, list) in policy.erasures.sorted(by: { $0.key < $1.key }) {
            for entry in list {
                try delete(
                    """
                    device_id = $1 AND log_offset < $2 AND \(closed)
                    AND ($3::timestamptz IS NULL OR requested_at >= $3)
                    AND ($4::timestamptz IS NULL OR requested_at < $4)
                    """,
                    [
                        .int64(Int64(device)), .int64(Int64(entry.offset)),
                        entry.erase.fromMicros.map { .timestamp(micros: $0) },
                        entry.erase.toMicros.map { .timestamp(micros: $0) },
                    ])
            }
        }
        for (device, offset) in policy.removedAt.sorted(by: { $0.key < $1.key }) {
            try delete("device_id = $1 AND log_offset < $2", [.int64(Int64(device)), .int64(Int64(offset))])
        }
        return deleted
    }

    /// `<schema>.erasures_scrubbed`: erasures and removals at offsets below `through_offset` have
    /// been scrubbed. It lives in the projection's schema on purpose: a rebuild replaces the schema
    /// (and may fold erasures into fresh tables), so the table goes with it and the next run
    /// scrubs the new tables.
    private var scrubTable: String { "\(s).erasures_scrubbed" }

    /// Rewrites the tables holding rows of erasures and removals the projector has folded since the
    /// last scrub, then switches WAL segments and checkpoints. Safe to repeat after a crash: the
    /// mark moves only after the checkpoint.
    private func scrub(
        _ connection: PostgresConnection, dryRun: Bool, report: inout DatabaseCompactionReport
    ) throws {
        var scrubbed: UInt64 = 0
        if try connection.execute("SELECT to_regclass($1) IS NOT NULL", [.text(scrubTable)]).string(0, 0)
            == "t"
        {
            scrubbed = UInt64(
                bitPattern:
                    try connection.execute("SELECT max(through_offset) FROM \(scrubTable)").int64(0, 0) ?? 0)
        }
        let checkpoint = try connection.execute(
            "SELECT next_offset FROM \(s).\(ProjectionSchema.Table.projectorCheckpoints.rawValue) WHERE projection = $1",
            [.text(Schema.projectionName)])
        let folded = checkpoint.rowCount > 0 ? UInt64(bitPattern: try checkpoint.int64(0, 0) ?? 0) : 0
        var ranges: [(fromMicros: Int64?, toMicros: Int64?)] = []
        var removals = false
        var through = scrubbed
        for (_, list) in policy.erasures {
            for entry in list where entry.offset >= scrubbed && entry.offset < folded {
                ranges.append((entry.erase.fromMicros, entry.erase.toMicros))
                through = max(through, entry.offset + 1)
            }
        }
        for (_, offset) in policy.removedAt where offset >= scrubbed && offset < folded {
            ranges.append((nil, nil))
            removals = true
            through = max(through, offset + 1)
        }
        guard !ranges.isEmpty else { return }
        report.relationsRewritten =
            try affectedPartitions(connection, ranges) + [ProjectionSchema.Table.deviceLatest.rawValue]
            + (removals
                ? [
                    ProjectionSchema.Table.deviceBatches.rawValue,
                    ProjectionSchema.Table.deviceImports.rawValue,
                ] : [])
            // An erased or removed device's closed commands: who located it, a lost's message and phone.
            + [ProjectionSchema.Table.commands.rawValue, ProjectionSchema.Table.commandDeliveries.rawValue]
        if dryRun { return }
        try connection.executeScript("SET lock_timeout = \(Self.scrubLockWaitMillisMax)")
        defer { try? connection.executeScript("RESET lock_timeout") }
        for relation in report.relationsRewritten {
            // VACUUM runs outside a transaction block: the simple protocol, one statement.
            try connection.executeScript("VACUUM FULL \(s).\(PostgresConnection.quoteIdentifier(relation))")
        }
        // The planner's statistics are sampled values: an erased coordinate can be one of
        // pg_statistic's most common values or histogram bounds. New statistics replace those rows
        // (the parent's ANALYZE samples every partition again), and rewriting pg_statistic drops
        // the replaced ones from its file. A role that does not own the database gets a warning,
        // not an error, and the old rows stay until autovacuum and reuse (docs/retention.md).
        let analyzed =
            [ProjectionSchema.Table.deviceLocations.rawValue]
            + report.relationsRewritten.filter {
                !$0.hasPrefix(ProjectionSchema.Table.deviceLocations.rawValue)
            }
        for relation in analyzed {
            try connection.executeScript("ANALYZE \(s).\(PostgresConnection.quoteIdentifier(relation))")
        }
        try connection.executeScript("VACUUM FULL pg_catalog.pg_statistic")
        do {
            try connection.executeScript("SELECT pg_switch_wal(); CHECKPOINT")
            report.checkpoint = true
        } catch {
            // An external server where findmy's role may not checkpoint (insufficient_privilege):
            // its own checkpoints (checkpoint_timeout) let the segments go later.
            guard error.sqlState == "42501" else { throw error }
            report.checkpointSkipped =
                "\(error.message): WAL keeps the erased rows until the server's next checkpoint"
        }
        try connection.executeScript(
            "CREATE TABLE IF NOT EXISTS \(scrubTable) (through_offset bigint NOT NULL)")
        try connection.transaction { connection in
            _ = try connection.execute("DELETE FROM \(scrubTable)")
            _ = try connection.execute(
                "INSERT INTO \(scrubTable) (through_offset) VALUES ($1)", [.int64(Int64(through))])
        }
    }

    /// The partitions of `device_locations` whose month overlaps one of `ranges` (every one for an
    /// unbounded range), and the default partition, which may hold any time.
    private func affectedPartitions(
        _ connection: PostgresConnection, _ ranges: [(fromMicros: Int64?, toMicros: Int64?)]
    ) throws -> [String] {
        let result = try connection.execute(
            """
            SELECT c.relname FROM pg_inherits i
            JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
            JOIN pg_namespace n ON n.oid = p.relnamespace
            WHERE n.nspname = $1 AND p.relname = '\(ProjectionSchema.Table.deviceLocations.rawValue)' ORDER BY c.relname
            """, [.text(schema)])
        var names: [String] = []
        for row in 0..<result.rowCount {
            guard let name = result.string(row, 0) else { continue }
            guard let end = Self.partitionEndMicros(name), let start = Self.partitionStartMicros(name) else {
                names.append(name)
                continue
            }
            let overlaps = ranges.contains { range in
                (range.fromMicros.map { $0 < end } ?? true) && (range.toMicros.map { $0 > start } ?? true)
            }
            if overlaps { names.append(name) }
        }
        return names
    }

    /// The history's unique key, whose index finds each row a bounded delete picked.
    let historyKey = "device_id, recorded_at, latitude, longitude"
    /// The arrivals' primary key (their only index), which finds each row a bounded delete picked.
    let batchKey = "device_id, received_at, log_offset"

    /// Deletes the rows matching `condition`, at most `rowsPerStatementMax` per statement (each its
    /// own transaction), until none is left. `key` identifies a row within the table.
    /// `schema`: another projection's (the geofences'), else the main generation's.
    func deleteBounded(
        _ table: String, key: String, where condition: String, _ parameters: [PostgresValue?],
        _ connection: PostgresConnection, dryRun: Bool, schema: String? = nil
    ) throws -> Int {
        let s = schema.map(PostgresConnection.quoteIdentifier) ?? self.s
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
            WHERE n.nspname = $1 AND p.relname = '\(ProjectionSchema.Table.deviceLocations.rawValue)' ORDER BY c.relname
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

    /// The start of the month a partition named `device_locations_yYYYYmMM` covers, or nil.
    static func partitionStartMicros(_ name: String) -> Int64? {
        Month(partitionName: name)?.startMicros
    }

    /// Devices whose `device_latest` row is no longer in the history get it recomputed, under a lock
    /// that keeps the projector's upsert of a newer fix from interleaving.
    private func recomputeStaleLatest(_ connection: PostgresConnection, dryRun: Bool) throws -> Int {
        let stale = """
            SELECT l.device_id FROM \(s).\(ProjectionSchema.Table.deviceLatest.rawValue) l WHERE NOT EXISTS (
                SELECT 1 FROM \(s).\(ProjectionSchema.Table.deviceLocations.rawValue) d WHERE d.device_id = l.device_id
                    AND d.recorded_at = l.recorded_at AND d.latitude = l.latitude AND d.longitude = l.longitude
                    AND d.log_offset = l.log_offset AND d.fix_index = l.fix_index)
            """
        if dryRun { return try connection.execute(stale).rowCount }
        return try connection.transaction { connection in
            _ = try connection.execute(
                "LOCK TABLE \(s).\(ProjectionSchema.Table.deviceLatest.rawValue) IN SHARE ROW EXCLUSIVE MODE")
            let result = try connection.execute(stale)
            var ids: [UInt64] = []
            for row in 0..<result.rowCount { ids.append(UInt64(bitPattern: try result.int64(row, 0) ?? 0)) }
            try ProjectionStore.recomputeLatest(schema: schema, deviceIDs: ids, connection)
            return ids.count
        }
    }
}
