import Events
import JSON
import Postgres
import ProjectionSchema

/// The PostgreSQL side of findmy: a small `findmy_meta` schema with versioned migrations, and the
/// projection tables, which live in one schema per generation.
///
/// The projection is a pure function of the log, so a new projection version is not migrated in
/// place: it is built as a new generation from offset 0 while the current one keeps serving, then
/// swapped in (`findmy replay`). `projectionVersion` says which table layout the code writes; a live
/// generation of another version is rebuilt at start.
///
/// A generation is bound to the log it is folded from: `findmy_meta.generations.log_id` holds that
/// log's id (docs/log-format.md, "Log identity"). A generation of another log, or one made before
/// generations were bound (log_id NULL), is never served: the projector drops and rebuilds it.
public enum Schema {
    /// The schema the read side queries: always the live generation.
    public static let live = ProjectionSchema.live
    /// Where a rebuild writes until it is swapped in.
    public static let building = ProjectionSchema.building
    /// Bumped whenever the projection tables change; a live generation of an older version is rebuilt.
    /// 2: the history index is `(device_id, recorded_at, log_offset, fix_index)`, the read API's order.
    /// 3: `devices.as_of_offset`, the version the read API's device cards are cached by.
    /// 4: `accuracy_m` nullable (accuracy unknown), `device_batches.protocol`, and the
    /// history unique by fix, `(device_id, recorded_at, latitude, longitude)`: the same fix arriving
    /// twice (another batch id, another path) is one row.
    /// 5: `commands` and `command_deliveries`.
    /// 6: the history has one index, its unique key `(device_id, recorded_at, latitude, longitude)`,
    /// which is also the order the history is read in. A second index in the order of arrival cost a
    /// drain a third of PostgreSQL's time (docs/benchmarks.md).
    /// 7: `device_imports` (one row per `history_imported` record) and `device_batches.import_id`,
    /// the import a batch came from.
    /// 8: `device_batches` has one index, its primary key `(device_id, received_at, log_offset)`,
    /// the arrivals' order; a primary key of `log_offset` beside `(device_id, received_at)` cost
    /// every folded report a second index entry (docs/postgres.md).
    /// 9: `device_locations.shown`, the fields a history page shows packed in one value
    /// (`ShownFix`): PostgreSQL sends one value a row instead of twelve.
    public static let projectionVersion = 9
    /// The projection's name in `projector_checkpoints`.
    public static let projectionName = "main"

    /// Migrations of `findmy_meta`, applied in order, each exactly once.
    static let metaMigrations: [String] = [
        """
        CREATE TABLE findmy_meta.generations (
            schema_name text PRIMARY KEY,
            projection_version integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        """,
        // The log each generation was folded from; NULL in generations made before, rebuilt once.
        """
        ALTER TABLE findmy_meta.generations ADD COLUMN log_id uuid;
        """,
    ]

    /// Applies the meta migrations that have not run yet. Safe to call from several processes: each
    /// migration runs in a transaction holding an advisory lock.
    public static func migrate(_ connection: PostgresConnection) throws {
        try connection.executeScript(
            """
            CREATE SCHEMA IF NOT EXISTS findmy_meta;
            CREATE TABLE IF NOT EXISTS findmy_meta.schema_migrations (
                version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
            """)
        try connection.transaction { connection in
            _ = try connection.execute("SELECT pg_advisory_xact_lock(7401)")
            let applied = try connection.execute(
                "SELECT coalesce(max(version), 0) FROM findmy_meta.schema_migrations")
            let current = Int(try applied.int64(0, 0) ?? 0)
            for (index, sql) in metaMigrations.enumerated() where index + 1 > current {
                try connection.executeScript(sql)
                _ = try connection.execute(
                    "INSERT INTO findmy_meta.schema_migrations (version) VALUES ($1)",
                    [.int64(Int64(index + 1))])
            }
        }
    }

    /// The projection version of the generation in `schema`, or nil when there is none.
    public static func version(of schema: String, _ connection: PostgresConnection) throws -> Int? {
        try generation(of: schema, connection)?.version
    }

    /// What `findmy_meta.generations` says about one generation.
    public struct Generation: Sendable, Equatable {
        public var version: Int
        /// The log it was folded from; nil for a generation made before generations were bound.
        public var logID: UUID128?
    }

