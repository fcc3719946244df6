import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema

/// `GET /api/find-my/devices/{id}/transitions?from=&to=&limit=&cursor=&after_offset=`
/// (docs/geofences.md, "A device's transitions"): every enter and leave of one device, newest first,
/// from two sources side by side:
///
/// - `server`: the geofence projection's decisions from the fixes, for the caller's own fences
///   that name the device (a fence is its owner's alone, so a user the device is shared with sees
///   only the fences they drew). These are the ones that notify.
/// - `device`: what the device reported itself (OwnTracks `transition`), as it reported it. The
///   fence it refers to is named only when it is one of the caller's: a region findmy handed out
///   (`rid` "findmy-<id>"), or else the caller's one fence on the device with that exact name
///   (Android's OwnTracks sends no `rid`).
///
/// Who may read is the gate's (`.viewer`): the device's owner or a user it is shared with now;
/// anyone else gets the 404 of a missing device, as for its history.
extension GeofenceTransitionRoutes {
    static let devicePattern = "/api/find-my/devices/{id}/transitions"

    enum Source: Int64 {
        case server = 0
        case device = 1
        var name: String { self == .server ? "server" : "device" }
    }

    func deviceTransitions(_ request: HTTPRequest, _ caller: GateCaller) throws(APIError) -> HTTPResponse {
        let deviceID = caller.deviceID
        let query = try HistoryQuery.parse(
            request.queryItems, kind: .deviceTransitions, deviceID: deviceID,
            limitDefault: reads.limits.historyPageFixesDefault, limitMax: reads.limits.historyPageFixesMax)
        if let why = progress.unavailable() {
            throw APIError(status: 503, code: .projectionBehind, message: "device transitions: \(why)")
        }
        try reads.waitForProjection(request, end: progress.checkpoint, bells: progress.bells)
        let fences = reads.identity.registrySnapshot.geofences.fences(ownedBy: caller.userID)
        let mine = Dictionary(uniqueKeysWithValues: fences.map { ($0.geofenceID, $0) })
        let onDevice = fences.filter { $0.deviceIDs.contains(deviceID) }
        var byName: [String: UInt64?] = [:]
        for fence in onDevice {
            byName[fence.name] = byName[fence.name] == nil ? fence.geofenceID : .some(nil)
        }

        let (sql, parameters) = Self.transitionsQuery(
            query, deviceID: deviceID, fenceIDs: onDevice.map(\.geofenceID))
        let result = try reads.query(sql, parameters)
        let rows = min(result.rowCount, query.limit)
        var writer = JSONWriter(capacity: 128 + rows * 260)
        writer.beginObject()
        writer.key("transitions")
        writer.beginArray()
        var last: HistoryCursor?
        try reads.decoding { () throws(PostgresError) in
            for row in 0..<rows {
                let recorded = try result.timestampMicros(row, 0) ?? 0
                let source = Source(rawValue: try result.int64(row, 1) ?? 0) ?? .server
                let id = try result.int64(row, 2) ?? 0
                let region = result.string(row, 4).flatMap { $0.isEmpty ? nil : $0 }
                var fence = try result.int64(row, 3).flatMap { mine[UInt64(bitPattern: $0)] }
                if source == .device, fence == nil, let region, let named = byName[region] ?? nil {
                    fence = mine[named]
                }
                writer.beginObject()
                writer.key("geofence_id")
                if let fence { writer.int64(Int64(bitPattern: fence.geofenceID)) } else { writer.null() }
                writer.key("geofence_name")
                if let fence { writer.string(fence.name) } else { writer.null() }
                writer.key("region")
                if let region { writer.string(region) } else { writer.null() }
                writer.key("event")
                writer.string(result.string(row, 5) ?? "")
                writer.key("source")
                writer.string(source.name)
                writer.key("recorded_at")
                writer.timestamp(micros: RFC3339.clampedMicros(recorded))
                writer.key("received_at")
                writer.timestamp(micros: RFC3339.clampedMicros(try result.timestampMicros(row, 6) ?? 0))
                writer.key("fix_accuracy_m")
                if let accuracy = try result.double(row, 7) {
                    writer.finiteDouble(accuracy)
                } else {
                    writer.null()
                }
                writer.endObject()
                last = HistoryCursor(
                    kind: .deviceTransitions, deviceID: deviceID, micros: recorded,
                    logOffset: UInt64(bitPattern: id), fixIndex: UInt32(source.rawValue))
            }
        }
        writer.endArray()
        writer.key("next_cursor")
        if result.rowCount > query.limit, let last {
            writer.string(last.encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }

    /// Both sources' transitions of the device, newest first, within the query's bounds and after
    /// its cursor: one row more than the page, to tell whether another page follows. The server's
    /// decisions are those of `fenceIDs`, the caller's fences that name the device.
    private static func transitionsQuery(_ query: HistoryQuery, deviceID: UInt64, fenceIDs: [UInt64])
        -> (sql: String, parameters: [PostgresValue?])
    {
        var parameters: [PostgresValue?] = [
            .int64(Int64(bitPattern: deviceID)),
            .array(PostgresArray(.bigint, fenceIDs.map { .int64(Int64(bitPattern: $0)) })),
        ]
        var bounds = ""
        if let from = query.fromMicros {
            parameters.append(.timestamp(micros: from))
            bounds += " AND recorded_at >= $\(parameters.count)"
        }
        if let to = query.toMicros {
            parameters.append(.timestamp(micros: to))
            bounds += " AND recorded_at < $\(parameters.count)"
        }
        if let cursor = query.cursor {
            parameters += [
                .timestamp(micros: cursor.micros), .int64(Int64(cursor.fixIndex)),
                .int64(Int64(cursor.logOffset)),
            ]
            let n = parameters.count
            bounds += " AND (recorded_at, source, id) < ($\(n - 2), $\(n - 1), $\(n))"
        }
        let sql = """
            SELECT recorded_at, source, id, geofence_id, region_name, event, received_at, fix_accuracy_m
            FROM (
                SELECT recorded_at, 0::bigint AS source, id, geofence_id, NULL::text AS region_name, event,
                    received_at, fix_accuracy_m
                FROM \(GeofenceSchema.Table.transitions.qualified)
                WHERE device_id = $1 AND geofence_id = ANY($2::bigint[])
                UNION ALL
                SELECT recorded_at, 1::bigint, id, geofence_id, region_name, event, received_at, fix_accuracy_m
                FROM \(GeofenceSchema.Table.deviceTransitions.qualified)
                WHERE device_id = $1
            ) AS both_sources
            WHERE true\(bounds)
            ORDER BY recorded_at DESC, source DESC, id DESC
            LIMIT \(query.limit + 1)
            """
        return (sql, parameters)
    }
}
