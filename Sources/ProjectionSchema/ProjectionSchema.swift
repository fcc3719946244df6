/// The names of the projection, in one place: the schemas, the tables and the columns of a fix with
/// their PostgreSQL types. The projector creates and writes the tables from this; the read API, the
/// panel and the compactor query them through it, so a table or column is renamed here or nowhere.
///
/// It depends on nothing, so the read side can use it without importing the projector's fold.
public enum ProjectionSchema {
    /// The schema the read side queries: always the live generation (docs/postgres.md).
    public static let live = "findmy"
    /// Where a rebuild writes until it is swapped in.
    public static let building = "findmy_next"
    /// Where the old generation goes for the moment of the swap.
    public static let retired = "findmy_retired"
    /// Migrations and the generations table; not part of any generation.
    public static let meta = "findmy_meta"

    /// The tables of one generation.
    public enum Table: String, Sendable, CaseIterable {
        case users
        case devices
        case pushDevices = "push_devices"
        /// The history, partitioned by month of `recorded_at`.
        case deviceLocations = "device_locations"
        case deviceLatest = "device_latest"
        case deviceBatches = "device_batches"
        case projectorCheckpoints = "projector_checkpoints"

        /// `findmy.devices`: the table in the live generation, as the read side names it.
        public var live: String { ProjectionSchema.live + "." + rawValue }
        /// The table in `schema`, which must be a plain identifier (a generation's name).
        public func `in`(_ schema: String) -> String { schema + "." + rawValue }
    }

    /// A column's PostgreSQL type; its binary COPY width follows from it.
    public enum ColumnType: String, Sendable {
        case bigint
        case integer
        case smallint
        case timestamptz
        case float8 = "double precision"
        case boolean
        case text

        /// The name for a cast (`$1::float8[]`).
        public var castName: String { self == .float8 ? "float8" : rawValue }
    }

    public struct Column: Sendable, Equatable {
        public var name: String
        public var type: ColumnType
        public var nullable: Bool

        /// `latitude double precision NOT NULL`.
        public var definition: String { name + " " + type.rawValue + (nullable ? "" : " NOT NULL") }
    }

    /// The columns of one fix row, in order, shared by `device_locations` and `device_latest`: the
    /// order of the DDL, of the projector's COPY and of its upsert.
    public static let fixColumns: [Column] = [
        Column(name: "device_id", type: .bigint, nullable: false),
        Column(name: "log_offset", type: .bigint, nullable: false),
        Column(name: "fix_index", type: .integer, nullable: false),
        Column(name: "recorded_at", type: .timestamptz, nullable: false),
        Column(name: "received_at", type: .timestamptz, nullable: false),
        Column(name: "latitude", type: .float8, nullable: false),
        Column(name: "longitude", type: .float8, nullable: false),
        Column(name: "accuracy_m", type: .float8, nullable: false),
        Column(name: "altitude_m", type: .float8, nullable: true),
        Column(name: "speed_mps", type: .float8, nullable: true),
        Column(name: "heading_deg", type: .float8, nullable: true),
        Column(name: "battery_pct", type: .smallint, nullable: true),
        Column(name: "is_charging", type: .boolean, nullable: true),
        Column(name: "source", type: .text, nullable: false),
        Column(name: "clock_suspect", type: .boolean, nullable: false),
    ]

    public static var fixColumnNames: [String] { fixColumns.map(\.name) }

    /// The columns of `device_batches`, in the order of its DDL and the projector's COPY.
    public static let batchColumnNames = [
        "log_offset", "device_id", "batch_id", "received_at", "fix_count", "rejected_count", "recorded_min",
        "recorded_max",
    ]

    /// `l.latitude, l.longitude, ...`: the named fix columns, qualified by a table alias.
    public static func select(_ names: [String], from alias: String) -> String {
        names.map { alias + "." + $0 }.joined(separator: ", ")
    }
}
