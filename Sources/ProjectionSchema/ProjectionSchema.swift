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

    /// The run-time parameter a read of the history in its unique index's order (recorded_at,
    /// latitude, longitude) runs with, for that statement alone: no sort. With the index giving the
    /// order, PostgreSQL walks each month's index and merges them, sending rows as it finds them;
    /// left to itself, for a range that holds most of a device's month, it chose bitmap heap scans
    /// and a sort of every row before sending the first (docs/benchmarks.md, "The page in the
    /// index's order").
    public static let historyInIndexOrder = (name: "enable_sort", value: "off")

    /// The tables of one generation.
    public enum Table: String, Sendable, CaseIterable {
        case users
        case devices
        case pushDevices = "push_devices"
        /// The history, partitioned by month of `recorded_at`.
        case deviceLocations = "device_locations"
        case deviceLatest = "device_latest"
        case deviceBatches = "device_batches"
        /// One row per completed import of a file into a device (its `history_imported` record);
        /// `device_batches.import_id` points at it from the import's batches.
        case deviceImports = "device_imports"
        case projectorCheckpoints = "projector_checkpoints"
        /// One row per command to a device, with its state (docs/commands.md).
        case commands
        /// One row per delivery attempt of a command: sent or failed, through which channel.
        case commandDeliveries = "command_deliveries"

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

    /// The history's packed copy of the fields a page shows (`ShownFix`), in `device_locations`
    /// only, after the fix columns.
    public static let shownColumn = "shown"

    /// The columns of one fix row, in order, shared by `device_locations` and `device_latest`: the
    /// order of the DDL, of the projector's COPY and of its upsert. The read side names the ones it
    /// selects by case, so a column renamed here fails to compile there.
    public enum FixColumn: String, Sendable, CaseIterable {
        case deviceID = "device_id"
        case logOffset = "log_offset"
        case fixIndex = "fix_index"
        case recordedAt = "recorded_at"
        case receivedAt = "received_at"
        case latitude
        case longitude
        case accuracy = "accuracy_m"
        case altitude = "altitude_m"
        case speed = "speed_mps"
        case heading = "heading_deg"
        case battery = "battery_pct"
        case isCharging = "is_charging"
        case source
        case clockSuspect = "clock_suspect"

        public var type: ColumnType {
            switch self {
            case .deviceID, .logOffset: .bigint
            case .fixIndex: .integer
            case .recordedAt, .receivedAt: .timestamptz
            case .latitude, .longitude, .accuracy, .altitude, .speed, .heading: .float8
            case .battery: .smallint
            case .isCharging, .clockSuspect: .boolean
            case .source: .text
            }
        }

        public var nullable: Bool {
            switch self {
            // accuracy: NULL when unknown (an app that sends none; docs/api.md).
            case .accuracy, .altitude, .speed, .heading, .battery, .isCharging: true
            default: false
            }
        }
    }

    public static let fixColumns: [Column] = FixColumn.allCases.map {
        Column(name: $0.rawValue, type: $0.type, nullable: $0.nullable)
    }

    public static var fixColumnNames: [String] { fixColumns.map(\.name) }

    /// The columns of `device_batches`, in the order of its DDL and the projector's COPY.
    public static let batchColumnNames = [
        "log_offset", "device_id", "batch_id", "received_at", "fix_count", "rejected_count", "recorded_min",
        "recorded_max", "protocol",
    ]

    /// `l.latitude, l.longitude, ...`: fix columns qualified by a table alias, for a SELECT list.
    public static func select(_ columns: [FixColumn], from alias: String) -> String {
        columns.map { alias + "." + $0.rawValue }.joined(separator: ", ")
    }

    /// Where `column` is in a SELECT list made by `select(list, ...)`: readers find a fix's fields by
    /// the column they selected, not by a number kept beside the list.
    public static func position(_ column: FixColumn, in list: [FixColumn]) -> Int {
        guard let index = list.firstIndex(of: column) else {
            preconditionFailure("\(column) is not among the selected fix columns")
        }
        return index
    }
}