    /// The generation in `schema`, or nil when there is none.
    public static func generation(of schema: String, _ connection: PostgresConnection) throws -> Generation? {
        // A database no projector has run on yet has no findmy_meta either: no generation.
        let meta = try connection.execute("SELECT to_regclass('findmy_meta.generations') IS NOT NULL")
        guard meta.string(0, 0) == "t" else { return nil }
        let result = try connection.execute(
            "SELECT projection_version, log_id FROM findmy_meta.generations WHERE schema_name = $1",
            [.text(schema)])
        guard result.rowCount > 0 else { return nil }
        return Generation(
            version: Int(try result.int64(0, 0) ?? 0), logID: result.string(0, 1).flatMap { UUID128($0) })
    }

    /// The columns of one fix, shared by `device_locations` (history) and `device_latest`.
    static let fixColumns = ProjectionSchema.fixColumns.dropFirst().map(\.definition).joined(
        separator: ",\n        ")

    /// Creates an empty generation in `schema` (dropping anything there), checkpoint at offset 0,
    /// bound to the log `logID`, in one transaction: a reader sees the old tables or the new empty
    /// ones. `logID` nil only for scratch schemas that nothing serves (benchmarks).
    public static func createGeneration(
        _ schema: String, logID: UUID128? = nil, _ connection: PostgresConnection
    )
        throws
    {
        try connection.transaction { try createGenerationTables(schema, logID: logID, $0) }
    }

