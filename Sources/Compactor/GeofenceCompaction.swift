import Events
import Postgres
import ProjectionSchema
import Projector

/// Retention and erasure reaching the geofence projection (docs/retention.md,
/// "Geofences"): its copy of the fixes (`geofence_fixes`) and the transitions they decided
/// (`geofence_transitions`) go by the same rule as history: past the device's window by the earlier
/// of the two clocks, inside an erased range, every row of a removed device; so do the transitions
/// the device reported itself (`device_transitions`, received_at being the arrival of the report
/// that carried them). The geofence projector
/// deletes erased and removed rows itself when it folds the event; this catches rows it inserted
/// while behind. After a scrub of the main projection, the two tables are rewritten too, so that
/// erased coordinates do not stay in their pages.
///
/// Kept apart from the main projection's half on purpose (one call in `run`): its tables are in
/// their own schema, with their own binding to the log.
extension DatabaseCompaction {
    func compactGeofences(
        overridden: [UInt64: Int64], defaultCutoff: Int64, _ connection: PostgresConnection, dryRun: Bool,
        report: inout DatabaseCompactionReport
    ) throws {
        let schema = GeofenceSchema.schema
        guard let generation = try Schema.generation(of: schema, connection), generation.logID == logID else {
            return  // none yet, or another log's, which its projector drops
        }
        let tables = [GeofenceSchema.Table.fixes, .transitions, .deviceTransitions].map(\.rawValue)
        func delete(_ condition: String, _ parameters: [PostgresValue?]) throws {
            for table in tables {
                report.geofenceRowsDeleted += try deleteBounded(
                    table, key: "ctid", where: condition, parameters, connection, dryRun: dryRun,
                    schema: schema)
            }
        }
        for (device, cutoff) in overridden.sorted(by: { $0.key < $1.key }) {
            try delete(
                "device_id = $1 AND (recorded_at < $2 OR received_at < $2)",
                [.int64(Int64(device)), .timestamp(micros: cutoff)])
        }
        try delete(
            "device_id <> ALL($1::bigint[]) AND (recorded_at < $2 OR received_at < $2)",
            [.int64Array(overridden.keys.map { Int64($0) }), .timestamp(micros: defaultCutoff)])
        for (device, list) in policy.erasures.sorted(by: { $0.key < $1.key }) {
            for entry in list {
                try delete(
                    """
                    device_id = $1 AND log_offset < $2 AND ($3::timestamptz IS NULL OR recorded_at >= $3)
                    AND ($4::timestamptz IS NULL OR recorded_at < $4)
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
        // The main scrub ran (an erasure or removal was folded since the last one): rewrite these too.
        guard !dryRun, !report.relationsRewritten.isEmpty else { return }
        try connection.executeScript("SET lock_timeout = \(Self.scrubLockWaitMillisMax)")
        defer { try? connection.executeScript("RESET lock_timeout") }
        for table in tables {
            try connection.executeScript(
                "VACUUM FULL \(PostgresConnection.quoteIdentifier(schema)).\(PostgresConnection.quoteIdentifier(table))"
            )
            report.relationsRewritten.append(schema + "." + table)
        }
    }
}
