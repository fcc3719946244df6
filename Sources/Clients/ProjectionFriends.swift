import Events
import Postgres
import ProjectionSchema

/// OwnTracks' Friends view reads the projection's latest fix per device: what the panel shows,
/// with erasure and retention already applied.
public struct ProjectionFriends: FriendsSource {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    static let columns: [ProjectionSchema.FixColumn] = [
        .deviceID, .latitude, .longitude, .accuracy, .altitude, .speed, .heading, .battery, .isCharging,
        .source, .recordedAt, .clockSuspect,
    ]

    public func latestFixes(_ deviceIDs: [UInt64]) throws -> [UInt64: Fix] {
        let result = try pool.execute(
            """
            SELECT \(ProjectionSchema.select(Self.columns, from: "l"))
            FROM \(ProjectionSchema.Table.deviceLatest.live) l WHERE l.device_id = ANY($1::bigint[])
            """, [.int64Array(deviceIDs.map { Int64(bitPattern: $0) })])
        var fixes: [UInt64: Fix] = [:]
        for row in 0..<result.rowCount {
            guard let id = try result.int64(row, 0), let recordedAt = try result.timestampMicros(row, 10)
            else {
                continue
            }
            // Stored values from older logs may be outsized; the battery is shown only when it fits.
            let battery = try result.int64(row, 7).flatMap { UInt8(exactly: $0) }
            fixes[UInt64(bitPattern: id)] = Fix(
                latitude: try result.double(row, 1) ?? 0, longitude: try result.double(row, 2) ?? 0,
                accuracyMeters: try result.double(row, 3), altitudeMeters: try result.double(row, 4),
                speedMetersPerSecond: try result.double(row, 5), headingDegrees: try result.double(row, 6),
                batteryPercent: battery, isCharging: try result.bool(row, 8),
                source: result.string(row, 9) ?? "",
                recordedAtMicros: recordedAt, clockSuspect: try result.bool(row, 11) ?? false)
        }
        return fixes
    }
}
