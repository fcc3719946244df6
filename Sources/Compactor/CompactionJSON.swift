import Events
import JSON

/// A started run's state as `GET /admin/compact/runs/{id}` answers it.
public enum CompactRunJSON {
    public static func encode(id: Int, _ state: CompactionRunState) -> [UInt8] {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("run_id")
        writer.int64(Int64(id))
        writer.key("state")
        switch state {
        case .waiting:
            writer.string("waiting")
        case .running(let phase):
            writer.string("running")
            if let phase {
                writer.key("phase")
                encode(phase, &writer)
            }
        case .done(let report):
            writer.string("done")
            writer.key("report")
            CompactReportJSON.encode(report, &writer)
        case .failed(let message):
            writer.string("failed")
            writer.key("error")
            writer.string(message)
        }
        writer.endObject()
        return writer.bytes
    }

    public static func encode(_ phase: CompactionPhase, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("step")
        switch phase {
        case .waiting:
            writer.string("waiting")
        case .readingPolicy(let offset, let end):
            writer.string("reading_policy")
            writer.key("offset")
            writer.int64(Int64(offset))
            writer.key("end")
            writer.int64(Int64(end))
        case .rewritingLog(let done, let total):
            writer.string("rewriting_log")
            writer.key("segments_done")
            writer.int64(Int64(done))
            writer.key("segments_total")
            writer.int64(Int64(total))
        case .snapshotting:
            writer.string("registry_snapshot")
        case .database:
            writer.string("database")
        }
        writer.endObject()
    }
}

public enum CompactReportJSON {
    public static func encode(_ report: CompactionReport) -> [UInt8] {
        var writer = JSONWriter(capacity: 512)
        encode(report, &writer)
        return writer.bytes
    }

    public static func encode(_ report: CompactionReport, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("as_of")
        writer.string(RFC3339.formatMicros(report.asOfMicros))
        writer.key("dry_run")
        writer.bool(report.dryRun)
        writer.key("log")
        writer.beginObject()
        let log = report.log
        for (key, value) in [
            ("segments_scanned", log.segmentsScanned), ("segments_rewritten", log.segmentsRewritten),
            ("segments_deleted", log.segmentsDeleted), ("fixes_removed", log.fixesRemoved),
            ("places_removed", log.placesRemoved), ("command_events_removed", log.commandEventsRemoved),
            ("presence_events_removed", log.presenceEventsRemoved),
            ("records_shrunk", log.recordsShrunk), ("envelopes_made", log.envelopesMade),
            ("records_dropped", log.recordsDropped), ("bytes_before", log.bytesBefore),
            ("bytes_after", log.bytesAfter), ("bytes_freed", log.bytesFreed),
        ] {
            writer.key(key)
            writer.int64(Int64(value))
        }
        writer.key("active_segment_rolled")
        writer.bool(log.activeSegmentRolled)
        writer.endObject()
        writer.key("database")
        if let database = report.database {
            writer.beginObject()
            writer.key("location_rows_deleted")
            writer.int64(Int64(database.locationRowsDeleted))
            writer.key("partitions_dropped")
            writer.beginArray()
            for name in database.partitionsDropped { writer.string(name) }
            writer.endArray()
            writer.key("batch_rows_deleted")
            writer.int64(Int64(database.batchRowsDeleted))
            writer.key("import_rows_deleted")
            writer.int64(Int64(database.importRowsDeleted))
            writer.key("command_rows_deleted")
            writer.int64(Int64(database.commandRowsDeleted))
            writer.key("geofence_rows_deleted")
            writer.int64(Int64(database.geofenceRowsDeleted))
            writer.key("latest_recomputed")
            writer.int64(Int64(database.latestRecomputed))
            writer.key("relations_rewritten")
            writer.beginArray()
            for name in database.relationsRewritten { writer.string(name) }
            writer.endArray()
            writer.key("checkpoint")
            writer.bool(database.checkpoint)
            if let reason = database.checkpointSkipped {
                writer.key("checkpoint_skipped")
                writer.string(reason)
            }
            if let skipped = database.skipped {
                writer.key("skipped")
                writer.string(skipped)
            }
            writer.endObject()
        } else {
            writer.null()
        }
        writer.key("registry_snapshot_offset")
        if let offset = report.registrySnapshotOffset { writer.int64(Int64(offset)) } else { writer.null() }
        writer.key("stopped_early")
        writer.bool(report.stoppedEarly)
        writer.key("elapsed_ms")
        writer.int64(report.elapsedMicros / 1000)
        writer.endObject()
    }
}
