import Postgres
import ProjectionSchema

/// The SQL of the read API, built from `ProjectionSchema`'s names, and where each value sits in the
/// rows it returns. A row is read by position: each position is a value's index in the lists below,
/// from which the SELECT list is built too, so a column moved in a list moves in the SQL and in the
/// reading together, and no row is searched by column name.
extension ReadService {
    /// One statement, its parameters and the format of its result. Public so that `findmy-bench
    /// read` can time the very statements of the read API over a bare connection, as the baseline of
    /// its ratios.
    public struct Statement: Sendable {
        public var sql: String
        public var parameters: [PostgresValue?]
        /// Binary for the large reads: nothing is formatted as text on either side.
        public var format: PostgresResultFormat
    }

    /// The devices of `ownerID` and the devices `sharedIDs`, each with its latest fix, in no
    /// particular order. The caller keeps the rows in the reader's scope (`ReadAccess.scope`).
    ///
    /// By owner rather than by the scope's list of ids, and unsorted: with 1,000 devices that was
    /// 30% less time in PostgreSQL than `d.id = ANY(<1,000 ids>) ORDER BY d.id` (docs/benchmarks.md).
    public static func devicesStatement(ownerID: UInt64, sharedIDs: [UInt64]) -> Statement {
        Statement(
            sql: deviceSelect + ownedOrShared,
            parameters: [.int64(Int64(ownerID)), .int64Array(sharedIDs.map { Int64($0) })], format: .binary)
    }

    /// The same devices' ids and versions only (`DeviceVersion`): 4 values a device instead of 22,
    /// which is most of what PostgreSQL and libpq spend on a list.
    public static func deviceVersionsStatement(ownerID: UInt64, sharedIDs: [UInt64]) -> Statement {
        Statement(
            sql: "SELECT d.id, \(versionColumns) FROM \(ProjectionSchema.Table.devices.live) d "
                + "LEFT JOIN \(ProjectionSchema.Table.deviceLatest.live) l ON l.device_id = d.id"
                + ownedOrShared,
            parameters: [.int64(Int64(ownerID)), .int64Array(sharedIDs.map { Int64($0) })], format: .binary)
    }

    /// The devices `ids` (any owner: the caller has checked the scope) as `devicesStatement` reads them.
    static func devicesStatement(ids: [UInt64]) -> Statement {
        Statement(
            sql: deviceSelect + " WHERE d.id = ANY($1::bigint[])",
            parameters: [.int64Array(ids.map { Int64($0) })], format: .binary)
    }

    static let ownedOrShared = " WHERE d.user_id = $1 OR d.id = ANY($2::bigint[])"

    /// A page of a device's history and one row more, which tells whether another page follows:
    /// the fixes as the API shows them (`FixColumns.shown`), in the order of the history's index.
    public static func locationsStatement(deviceID: UInt64, _ query: HistoryQuery) -> Statement {
        historyStatement(
            FixColumns.select(FixColumns.shown), deviceID: deviceID, query,
            after: query.locationsCursor?.keyset, limit: query.limit + 1)
    }

    /// `locationsStatement` with its values written into the SQL, as the query of the binary COPY
    /// that the history route reads (`PostgresConnection.copyOutBinary`): the same rows in the
    /// same order, without libpq's parse of each value into a result (docs/benchmarks.md).
    /// It selects the history's packed `shown` alone (`ShownFix`): one value a row for PostgreSQL
    /// to send instead of twelve.
    public static func locationsCopyQuery(deviceID: UInt64, _ query: HistoryQuery) -> String {
        historyStatement(
            "l." + ProjectionSchema.shownColumn, deviceID: deviceID, query,
            after: query.locationsCursor?.keyset, limit: query.limit + 1, literals: true
        ).sql
    }

    /// The settings `locationsCopyQuery` runs with (`copyOutBinary`'s `settings`): the history in
    /// its index's order, not sorted (`ProjectionSchema.historyInIndexOrder`). For the 30-day page a
    /// third less of PostgreSQL's CPU, and its rows overlap findmy's writing of the answer.
    public static let locationsCopySettings = [
        PostgresSetting(ProjectionSchema.historyInIndexOrder.name, ProjectionSchema.historyInIndexOrder.value)
    ]

