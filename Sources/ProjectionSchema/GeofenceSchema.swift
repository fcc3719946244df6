/// The names of the geofence projection (docs/geofences.md), in one place: its schema
/// and tables. It has a schema of its own, beside the main generation's: it is a second projection
/// with its own checkpoint and version, rebuilt from the log on its own, and the main projection's
/// rebuilds and swaps never touch it.
public enum GeofenceSchema {
    public static let schema = "findmy_geofences"
    /// The notifier's schema (Geofences' `AlertTables`): outside the projection's, so that a
    /// rebuild keeps what was announced. Named here for the compactor, which deletes from it.
    public static let alertsSchema = "findmy_geofence_alerts"
    /// Its table of deliveries, one row per (transition or found notice, channel), with the body
    /// sent (the fix's position): `device_id`, `recorded_at_micros`, `created_micros`.
    public static let alertDeliveries = "deliveries"

    public enum Table: String, Sendable, CaseIterable {
        /// The fences as the projection last folded them.
        case geofences
        /// Each (fence, device)'s state after its latest fix.
        case state = "geofence_state"
        /// Enter and leave, at the fix's `recorded_at`; `id` increases with every row written.
        case transitions = "geofence_transitions"
        /// The device's own view: the enter and leave it reported itself (OwnTracks `transition`,
        /// event 25). Shown beside the server's decisions; never notifies.
        case deviceTransitions = "device_transitions"
        /// "Notify when found": the notices armed now, by device.
        case foundNoticeArmed = "found_notice_armed"
        /// Every notice fired, with the batch's newest fix; `id` increases with every row written.
        case foundNotices = "found_notices"
        case projectorCheckpoints = "projector_checkpoints"

        /// `findmy_geofences.geofence_transitions`.
        public var qualified: String { GeofenceSchema.schema + "." + rawValue }
    }
}
