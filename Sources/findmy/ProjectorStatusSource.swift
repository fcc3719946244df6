import Identity
import JSON
import Postgres
import Projector

/// A projector as `/healthz` and `/metrics` show it: the main one (`projector`,
/// `findmy_projector_*`), or another projection's (`geofences`, `findmy_geofences_projector_*`).
struct ProjectorStatusSource: StatusSource {
    let projector: Projector
    var name = "projector"
    var metricPrefix = "findmy_projector"

    func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let status = projector.status
        var members: [(String, JSONValue)] = [
            ("checkpoint", .integer(Int64(status.checkpoint))),
            ("lag_offsets", .integer(Int64(status.lagOffsets))),
            ("lag_seconds", .double(status.lagSeconds)),
            ("running", .bool(!status.stopped)),
        ]
        if let error = status.lastError { members.append(("error", .string(error))) }
        return (status.lastError != nil || status.stopped, members)
    }

    func metricsText() -> String {
        let status = projector.status
        return """
            # HELP \(metricPrefix)_checkpoint The next log offset the projector will fold.
            # TYPE \(metricPrefix)_checkpoint gauge
            \(metricPrefix)_checkpoint \(status.checkpoint)
            # HELP \(metricPrefix)_lag_offsets Durable records not yet folded into PostgreSQL.
            # TYPE \(metricPrefix)_lag_offsets gauge
            \(metricPrefix)_lag_offsets \(status.lagOffsets)
            # HELP \(metricPrefix)_lag_seconds Age of the oldest record not yet folded (0 when caught up).
            # TYPE \(metricPrefix)_lag_seconds gauge
            \(metricPrefix)_lag_seconds \(status.lagSeconds)
            # HELP \(metricPrefix)_records_total Records folded by this process.
            # TYPE \(metricPrefix)_records_total counter
            \(metricPrefix)_records_total \(status.recordsFolded)
            # HELP \(metricPrefix)_fixes_total Fixes written to device_locations by this process.
            # TYPE \(metricPrefix)_fixes_total counter
            \(metricPrefix)_fixes_total \(status.fixesFolded)
            # HELP \(metricPrefix)_failures_total Failed projector transactions (retried from the checkpoint).
            # TYPE \(metricPrefix)_failures_total counter
            \(metricPrefix)_failures_total \(status.reconnects)

            """
    }
}

/// The embedded PostgreSQL's restarts and last end, in `/healthz`'s `services`.
extension DatabaseService: ServiceHealthDetails {}

/// The supervisor's events of `findmy serve`'s embedded PostgreSQL, in the structured log.
func logSupervisorEvent(_ event: ClusterSupervisor.Event) {
    switch event {
    case .ended(let why):
        StructuredLog.error("postgres_ended", ["reason": .string(why)])
    case .restarted(let restarts):
        StructuredLog.info("postgres_restarted", ["restarts": .int(Int64(restarts))])
    case .restartFailed(let why, let nextAttemptInMicros):
        StructuredLog.error(
            "postgres_restart_failed",
            ["error": .string(why), "next_attempt_in_ms": .int(nextAttemptInMicros / 1000)])
    }
}