    private static func createGenerationTables(
        _ schema: String, logID: UUID128?, _ connection: PostgresConnection
    ) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        try connection.executeScript(
            [
                """
                DROP SCHEMA IF EXISTS \(s) CASCADE;
                CREATE SCHEMA \(s);
                """,
                identityTables(s), locationTables(s), commandTables(s),
            ].joined(separator: "\n"))
        try createCheckpoint(
            schema, projection: projectionName, version: projectionVersion, logID: logID, connection)
    }

    /// Users, their devices, and the devices' push addresses.
    private static func identityTables(_ s: String) -> String {
        """
        CREATE TABLE \(s).users (
            id bigint PRIMARY KEY,
            name text NOT NULL,
            role text NOT NULL,
            created_at timestamptz NOT NULL
        );
        CREATE TABLE \(s).devices (
            id bigint PRIMARY KEY,
            user_id bigint NOT NULL REFERENCES \(s).users (id),
            device_uuid uuid NOT NULL,
            name text NOT NULL,
            platform text NOT NULL,
            model text NOT NULL,
            created_at timestamptz NOT NULL,
            last_seen_at timestamptz,
            paused boolean NOT NULL DEFAULT false,
            -- The checkpoint of the transaction that last wrote this row: it holds every event
            -- of the device before this offset and none after. Equal stamps of one device id,
            -- in this generation or another, mean equal rows (the read API caches by it).
            as_of_offset bigint NOT NULL,
            UNIQUE (user_id, device_uuid)
        );
        CREATE TABLE \(s).push_devices (
            token text PRIMARY KEY,
            provider text NOT NULL,
            device_id bigint NOT NULL REFERENCES \(s).devices (id),
            topic text NOT NULL,
            environment text NOT NULL,
            registered_at timestamptz NOT NULL,
            invalidated_at timestamptz,
            invalidated_reason text
        );
        CREATE INDEX ON \(s).push_devices (device_id);
        """
    }

    /// Fixes (the history, partitioned by recorded time, and each device's latest) and the batches that brought them.
    private static func locationTables(_ s: String) -> String {
        """
        CREATE TABLE \(s).device_locations (
            device_id bigint NOT NULL,
            \(fixColumns),
            -- The fields a history page shows, packed (ShownFix, docs/postgres.md): the page
            -- reads this one value a row.
            \(ProjectionSchema.shownColumn) bytea NOT NULL,
            -- One row per fix, whatever batch or path brought it (the partition key is part of it).
            -- Its index is the history's only one, and a page of a device's history is read in
            -- its order, with no sort; a second index cost a drain a third of its time.
            UNIQUE (device_id, recorded_at, latitude, longitude)
        ) PARTITION BY RANGE (recorded_at);
        CREATE TABLE \(s).device_locations_default PARTITION OF \(s).device_locations DEFAULT;
        CREATE TABLE \(s).device_latest (
            device_id bigint PRIMARY KEY,
            \(fixColumns)
        );
        CREATE TABLE \(s).device_batches (
            log_offset bigint NOT NULL,
            device_id bigint NOT NULL,
            batch_id uuid NOT NULL,
            received_at timestamptz NOT NULL,
            fix_count integer NOT NULL,
            rejected_count integer NOT NULL,
            recorded_min timestamptz,
            recorded_max timestamptz,
            protocol text NOT NULL DEFAULT 'native',
            -- The import it came from, set when the import's record (after its last batch) is folded.
            import_id uuid,
            -- The table's only index: the arrivals are read in its order (device, then time, then
            -- offset), the panel reads a device's latest arrivals backwards on it, and a record
            -- folded twice (same device, time and offset) is refused by it.
            PRIMARY KEY (device_id, received_at, log_offset)
        );
        -- Completed imports of files ("what arrived when" for a history brought in): no coordinate.
        CREATE TABLE \(s).device_imports (
            import_id uuid PRIMARY KEY,
            device_id bigint NOT NULL,
            log_offset bigint NOT NULL,
            received_at timestamptz NOT NULL,
            format text NOT NULL,
            file_name text NOT NULL,
            sha256 text NOT NULL,
            file_bytes bigint NOT NULL,
            user_id bigint NOT NULL,
            fixes_read bigint NOT NULL,
            fixes_accepted bigint NOT NULL,
            fixes_rejected bigint NOT NULL,
            fixes_duplicate bigint NOT NULL,
            not_a_fix bigint NOT NULL,
            recorded_min timestamptz,
            recorded_max timestamptz
        );
        CREATE INDEX ON \(s).device_imports (device_id, received_at);
        """
    }

    /// Commands to devices and their deliveries.
    private static func commandTables(_ s: String) -> String {
        """
        -- Commands: state is pending, sent, answered, failed or expired; the answer
        -- points at its fix (log offset and index), which retention may have removed since.
        CREATE TABLE \(s).commands (
            command_id uuid PRIMARY KEY,
            device_id bigint NOT NULL,
            kind text NOT NULL,
            message text NOT NULL,
            phone text NOT NULL,
            requested_by bigint NOT NULL,
            requested_at timestamptz NOT NULL,
            log_offset bigint NOT NULL,
            state text NOT NULL,
            answered_at timestamptz,
            answer_log_offset bigint,
            answer_fix_index integer,
            answer_protocol text,
            ended_at timestamptz,
            end_reason text
        );
        CREATE INDEX ON \(s).commands (device_id, requested_at DESC, log_offset DESC);
        CREATE TABLE \(s).command_deliveries (
            log_offset bigint PRIMARY KEY,
            command_id uuid NOT NULL,
            device_id bigint NOT NULL,
            channel text NOT NULL,
            state text NOT NULL,
            at timestamptz NOT NULL,
            detail text NOT NULL,
            retry_at timestamptz,
            address_dead boolean NOT NULL DEFAULT false
        );
        CREATE INDEX ON \(s).command_deliveries (command_id, log_offset);
        """
    }

    /// The last step of creating a projection's tables, the same for every projection: its
    /// `projector_checkpoints` at offset 0, and the schema's row in `findmy_meta.generations` (the
    /// version and the log it is folded from, which decide at start whether it is folded again).
    /// Runs inside the caller's transaction.
    public static func createCheckpoint(
        _ schema: String, projection: String, version: Int, logID: UUID128?, _ connection: PostgresConnection
    ) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        try connection.executeScript(
            """
            CREATE TABLE \(s).projector_checkpoints (
                projection text PRIMARY KEY,
                next_offset bigint NOT NULL,
                last_received_at timestamptz,
                updated_at timestamptz NOT NULL DEFAULT now()
            );
            """)
        _ = try connection.execute(
            "INSERT INTO \(s).projector_checkpoints (projection, next_offset) VALUES ($1, 0)",
            [.text(projection)])
        _ = try connection.execute(
            """
            INSERT INTO findmy_meta.generations (schema_name, projection_version, log_id) VALUES ($1, $2, $3::uuid)
            ON CONFLICT (schema_name) DO UPDATE SET projection_version = excluded.projection_version,
                log_id = excluded.log_id, created_at = now()
            """, [.text(schema), .int64(Int64(version)), logID.map { .text($0.description) }])
    }

    /// Makes the generation in `building` the live one, in one transaction: readers see either the
    /// old tables or the new ones, never a mix.
    public static func swapIn(_ connection: PostgresConnection) throws {
        try connection.transaction { connection in
            _ = try connection.execute("SELECT pg_advisory_xact_lock(7402)")
            let retired = ProjectionSchema.retired
            try connection.executeScript(
                """
                DROP SCHEMA IF EXISTS \(retired) CASCADE;
                ALTER SCHEMA \(live) RENAME TO \(retired);
                ALTER SCHEMA \(building) RENAME TO \(live);
                DROP SCHEMA \(retired) CASCADE;
                """)
            _ = try connection.execute(
                "DELETE FROM findmy_meta.generations WHERE schema_name = $1", [.text(live)])
            _ = try connection.execute(
                "UPDATE findmy_meta.generations SET schema_name = $1 WHERE schema_name = $2",
                [.text(live), .text(building)])
        }
    }

    /// The monthly partition of `device_locations` that holds `micros`, created if missing.
    ///
    /// Partitions are made for months near the present (`partitionMonthsBack` to
    /// `partitionMonthsAhead`); a fix whose device clock is further off lands in the default
    /// partition, which is never split, so a wrong clock cannot make partition creation fail.
    static let partitionMonthsBack = 24
    static let partitionMonthsAhead = 3

    static func ensurePartition(
        _ schema: String, monthOf micros: Int64, nowMicros: Int64, _ connection: PostgresConnection
    ) throws {
        let month = Month(micros: micros)
        let now = Month(micros: nowMicros)
        guard month.index >= now.index - partitionMonthsBack, month.index <= now.index + partitionMonthsAhead
        else {
            return
        }
        let next = Month(index: month.index + 1)
        let s = PostgresConnection.quoteIdentifier(schema)
        // Identifiers and bounds come from integers computed here, never from input.
        try connection.executeScript(
            """
            CREATE TABLE IF NOT EXISTS \(s).\(month.partitionName) PARTITION OF \(s).device_locations
            FOR VALUES FROM ('\(month.firstDay)') TO ('\(next.firstDay)')
            """)
    }
}

