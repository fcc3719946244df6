import Postgres
import ProjectionSchema

/// The notifier's tables (docs/geofences.md, "Notifications"), in a schema of their own: the
/// geofence projection drops and rebuilds `findmy_geofences` when its version changes, and the record
/// of what was already announced must outlive that (a rebuild must not announce everything again).
///
/// `cursor` holds the last `geofence_transitions.id` looked at and the projection's generation it
/// belongs to (its `created_at` in `findmy_meta.generations`): a rebuilt projection numbers its rows
/// from 1 again, so a new generation starts the cursor over, and the unique idempotency key keeps a
/// transition announced before the rebuild from being announced twice.
public enum AlertTables {
    public static let schema = GeofenceSchema.alertsSchema
    public static let cursor = schema + ".cursor"
    public static let deliveries = schema + "." + GeofenceSchema.alertDeliveries
    /// The cursor's row.
    static let cursorName = "geofence_transitions"
    /// The found notices' cursor row (its `last_transition_id` is the last `found_notices.id`).
    static let foundCursorName = "found_notices"
    /// The `geofence_id` of a found notice's deliveries: no fence has it (fence ids start at 1).
    static let foundNoticeGeofenceID: UInt64 = 0

    package static func prepare(_ connection: PostgresConnection) throws {
        try connection.executeScript(
            """
            CREATE SCHEMA IF NOT EXISTS \(schema);
            CREATE TABLE IF NOT EXISTS \(cursor) (
                name text PRIMARY KEY,
                generation text NOT NULL,
                last_transition_id bigint NOT NULL
            );
            -- One row per (transition, channel). Times are µs on the notifier's clock (injected in tests).
            -- A found notice's delivery (docs/found-notices.md) has geofence_id 0, which no fence has,
            -- transition_id the found_notices id, and event 'found'.
            CREATE TABLE IF NOT EXISTS \(deliveries) (
                id bigserial PRIMARY KEY,
                geofence_id bigint NOT NULL,
                device_id bigint NOT NULL,
                transition_id bigint NOT NULL,
                event text NOT NULL,
                recorded_at_micros bigint NOT NULL,
                channel text NOT NULL CHECK (channel IN ('webhook', 'ntfy')),
                url text NOT NULL,
                idempotency_key text NOT NULL,
                body bytea NOT NULL,
                title text NOT NULL,
                tags text NOT NULL,
                state text NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
                attempts integer NOT NULL DEFAULT 0,
                next_attempt_micros bigint NOT NULL,
                last_status integer,
                last_error text,
                created_micros bigint NOT NULL,
                finished_micros bigint,
                UNIQUE (idempotency_key, channel)
            );
            CREATE INDEX IF NOT EXISTS deliveries_due ON \(deliveries) (next_attempt_micros) WHERE state = 'pending';
            CREATE INDEX IF NOT EXISTS deliveries_by_fence ON \(deliveries) (geofence_id, id);
            -- A device's found-notice log: without it, every user's found notices share geofence_id 0.
            CREATE INDEX IF NOT EXISTS found_deliveries_by_device ON \(deliveries) (device_id, id)
                WHERE geofence_id = \(foundNoticeGeofenceID);
            """)
    }
}
