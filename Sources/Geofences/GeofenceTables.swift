import Events
import Postgres
import ProjectionSchema
import Projector

/// The geofence projection's tables (docs/geofences.md, "Tables"), in the schema `GeofenceSchema.schema`.
/// Like the main projection they are a pure function of the log: a version other than `version`,
/// or tables folded from another log, are dropped and folded again from offset 0.
public enum GeofenceTables {
    /// 1: geofences, geofence_fixes, geofence_state, geofence_transitions, projector_checkpoints.
    /// 2: device_transitions (the device's own enter and leave, OwnTracks `transition`).
    /// 3: found_notice_armed and found_notices ("notify when found", FoundNoticeFold.swift).
    /// 4: no geofence_fixes: a recompute replays the main projection's history.
    public static let version = 4
    /// The projection's name in its `projector_checkpoints`.
    public static let projectionName = "geofences"

    static func create(_ schema: String, logID: UUID128?, _ connection: PostgresConnection) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        try connection.transaction { connection in
            try connection.executeScript(
                """
                DROP SCHEMA IF EXISTS \(s) CASCADE;
                CREATE SCHEMA \(s);
                CREATE TABLE \(s).geofences (
                    geofence_id bigint PRIMARY KEY,
                    owner_user_id bigint NOT NULL,
                    name text NOT NULL,
                    latitude double precision NOT NULL,
                    longitude double precision NOT NULL,
                    radius_m double precision NOT NULL,
                    device_ids bigint[] NOT NULL,
                    log_offset bigint NOT NULL
                );
                -- current: 1 inside, 2 outside, NULL before any decided fix; horizon: the
                -- recorded_at (µs) of the latest fix folded, decided or not.
                CREATE TABLE \(s).geofence_state (
                    geofence_id bigint NOT NULL,
                    device_id bigint NOT NULL,
                    current smallint,
                    horizon bigint NOT NULL,
                    PRIMARY KEY (geofence_id, device_id)
                );
                -- id increases with every row written (one projector writes): a notifier follows it.
                CREATE TABLE \(s).geofence_transitions (
                    id bigserial PRIMARY KEY,
                    geofence_id bigint NOT NULL,
                    device_id bigint NOT NULL,
                    event text NOT NULL CHECK (event IN ('enter', 'leave')),
                    recorded_at timestamptz NOT NULL,
                    received_at timestamptz NOT NULL,
                    fix_accuracy_m double precision NOT NULL,
                    log_offset bigint NOT NULL,
                    fix_index integer NOT NULL,
                    written_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE INDEX ON \(s).geofence_transitions (geofence_id, recorded_at, id);
                CREATE INDEX ON \(s).geofence_transitions (device_id, recorded_at);
                -- The device's own view (event 25): what the phone said it crossed, as it said it.
                -- geofence_id: the fence the region was handed out as (rid "findmy-<id>"), else NULL.
                CREATE TABLE \(s).device_transitions (
                    id bigserial PRIMARY KEY,
                    device_id bigint NOT NULL,
                    geofence_id bigint,
                    region_id text NOT NULL,
                    region_name text NOT NULL,
                    event text NOT NULL CHECK (event IN ('enter', 'leave')),
                    recorded_at timestamptz NOT NULL,
                    received_at timestamptz NOT NULL,
                    fix_accuracy_m double precision,
                    log_offset bigint NOT NULL
                );
                CREATE INDEX ON \(s).device_transitions (device_id, recorded_at);
                -- "Notify when found": the armed notices as the fold left them (so a transaction
                -- that starts cold decides as one that carried its cache), and every notice fired:
                -- the batch's newest fix. id increases with every row written: the notifier follows it.
                CREATE TABLE \(s).found_notice_armed (
                    device_id bigint PRIMARY KEY,
                    user_id bigint NOT NULL,
                    armed_offset bigint NOT NULL,
                    armed_at timestamptz NOT NULL
                );
                CREATE TABLE \(s).found_notices (
                    id bigserial PRIMARY KEY,
                    device_id bigint NOT NULL,
                    user_id bigint NOT NULL,
                    armed_offset bigint NOT NULL,
                    log_offset bigint NOT NULL,
                    recorded_at timestamptz NOT NULL,
                    received_at timestamptz NOT NULL,
                    -- NULL when the batch's fixes were compacted away before this fold (its envelope).
                    latitude double precision,
                    longitude double precision,
                    accuracy_m double precision,
                    written_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE INDEX ON \(s).found_notices (device_id, recorded_at);
                """)
            try Schema.createCheckpoint(
                schema, projection: projectionName, version: version, logID: logID, connection)
        }
    }
}