    /// The fields of a row of `locationsCopyQuery`.
    public static var locationsCopyFieldCount: Int { 1 }

    /// Reads a row of `locationsCopyQuery` as the history route does, without writing it: the
    /// keyset of its fix (nil for an infinite recorded_at). For a client measuring the
    /// database's floor for the same rows (`findmy-bench read`).
    public static func locationsCopyKeyset(_ row: inout PostgresCopyRow) throws(PostgresError) -> FixKeyset? {
        let fix = try FixRow(&row)
        return fix.recordedAt.map {
            FixKeyset(recordedAtMicros: $0, latitude: fix.latitude, longitude: fix.longitude)
        }
    }

    /// `selectList` (of the history as `l`) for a device's fixes in `range` (on recorded_at, `from` inclusive, `to` exclusive)
    /// after `keyset`, at most `limit` of them, in the order of the history's unique index:
    /// (recorded_at, latitude, longitude), a keyset, so pages neither repeat nor skip a fix, even
    /// among fixes of the same instant. PostgreSQL walks the index of each month's partition and
    /// merges them as it finds the rows: no sort. Ordering ties in recorded_at by arrival instead
    /// (log offset, fix index) made it sort every page, most of its time for a history page
    /// (docs/benchmarks.md).
    ///
    /// `recorded_at >= keyset` repeats the row comparison's first column so that the planner
    /// leaves out the months before the keyset's.
    static func historyStatement(
        _ selectList: String, deviceID: UInt64, _ range: HistoryQuery, after keyset: FixKeyset?,
        limit: Int, literals: Bool = false
    ) -> Statement {
        // `literals`: the values written into the SQL (`PostgresValue.sqlLiteral`), for the query of
        // a COPY, which takes no parameters; else `$1, $2, ...`.
        var parameters: [PostgresValue?] = []
        func bind(_ value: PostgresValue?) -> String {
            if literals { return PostgresValue.sqlLiteral(value) }
            parameters.append(value)
            return "$\(parameters.count)"
        }
        let device = bind(.int64(Int64(deviceID)))
        let from = bind(range.fromMicros.map { .timestamp(micros: $0) })
        let to = bind(range.toMicros.map { .timestamp(micros: $0) })
        let rows = bind(.int64(Int64(limit)))
        var sql = """
            SELECT \(selectList)
            FROM \(ProjectionSchema.Table.deviceLocations.live) l
            WHERE l.device_id = \(device)
              AND l.recorded_at >= coalesce(\(from)::timestamptz, '-infinity')
              AND l.recorded_at < coalesce(\(to)::timestamptz, 'infinity')
            """
        if let keyset {
            let recordedAt = bind(.timestamp(micros: keyset.recordedAtMicros))
            let latitude = bind(.double(keyset.latitude))
            let longitude = bind(.double(keyset.longitude))
            sql += """

                  AND l.recorded_at >= \(recordedAt)
                  AND (l.recorded_at, l.latitude, l.longitude) > (\(recordedAt), \(latitude), \(longitude))
                """
        }
        sql += "\nORDER BY l.recorded_at, l.latitude, l.longitude\nLIMIT \(rows)"
        return Statement(sql: sql, parameters: parameters, format: .binary)
    }

    /// A page of a device's arrivals and one row more, by the keyset (received_at, log_offset).
    static func arrivalsStatement(deviceID: UInt64, _ query: HistoryQuery) -> Statement {
        Statement(
            sql: """
                SELECT \(ArrivalColumn.allCases.map(\.expression).joined(separator: ", "))
                FROM \(ProjectionSchema.Table.deviceBatches.live) b
                LEFT JOIN \(ProjectionSchema.Table.deviceImports.live) i ON i.import_id = b.import_id
                WHERE b.device_id = $1
                  AND b.received_at >= coalesce($2::timestamptz, '-infinity')
                  AND b.received_at < coalesce($3::timestamptz, 'infinity')
                  AND ($4::timestamptz IS NULL OR (b.received_at, b.log_offset) > ($4, $5))
                ORDER BY b.received_at, b.log_offset
                LIMIT $6
                """,
            parameters: [
                .int64(Int64(deviceID)), query.fromMicros.map { .timestamp(micros: $0) },
                query.toMicros.map { .timestamp(micros: $0) },
                query.cursor.map { .timestamp(micros: $0.micros) },
                .int64(Int64(query.cursor?.logOffset ?? 0)), .int64(Int64(query.limit + 1)),
            ], format: .text)
    }

