import Core
import Identity
import Postgres
import ProjectionSchema

/// A device as the panel shows it: what the registry knows plus its latest fix from PostgreSQL.
struct PanelDevice: Sendable {
    var id: UInt64
    var name: String
    var platform: String
    var model: String
    var paused: Bool
    var sharedBy: String?
    var lastSeenAtMicros: Int64?
    var latest: PanelFix?
}

struct PanelFix: Sendable {
    var latitude: Double
    var longitude: Double
    var accuracyMeters: Double
    var batteryPercent: Int64?
    var isCharging: Bool?
    var source: String
    var recordedAtMicros: Int64
    var receivedAtMicros: Int64
    var clockSuspect: Bool
}

/// The panel's reads: single statements against the live projection schema (`ProjectionSchema.live`) through the read API's pool (each one
/// sees a whole projection generation, like the read API's). Who may see which device is decided
/// before any of these run, by `IdentityService.visibleDevices` / `visibility`.
struct PanelData: Sendable {
    let pool: PostgresPool

    /// Most fixes one history range loads before simplifying; a 30-day range at a 5-minute cadence
    /// (8,640) fits, a range beyond this shows its first `historyFixesMax` and says so.
    static let historyFixesMax = 50_000
    /// Recent fixes that estimate a device's usual reporting cadence.
    static let cadenceFixesCount = 21

    /// The fix columns the panel reads (`PanelFix`), found in a result by `ProjectionSchema.position`
    /// as the read API finds its own.
    static let fixColumnList: [ProjectionSchema.FixColumn] = [
        .latitude, .longitude, .accuracy, .battery, .isCharging, .source, .recordedAt, .receivedAt,
        .clockSuspect,
    ]
    static let fixColumns = ProjectionSchema.select(fixColumnList, from: "l")

    func devices(_ visible: [Registry.VisibleDevice], userName: (UInt64) -> String?) throws -> [PanelDevice] {
        guard !visible.isEmpty else { return [] }
        let result = try pool.execute(
            """
            SELECT d.id, d.name, d.platform, d.model, d.paused, d.last_seen_at, \(Self.fixColumns)
            FROM \(ProjectionSchema.Table.devices.live) d LEFT JOIN \(ProjectionSchema.Table.deviceLatest.live) l ON l.device_id = d.id
            WHERE d.id = ANY($1::bigint[]) ORDER BY d.name, d.id
            """, [.int64Array(visible.map { Int64($0.deviceID) })], format: .binary)
        var sharedBy: [UInt64: UInt64] = [:]
        for device in visible { sharedBy[device.deviceID] = device.sharedByUserID }
        var devices: [PanelDevice] = []
        for row in 0..<result.rowCount {
            let id = UInt64(bitPattern: try result.binaryInt64(row, 0) ?? 0)
            devices.append(
                PanelDevice(
                    id: id, name: NameRules.displayable(try Self.text(result, row, 1)),
                    platform: try Self.text(result, row, 2),
                    model: NameRules.displayable(try Self.text(result, row, 3)),
                    paused: try result.binaryBool(row, 4) ?? false,
                    sharedBy: sharedBy[id].flatMap { userName($0) }.map(NameRules.displayable),
                    lastSeenAtMicros: try result.binaryTimestampMicros(row, 5),
                    latest: try fix(result, row, first: 6)))
        }
        return devices
    }

