import HTTP
import Identity
import JSON
import Postgres
import Tracks

/// `GET /api/find-my/devices/{id}/stays?from=&to=` (docs/api.md, "Stays and moves"): a range of a
/// device's history as the places it stayed and the moves between them (`Tracks.summarizeStays`),
/// computed from the same fixes `/locations` gives the same reader.
extension ReadService {
    /// Fixes read for one summary at most: 70 days at a fix a minute. A longer range is summarised up
    /// to there and says so (`truncated`).
    static let staysFixesMax = 100_000
    /// The range when `from` is not given: the day before `to`.
    static let staysDefaultMicros: Int64 = 86_400_000_000

    func stays(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        // limit and cursor are the pages' of /locations: a summary has none.
        _ = try checkedParameters(request.queryItems, allowed: ["from", "to", "after_offset"])
        let range = try HistoryQuery.parse(
            request.queryItems, kind: .locations, deviceID: deviceID, limitDefault: Self.staysFixesMax,
            limitMax: Self.staysFixesMax)
        let toMicros = range.toMicros ?? clockMicros()
        let fromMicros = range.fromMicros ?? (toMicros - Self.staysDefaultMicros)
        guard fromMicros <= toMicros else {
            throw APIError(
                status: 400, code: .invalidRange,
                message:
                    "from (\(RFC3339.formatMicros(fromMicros))) is after to (\(RFC3339.formatMicros(toMicros))); give both, or from before now"
            )
        }
        try waitForProjection(request)
        var points: [TrackPoint] = []
        var truncated = false
        let query = HistoryQuery(fromMicros: fromMicros, toMicros: toMicros, limit: Self.staysFixesMax)
        try eachPiece(Self.locationsStatement(deviceID: deviceID, query), rowsMax: Self.staysFixesMax + 1) {
            piece throws(APIError) in
            try decoding { () throws(PostgresError) in
                let reader = try FixReader(piece, first: 0)
                for row in 0..<piece.rowCount {
                    guard points.count < Self.staysFixesMax else {
                        truncated = true
                        return
                    }
                    let fix = try reader.fix(row)
                    points.append(
                        TrackPoint(
                            latitude: fix.latitude, longitude: fix.longitude, accuracyMeters: fix.accuracy,
                            recordedAtMicros: fix.recordedAt ?? 0, clockSuspect: fix.clockSuspect))
                }
            }
        }
        let segments = summarizeStays(points)
        var writer = JSONWriter(capacity: 256 + segments.count * 256)
        writer.beginObject()
        writer.key("from")
        writer.string(RFC3339.formatMicros(fromMicros))
        writer.key("to")
        writer.string(RFC3339.formatMicros(toMicros))
        writer.key("fix_count")
        writer.int64(Int64(points.count))
        writer.key("truncated")
        writer.bool(truncated)
        writer.key("segments")
        writer.beginArray()
        for segment in segments { Self.write(segment, to: &writer) }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }

    static func write(_ segment: DaySegment, to writer: inout JSONWriter) {
        writer.beginObject()
        func times(_ start: Int64, _ end: Int64) {
            writer.key("start")
            writer.string(RFC3339.formatMicros(start))
            writer.key("end")
            writer.string(RFC3339.formatMicros(end))
            writer.key("duration_s")
            writer.int64((end - start) / 1_000_000)
        }
        switch segment {
        case .stay(let stay):
            writer.key("type")
            writer.string("stay")
            writer.key("latitude")
            writer.double(stay.latitude)
            writer.key("longitude")
            writer.double(stay.longitude)
            writer.key("radius_m")
            writer.double((stay.radiusMeters * 10).rounded() / 10)
            times(stay.startMicros, stay.endMicros)
            writer.key("fix_count")
            writer.int64(Int64(stay.fixCount))
        case .move(let move):
            writer.key("type")
            writer.string("move")
            times(move.startMicros, move.endMicros)
            writer.key("distance_m")
            writer.double(move.distanceMeters.rounded())
            writer.key("fix_count")
            writer.int64(Int64(move.fixCount))
            writer.key("gap")
            writer.bool(move.hasGap)
        }
        writer.endObject()
    }
}
