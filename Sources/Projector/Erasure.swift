import Events
import Postgres

/// The projection side of erasure (docs/retention.md): rows go at once, in the transaction that
/// folds the event, so a reader never sees an erased fix after the event's offset is projected.
extension ProjectionStore {
    private var quoted: String { PostgresConnection.quoteIdentifier(schema) }

    /// Deletes the device's history rows of records before `offset` in the erased range, then
    /// recomputes its latest position from what is left.
    func eraseRows(_ erase: HistoryErased, beforeOffset offset: UInt64, _ connection: PostgresConnection)
        throws
    {
        let s = quoted
        _ = try connection.execute(
            """
            DELETE FROM \(s).device_locations WHERE device_id = $1 AND log_offset < $2
                AND ($3::timestamptz IS NULL OR recorded_at >= $3) AND ($4::timestamptz IS NULL OR recorded_at < $4)
            """,
            [
                .int64(Int64(erase.deviceID)), .int64(Int64(offset)),
                erase.fromMicros.map { .timestamp(micros: $0) },
                erase.toMicros.map { .timestamp(micros: $0) },
            ])
        // Its closed commands requested in the range (who located it, a lost's message and phone):
        // the compactor drops their events by the same rule (docs/retention.md, "Commands"). An
        // open one stays; once closed, the compactor's next run deletes it.
        for table in ["command_deliveries", "commands"] {
            _ = try connection.execute(
                """
                DELETE FROM \(s).\(table) WHERE command_id IN (SELECT command_id FROM \(s).commands
                    WHERE device_id = $1 AND log_offset < $2 AND state IN ('answered', 'expired')
                    AND ($3::timestamptz IS NULL OR requested_at >= $3)
                    AND ($4::timestamptz IS NULL OR requested_at < $4))
                """,
                [
                    .int64(Int64(erase.deviceID)), .int64(Int64(offset)),
                    erase.fromMicros.map { .timestamp(micros: $0) },
                    erase.toMicros.map { .timestamp(micros: $0) },
                ])
        }
        try Self.recomputeLatest(schema: schema, deviceIDs: [erase.deviceID], connection)
    }

    func removeDevice(_ deviceID: UInt64, _ connection: PostgresConnection) throws {
        let s = quoted
        let id: [PostgresValue?] = [.int64(Int64(deviceID))]
        for table in [
            "device_locations", "device_latest", "device_batches", "device_imports", "push_devices",
            "commands",
            "command_deliveries",
        ] {
            _ = try connection.execute("DELETE FROM \(s).\(table) WHERE device_id = $1", id)
        }
        _ = try connection.execute("DELETE FROM \(s).devices WHERE id = $1", id)
    }

    /// Sets `device_latest` of each device to its best remaining row by `LatestRule`, or removes it
    /// when the device has no history left. The caller's transaction makes it atomic.
    public static func recomputeLatest(schema: String, deviceIDs: [UInt64], _ connection: PostgresConnection)
        throws
    {
        guard !deviceIDs.isEmpty else { return }
        let s = PostgresConnection.quoteIdentifier(schema)
        let ids: [PostgresValue?] = [.int64Array(deviceIDs.map { Int64($0) })]
        let names = locationColumns.joined(separator: ", ")
        _ = try connection.execute("DELETE FROM \(s).device_latest WHERE device_id = ANY($1::bigint[])", ids)
        _ = try connection.execute(
            """
            INSERT INTO \(s).device_latest (\(names))
            SELECT DISTINCT ON (device_id) \(names) FROM \(s).device_locations
            WHERE device_id = ANY($1::bigint[])
            ORDER BY device_id, \(LatestRule.sqlOrder)
            """, ids)
    }
}