/// A calendar month (UTC), for naming and bounding partitions: the projector names them, the
/// compactor reads the names back to drop whole months.
public struct Month: Sendable, Equatable {
    /// Months since January of year 0.
    public var index: Int

    public init(index: Int) { self.index = index }

    /// The month holding `micros`, by arithmetic on the one calendar (no text round trip per row).
    public init(micros: Int64) {
        let day = CivilCalendar.floorDivide(micros, RetentionPolicy.microsPerDay).quotient
        let date = CivilCalendar.date(days: day)
        index = date.year * 12 + (date.month - 1)
    }

    static let partitionPrefix = ProjectionSchema.Table.deviceLocations.rawValue + "_"

    /// The month of a partition named `device_locations_yYYYYmMM`; nil for another name (the
    /// default partition).
    public init?(partitionName: String) {
        let prefix = Self.partitionPrefix + "y"
        guard partitionName.hasPrefix(prefix) else { return nil }
        let rest = partitionName.dropFirst(prefix.count).split(separator: "m")
        guard rest.count == 2, let year = Int(rest[0]), let month = Int(rest[1]), (1...12).contains(month)
        else {
            return nil
        }
        index = year * 12 + (month - 1)
    }

    public var year: Int { index >= 0 ? index / 12 : (index - 11) / 12 }
    public var month: Int { index - year * 12 + 1 }
    var name: String { "y\(year)m" + (month < 10 ? "0" : "") + "\(month)" }
    /// The partition of `device_locations` that holds this month's fixes.
    public var partitionName: String { Self.partitionPrefix + name }
    /// Midnight UTC on the first day of the month, in microseconds since the epoch.
    public var startMicros: Int64 {
        CivilCalendar.days(year: year, month: month, day: 1) * RetentionPolicy.microsPerDay
    }
    var firstDay: String {
        let yearText = String(year)
        return String(repeating: "0", count: max(0, 4 - yearText.count)) + yearText + "-"
            + (month < 10 ? "0" : "")
            + "\(month)-01 00:00:00+00"
    }
}
