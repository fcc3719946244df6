import Identity
import JSON

/// The compactor in /healthz ("compactor": runs, last run, last error) and /metrics (findmy_compactor_*).
public struct CompactorStatusSource: StatusSource {
    public let compactor: Compactor

    public init(compactor: Compactor) { self.compactor = compactor }
    public var name: String { "compactor" }

    public func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let totals = compactor.totals
        var members: [(String, JSONValue)] = [("runs", .integer(Int64(totals.runs)))]
        if let last = totals.lastRunMicros {
            members.append(("last_run", .string(RFC3339.formatMillis(last))))
        }
        if let error = totals.lastError { members.append(("error", .string(error))) }
        return (totals.lastError != nil, members)
    }

    public func metricsText() -> String {
        let totals = compactor.totals
        let lines: [(String, String, String, Int)] = [
            ("runs_total", "counter", "Compaction runs completed by this process.", totals.runs),
            (
                "failures_total", "counter", "Compaction runs that failed (retried at the next interval).",
                totals.failures
            ),
            ("fixes_removed_total", "counter", "Fixes removed from log segments.", totals.fixesRemoved),
            (
                "places_removed_total", "counter",
                "Region transitions and waypoints removed from log segments.", totals.placesRemoved
            ),
            (
                "log_bytes_freed_total", "counter", "Bytes of log segments freed by rewrites and deletions.",
                totals.bytesFreed
            ),
            ("segments_deleted_total", "counter", "Log segments deleted whole.", totals.segmentsDeleted),
            (
                "segments_rewritten_total", "counter", "Log segments rewritten without dead records.",
                totals.segmentsRewritten
            ),
            (
                "location_rows_deleted_total", "counter", "Rows removed from device_locations.",
                totals.locationRowsDeleted
            ),
            (
                "partitions_dropped_total", "counter", "Monthly device_locations partitions dropped.",
                totals.partitionsDropped
            ),
            (
                "batch_rows_deleted_total", "counter", "Rows removed from device_batches.",
                totals.batchRowsDeleted
            ),
            (
                "relations_rewritten_total", "counter",
                "Tables rewritten (VACUUM FULL) after erasures so deleted rows leave their files.",
                totals.relationsRewritten
            ),
            (
                "command_events_removed_total", "counter",
                "Command events (requested, sent, failed, answered, expired) removed from log segments.",
                totals.commandEventsRemoved
            ),
            (
                "command_rows_deleted_total", "counter",
                "Rows removed from commands (with their command_deliveries).", totals.commandRowsDeleted
            ),
            (
                "presence_events_removed_total", "counter",
                "Presence changes (headscale online/offline) removed from log segments.",
                totals.presenceEventsRemoved
            ),
            (
                "geofence_rows_deleted_total", "counter",
                "Rows removed from the geofence projection's tables (its fixes, transitions and found notices) and from the notifier's deliveries.",
                totals.geofenceRowsDeleted
            ),
        ]
        var text = ""
        for (name, type, help, value) in lines {
            text +=
                "# HELP findmy_compactor_\(name) \(help)\n# TYPE findmy_compactor_\(name) \(type)\nfindmy_compactor_\(name) \(value)\n"
        }
        return text
    }
}
