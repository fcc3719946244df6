import Events
import Postgres
import ProjectionSchema

// `device_imports` and `device_batches.import_id`: an import's `history_imported` record comes
// after its last fix batch, so its row is written after the batches of the same transaction, and
// it names its batches by id (docs/import-export.md, docs/postgres.md).

extension ProjectionStore {
    /// One row per import, then its id on the device's batches of the import that are still there.
    /// A device removed before the record is folded has no row left to hang it on: nothing is
    /// written for it. A record folded twice (the same import id) keeps its first row.
    func writeImports(_ rows: [ImportRow], _ connection: PostgresConnection) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        let imports = ProjectionSchema.Table.deviceImports.rawValue
        let batches = ProjectionSchema.Table.deviceBatches.rawValue
        for row in rows {
            let h = row.imported
            let importID: PostgresValue = .uuid(high: h.importID.high, low: h.importID.low)
            let device: PostgresValue = .int64(Int64(h.deviceID))
            let counts = [h.fixesRead, h.fixesAccepted, h.fixesRejected, h.fixesDuplicate, h.notAFix]
            _ = try connection.execute(
                """
                INSERT INTO \(s).\(imports) (import_id, device_id, log_offset, received_at, format, file_name,
                    sha256, file_bytes, user_id, fixes_read, fixes_accepted, fixes_rejected, fixes_duplicate,
                    not_a_fix, recorded_min, recorded_max)
                SELECT $1, $2, $3, $4, $5, $6, encode($7::bytea, 'hex'), $8, $9, $10, $11, $12, $13, $14, $15, $16
                WHERE EXISTS (SELECT 1 FROM \(s).devices WHERE id = $2)
                ON CONFLICT (import_id) DO NOTHING
                """,
                [
                    importID, device, .int64(Int64(row.logOffset)), .timestamp(micros: row.receivedAtMicros),
                    .text(h.format), .text(h.fileName), .bytes(h.fileSHA256),
                    .int64(Int64(clamping: h.fileBytes)), .int64(Int64(h.userID)),
                ] + counts.map { .int64(Int64(clamping: $0)) }
                    + [
                        h.recordedSpanMicros.map { .timestamp(micros: $0.lowerBound) },
                        h.recordedSpanMicros.map { .timestamp(micros: $0.upperBound) },
                    ])
            guard !h.batchIDs.isEmpty else { continue }
            _ = try connection.execute(
                """
                UPDATE \(s).\(batches) SET import_id = $1
                WHERE device_id = $2 AND log_offset < $3 AND import_id IS NULL AND batch_id = ANY($4::uuid[])
                """,
                [
                    importID, device, .int64(Int64(row.logOffset)),
                    .array(PostgresArray(.uuid, h.batchIDs.map { .uuid(high: $0.high, low: $0.low) })),
                ])
        }
    }
}
