import Events
import Identity
import Postgres

extension CompactService {
    /// The compactor of `findmy serve` and its schedule (not yet started), shown in /healthz and
    /// /metrics, each scheduled run logged.
    public static func service(
        _ configuration: Configuration, log: LogWriter, client: PostgresClient?,
        addStatusSource: (any StatusSource) -> Void,
        readerCheckpoint: @escaping @Sendable () -> UInt64?,
        snapshotAfterRewrite: @escaping Compactor.SnapshotWriter
    ) -> CompactorService {
        let compactor = Compactor(
            writer: log, client: client, options: configuration.options, readerCheckpoint: readerCheckpoint,
            snapshotAfterRewrite: snapshotAfterRewrite)
        addStatusSource(CompactorStatusSource(compactor: compactor))
        return CompactorService(compactor: compactor, schedule: configuration.schedule) { outcome in
            switch outcome {
            case .success(let report):
                StructuredLog.info(
                    "compacted",
                    [
                        "fixes_removed": .int(Int64(report.log.fixesRemoved)),
                        "places_removed": .int(Int64(report.log.placesRemoved)),
                        "command_events_removed": .int(Int64(report.log.commandEventsRemoved)),
                        "command_rows_deleted": .int(Int64(report.database?.commandRowsDeleted ?? 0)),
                        "presence_events_removed": .int(Int64(report.log.presenceEventsRemoved)),
                        "geofence_rows_deleted": .int(Int64(report.database?.geofenceRowsDeleted ?? 0)),
                        "bytes_freed": .int(Int64(report.log.bytesFreed)),
                        "segments_deleted": .int(Int64(report.log.segmentsDeleted)),
                        "segments_rewritten": .int(Int64(report.log.segmentsRewritten)),
                        "location_rows_deleted": .int(Int64(report.database?.locationRowsDeleted ?? 0)),
                        // 0: no snapshot written (nothing rewritten, or the write failed: its own line says why).
                        "registry_snapshot_offset": .int(Int64(report.registrySnapshotOffset ?? 0)),
                        "stopped_early": .bool(report.stoppedEarly),
                        "millis": .int(report.elapsedMicros / 1000),
                    ])
            case .failure(let error):
                StructuredLog.error("compaction_failed", ["error": .string("\(error)")])
            }
        }
    }
}
