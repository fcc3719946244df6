import Events
import Postgres
import ProjectionSchema
import Projector

/// Retention and erasure reaching the geofence projection (docs/retention.md, "Geofences"): the
/// transitions the fixes decided (`geofence_transitions`; the fixes a recompute replays are the
/// main projection's history, which the main half compacts) go by the same rule as history: past
/// the device's window by the earlier of the two clocks, inside an erased range, every row of a removed device; so do the transitions
/// the device reported itself (`device_transitions`, received_at being the arrival of the report
/// that carried them), and the found notices fired ("notify when found": the fix that came back).
/// The geofence projector deletes erased and removed rows itself when it folds the event; this
/// catches rows it inserted while behind. The notifier's deliveries (`findmy_geofence_alerts`: the
/// bodies sent, with the fix's position) go by the same rule, see `compactAlertDeliveries`. After a
/// scrub of the main projection, these tables are rewritten too, so that erased coordinates do not
/// stay in their pages.
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
        let tables = [GeofenceSchema.Table.transitions, .deviceTransitions, .foundNotices].map(\.rawValue)
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
        let deliveries = try compactAlertDeliveries(
            overridden: overridden, defaultCutoff: defaultCutoff, connection, dryRun: dryRun, report: &report)
        // The main scrub ran (an erasure or removal was folded since the last one): rewrite these too.
        guard !dryRun, !report.relationsRewritten.isEmpty else { return }
        try connection.executeScript("SET lock_timeout = \(Self.scrubLockWaitMillisMax)")
        defer { try? connection.executeScript("RESET lock_timeout") }
        var rewritten = tables.map { (schema, $0) }
        if deliveries { rewritten.append((GeofenceSchema.alertsSchema, GeofenceSchema.alertDeliveries)) }
        for (tableSchema, table) in rewritten {
            try connection.executeScript(
                "VACUUM FULL \(PostgresConnection.quoteIdentifier(tableSchema)).\(PostgresConnection.quoteIdentifier(table))"
            )
            report.relationsRewritten.append(tableSchema + "." + table)
        }
    }

    /// The notifier's deliveries of geofence alerts and found notices, whatever their state: past
    /// the device's window by the earlier of the fix's `recorded_at` and the row's creation (the
    /// notifier's clock, close to the arrival), recorded inside an erased range, every row of a
    /// removed device. A delivery carries no log offset, so an erasure reaches the deliveries of
    /// every fix recorded in its range, also one that arrived after it (a device clock set back):
    /// more than the erasure covers, never less. False when the notifier has no table yet.
    private func compactAlertDeliveries(
        overridden: [UInt64: Int64], defaultCutoff: Int64, _ connection: PostgresConnection, dryRun: Bool,
        report: inout DatabaseCompactionReport
    ) throws -> Bool {
        let schema = GeofenceSchema.alertsSchema
        let table = GeofenceSchema.alertDeliveries
        let exists = try connection.execute(
            "SELECT to_regclass($1) IS NOT NULL", [.text(schema + "." + table)]
        ).bool(0, 0)
        guard exists == true else { return false }
        func delete(_ condition: String, _ parameters: [PostgresValue?]) throws {
            report.geofenceRowsDeleted += try deleteBounded(
                table, key: "id", where: condition, parameters, connection, dryRun: dryRun, schema: schema)
        }
        let expired = "(recorded_at_micros < $2 OR created_micros < $2)"
        for (device, cutoff) in overridden.sorted(by: { $0.key < $1.key }) {
            try delete("device_id = $1 AND \(expired)", [.int64(Int64(device)), .int64(cutoff)])
        }
        try delete(
            "device_id <> ALL($1::bigint[]) AND \(expired)",
            [.int64Array(overridden.keys.map { Int64($0) }), .int64(defaultCutoff)])
        for (device, list) in policy.erasures.sorted(by: { $0.key < $1.key }) {
            for entry in list {
                try delete(
                    """
                    device_id = $1 AND ($2::bigint IS NULL OR recorded_at_micros >= $2)
                    AND ($3::bigint IS NULL OR recorded_at_micros < $3)
                    """,
                    [
                        .int64(Int64(device)), entry.erase.fromMicros.map { .int64($0) },
                        entry.erase.toMicros.map { .int64($0) },
                    ])
            }
        }
        for device in policy.removedAt.keys.sorted() {
            try delete("device_id = $1", [.int64(Int64(device))])
        }
        return true
    }
}