    /// A `text` column of a binary result as a `String`, "" for NULL.
    private static func text(_ result: PostgresResult, _ row: Int, _ column: Int) throws -> String {
        try result.withBinaryText(row, column) { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// The fix whose `fixColumnList` start at column `first` of a binary result (`format: .binary`:
    /// PostgreSQL's send form costs it half its text output for a 30-day track), nil when the
    /// device has none (a LEFT JOIN's NULLs).
    func fix(_ result: PostgresResult, _ row: Int, first: Int) throws -> PanelFix? {
        func at(_ column: ProjectionSchema.FixColumn) -> Int {
            first + ProjectionSchema.position(column, in: Self.fixColumnList)
        }
        guard let recorded = try result.binaryTimestampMicros(row, at(.recordedAt)) else { return nil }
        return PanelFix(
            latitude: try result.binaryDouble(row, at(.latitude)) ?? 0,
            longitude: try result.binaryDouble(row, at(.longitude)) ?? 0,
            accuracyMeters: try result.binaryDouble(row, at(.accuracy)) ?? 0,
            batteryPercent: try result.binaryInt64(row, at(.battery)),
            isCharging: try result.binaryBool(row, at(.isCharging)),
            source: try Self.text(result, row, at(.source)), recordedAtMicros: recorded,
            receivedAtMicros: try result.binaryTimestampMicros(row, at(.receivedAt)) ?? recorded,
            clockSuspect: try result.binaryBool(row, at(.clockSuspect)) ?? false)
    }

    /// The median gap between the device's recent reports (by `received_at`), or nil with fewer
    /// than two: how often it usually reports, against which "not heard from" is judged.
    func usualCadenceMicros(deviceID: UInt64) throws -> Int64? {
        let result = try pool.execute(
            """
            SELECT received_at FROM \(ProjectionSchema.Table.deviceBatches.live) WHERE device_id = $1 AND fix_count > 0
            ORDER BY received_at DESC LIMIT \(Self.cadenceFixesCount)
            """, [.int64(Int64(deviceID))])
        var times: [Int64] = []
        for row in 0..<result.rowCount {
            if let micros = try result.timestampMicros(row, 0) { times.append(micros) }
        }
        guard times.count >= 2 else { return nil }
        let gaps = zip(times, times.dropFirst()).map { $0 - $1 }.sorted()
        return gaps[gaps.count / 2]
    }

    /// The device's fixes with `recorded_at` in [from, to), in order; at most `historyFixesMax`.
    /// In the order of the history's unique index, (recorded_at, latitude, longitude), as the read
    /// API's: PostgreSQL walks each month's index and merges them, where ties in recorded_at by
    /// arrival (log offset, fix index) made it sort the whole range first (docs/benchmarks.md).
    /// It runs with `historySetting` (a `SET LOCAL` in its own transaction).
    func history(deviceID: UInt64, fromMicros: Int64, toMicros: Int64) throws -> [PanelFix] {
        let (sql, parameters) = Self.historyStatement(
            deviceID: deviceID, fromMicros: fromMicros, toMicros: toMicros)
        let result = try pool.withConnection { connection in
            try connection.transaction { connection in
                try connection.executeScript(Self.historySetting.setLocal)
                return try connection.execute(sql, parameters, format: .binary)
            }
        }
        var fixes: [PanelFix] = []
        fixes.reserveCapacity(result.rowCount)
        for row in 0..<result.rowCount {
            if let fix = try fix(result, row, first: 0) { fixes.append(fix) }
        }
        return fixes
    }

    /// `history`'s statement and its parameters.
    static func historyStatement(deviceID: UInt64, fromMicros: Int64, toMicros: Int64)
        -> (sql: String, parameters: [PostgresValue?])
    {
        (
            """
            SELECT \(fixColumns) FROM \(ProjectionSchema.Table.deviceLocations.live) l
            WHERE l.device_id = $1 AND l.recorded_at >= $2 AND l.recorded_at < $3
            ORDER BY l.recorded_at, l.latitude, l.longitude LIMIT \(historyFixesMax)
            """,
            [.int64(Int64(deviceID)), .timestamp(micros: fromMicros), .timestamp(micros: toMicros)]
        )
    }

    /// What `historyStatement` runs with: the history in its index's order, not sorted.
    static let historySetting = PostgresSetting(
        ProjectionSchema.historyInIndexOrder.name, ProjectionSchema.historyInIndexOrder.value)
}
