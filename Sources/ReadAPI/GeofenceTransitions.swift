import Geofences
import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema
import Threads

/// How far the geofence projection has folded (its projector, given by the executable: ReadAPI
/// does not import the projector).
public struct GeofenceProgress: Sendable {
    /// Its checkpoint: every offset below it is folded into the transitions.
    public var checkpoint: @Sendable () -> UInt64
    /// Rung when `checkpoint` may have moved.
    public var bells: Doorbells
    /// Why it cannot be read now (not yet bound to this log, stopped); nil when it can.
    public var unavailable: @Sendable () -> String?

    public init(
        checkpoint: @escaping @Sendable () -> UInt64, bells: Doorbells,
        unavailable: @escaping @Sendable () -> String?
    ) {
        self.checkpoint = checkpoint
        self.bells = bells
        self.unavailable = unavailable
    }
}

/// `GET /api/find-my/geofences/{id}/transitions?from=&to=&limit=&cursor=&after_offset=`
/// (docs/geofences.md): a fence's enter and leave transitions in `recorded_at` order, each with
/// both clocks ("left home at 08:10, known at 11:45"), paged by an opaque cursor. Only the fence's
/// owner reads it (anyone else gets the 404 of a missing fence), and only for the devices the owner
/// can see now: a share revoked hides that device's transitions. `from`/`to` bound `recorded_at`.
public struct GeofenceTransitionRoutes: Sendable {
    let reads: ReadService
    let progress: GeofenceProgress

    public init(reads: ReadService, progress: GeofenceProgress) {
        self.reads = reads
        self.progress = progress
    }

    static let pattern = "/api/find-my/geofences/{id}/transitions"

    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", Self.pattern) { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in try transitions(request, caller) }
        }
        router.add("GET", Self.devicePattern) { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try deviceTransitions(request, caller)
            }
        }
    }

    /// Without a database (`--projector off`): 503 `reads_unavailable`, as the other reads.
    public static func addUnavailableRoute(to router: inout GuardedRouter) {
        for pattern in [Self.pattern, Self.devicePattern] {
            router.add("GET", pattern) { _, _ in
                APIError(
                    status: 503, code: .readsUnavailable,
                    message:
                        "this server runs with --projector off and has no database to read from; start it with --projector on"
                ).response
            }
        }
    }

    func transitions(_ request: HTTPRequest, _ caller: GateCaller) throws(APIError) -> HTTPResponse {
        let fence = try reads.identity.ownedGeofence(request, caller)
        let query = try HistoryQuery.parse(
            request.queryItems, kind: .geofenceTransitions, deviceID: fence.geofenceID,
            limitDefault: reads.limits.historyPageFixesDefault, limitMax: reads.limits.historyPageFixesMax)
        if let why = progress.unavailable() {
            throw APIError(status: 503, code: .projectionBehind, message: "geofence transitions: \(why)")
        }
        try reads.waitForProjection(request, end: progress.checkpoint, bells: progress.bells)
        let visible = reads.identity.visibleDevices(of: fence)
        var sql = """
            SELECT id, device_id, event, recorded_at, received_at, fix_accuracy_m
            FROM \(GeofenceSchema.Table.transitions.qualified)
            WHERE geofence_id = $1 AND device_id = ANY($2::bigint[])
            """
        var parameters: [PostgresValue?] = [
            .int64(Int64(bitPattern: fence.geofenceID)),
            .array(PostgresArray(.bigint, visible.map { .int64(Int64(bitPattern: $0)) })),
        ]
        if let from = query.fromMicros {
            parameters.append(.timestamp(micros: from))
            sql += " AND recorded_at >= $\(parameters.count)"
        }
        if let to = query.toMicros {
            parameters.append(.timestamp(micros: to))
            sql += " AND recorded_at < $\(parameters.count)"
        }
        if let cursor = query.cursor {
            parameters += [.timestamp(micros: cursor.micros), .int64(Int64(cursor.logOffset))]
            sql += " AND (recorded_at, id) > ($\(parameters.count - 1), $\(parameters.count))"
        }
        sql += " ORDER BY recorded_at, id LIMIT \(query.limit + 1)"
        let result = try reads.query(sql, parameters)
        let rows = min(result.rowCount, query.limit)
        var writer = JSONWriter(capacity: 128 + rows * 200)
        writer.beginObject()
        writer.key("transitions")
        writer.beginArray()
        var last: (micros: Int64, id: Int64)?
        try reads.decoding { () throws(PostgresError) in
            for row in 0..<rows {
                let id = try result.int64(row, 0) ?? 0
                let recorded = try result.timestampMicros(row, 3) ?? 0
                writer.beginObject()
                writer.key("id")
                writer.int64(id)
                writer.key("device_id")
                writer.int64(try result.int64(row, 1) ?? 0)
                writer.key("event")
                writer.string(result.string(row, 2) ?? "")
                writer.key("recorded_at")
                writer.timestamp(micros: RFC3339.clampedMicros(recorded))
                writer.key("received_at")
                writer.timestamp(micros: RFC3339.clampedMicros(try result.timestampMicros(row, 4) ?? 0))
                writer.key("fix_accuracy_m")
                writer.finiteDouble(try result.double(row, 5) ?? .nan)
                writer.endObject()
                last = (recorded, id)
            }
        }
        writer.endArray()
        writer.key("next_cursor")
        if result.rowCount > query.limit, let last {
            writer.string(
                HistoryCursor(
                    kind: .geofenceTransitions, deviceID: fence.geofenceID, micros: last.micros,
                    logOffset: UInt64(bitPattern: last.id)
                ).encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }
}
