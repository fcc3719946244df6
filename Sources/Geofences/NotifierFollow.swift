import Postgres
import ProjectionSchema

/// Where the notifier's two cursors stand, as its last rounds wrote them, so that a round with
/// nothing new after either writes nothing. The geofence projector wakes the notifier at each
/// commit (a few times a second under steady traffic) and most commits add no transition and no
/// found notice; each round's queueing is a write transaction per cursor (the cursor row locked and
/// written back), so a round that looked for nothing new paid two writes and their WAL for nothing.
struct NotifierFollow: Sendable {
    /// The geofence generation and the last transition id queued; nil: unknown (look).
    var transitions: (generation: String, id: Int64)?
    /// The same for the found notices.
    var foundNotices: (generation: String, id: Int64)?
}

extension GeofenceNotifier {
    /// Whether the queueing transactions may find anything: false only when a read-only look finds
    /// the geofence projection of the same generation and no row after either cursor this notifier
    /// wrote last. Any doubt (a cursor not written yet, a failed look, tables being made again)
    /// says true, and the round's transactions decide as before.
    func mayHaveNewRows() -> Bool {
        let follow = followed.withLock { $0 }
        guard let transitions = follow.transitions, let notices = follow.foundNotices,
            transitions.generation == notices.generation
        else { return true }
        let result = try? client.execute(
            """
            SELECT (SELECT created_at::text FROM findmy_meta.generations WHERE schema_name = $1)
                    IS DISTINCT FROM $2
                OR EXISTS (SELECT 1 FROM \(GeofenceSchema.Table.transitions.qualified) WHERE id > $3)
                OR EXISTS (SELECT 1 FROM \(GeofenceSchema.Table.foundNotices.qualified) WHERE id > $4)
            """,
            [
                .text(GeofenceSchema.schema), .text(transitions.generation), .int64(transitions.id),
                .int64(notices.id),
            ])
        return (try? result?.bool(0, 0)) ?? true
    }
}