    /// When a report last arrived from each device, for the admin listing (no position, no fix time).
    static let lastSeenStatement = Statement(
        sql: "SELECT d.id, d.last_seen_at FROM \(ProjectionSchema.Table.devices.live) d", parameters: [],
        format: .text)

    // MARK: where each value sits in a row

    /// A device and its latest fix: the `DeviceColumn`s, then `FixColumns.shown`, then `versionColumns`.
    static let deviceSelect = """
        SELECT \(DeviceColumn.allCases.map(\.expression).joined(separator: ", ")), \(FixColumns.select(FixColumns.shown)),
            \(versionColumns)
        FROM \(ProjectionSchema.Table.devices.live) d LEFT JOIN \(ProjectionSchema.Table.deviceLatest.live) l ON l.device_id = d.id
        """
    /// What `DeviceVersion` reads, after the device and its fix.
    static let versionColumns = "d.as_of_offset, l.log_offset, l.fix_index"

    /// The device's own columns at the head of a `deviceSelect` row; the raw value is the position.
    enum DeviceColumn: Int, CaseIterable {
        case id, name, platform, model, paused, createdAt, lastSeenAt

        var expression: String {
            switch self {
            case .id: "d.id"
            case .name: "d.name"
            case .platform: "d.platform"
            case .model: "d.model"
            case .paused: "d.paused"
            case .createdAt: "d.created_at"
            case .lastSeenAt: "d.last_seen_at"
            }
        }
    }

    /// The columns of an arrivals row (text format); the raw value is the position. The import's
    /// columns are null for a batch of no import, or of one whose record is not folded yet.
    enum ArrivalColumn: Int, CaseIterable {
        case receivedAt, batchID, fixCount, rejectedCount, recordedMin, recordedMax, logOffset, clientProtocol
        case importID, importFileName, importSHA256, importFormat

        var expression: String {
            switch self {
            case .receivedAt: "b.received_at"
            case .batchID: "b.batch_id::text"
            case .fixCount: "b.fix_count"
            case .rejectedCount: "b.rejected_count"
            case .recordedMin: "b.recorded_min"
            case .recordedMax: "b.recorded_max"
            case .logOffset: "b.log_offset"
            case .clientProtocol: "b.protocol"
            case .importID: "i.import_id::text"
            case .importFileName: "i.file_name"
            case .importSHA256: "i.sha256"
            case .importFormat: "i.format"
            }
        }
    }

    /// The fix columns the read API selects, by `ProjectionSchema.FixColumn`, and their positions.
    enum FixColumns {
        /// A fix as the API shows it (`FixRow`), in the order of docs/api.md.
        static let shown: [ProjectionSchema.FixColumn] = [
            .latitude, .longitude, .accuracy, .altitude, .speed, .heading, .battery, .isCharging, .source,
            .recordedAt, .receivedAt, .clockSuspect,
        ]
        /// Where `recorded_at` is in `shown`: null there means a device without a latest fix.
        static let recordedAt = position(.recordedAt, in: shown)

        static func position(_ column: ProjectionSchema.FixColumn, in list: [ProjectionSchema.FixColumn])
            -> Int
        {
            ProjectionSchema.position(column, in: list)
        }

        /// `l.latitude, l.longitude, ...` for a SELECT list.
        static func select(_ list: [ProjectionSchema.FixColumn]) -> String {
            ProjectionSchema.select(list, from: "l")
        }
    }
}
