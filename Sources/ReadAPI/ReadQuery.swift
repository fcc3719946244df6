import Identity
import JSON

/// The limits of the read API, each with its unit; docs/api.md lists them.
public struct ReadLimits: Sendable {
    /// Fixes in one page of `/locations` at most. A 30-day history at a 5-minute cadence is 8,640
    /// fixes: it fits in one page.
    public var historyPageFixesMax = 10_000
    /// Fixes in a page when the request has no `limit`.
    public var historyPageFixesDefault = 1_000
    /// Batches in one page of `/arrivals` at most, and when the request has no `limit`.
    public var arrivalsPageBatchesMax = 10_000
    public var arrivalsPageBatchesDefault = 1_000
    /// How long a read with `after_offset` waits for the projection to reach the offset before it
    /// answers 503 `projection_behind`.
    public var readAfterOffsetWaitMillisMax = 5_000
    /// Bytes of devices kept written as JSON between reads of the devices list (about 600 a device);
    /// 0 writes every device of every list again.
    public var deviceCardCacheBytesMax = 16 << 20

    public init() {}
}

/// The query of a history or arrivals request: `from` (inclusive) and `to` (exclusive) as
/// RFC 3339 times, `limit`, `cursor`; `after_offset` is read separately by `afterOffset`.
public struct HistoryQuery: Equatable, Sendable {
    public var fromMicros: Int64?
    public var toMicros: Int64?
    public var limit: Int
    /// The position of a listing of another kind than the history's (arrivals, transitions).
    public var cursor: HistoryCursor?
    /// The position in the history (`/locations`), whose cursor has a layout of its own.
    public var locationsCursor: LocationsCursor?

    public init(
        fromMicros: Int64? = nil, toMicros: Int64? = nil, limit: Int, cursor: HistoryCursor? = nil,
        locationsCursor: LocationsCursor? = nil
    ) {
        self.fromMicros = fromMicros
        self.toMicros = toMicros
        self.limit = limit
        self.cursor = cursor
        self.locationsCursor = locationsCursor
    }

    /// Parses and checks the query items; every problem is a 400 that names the parameter.
    public static func parse(
        _ items: [(name: String, value: String)], kind: HistoryCursor.Kind, deviceID: UInt64,
        limitDefault: Int, limitMax: Int
    ) throws(APIError) -> HistoryQuery {
        let values = try checkedParameters(items, allowed: ["from", "to", "limit", "cursor", "after_offset"])
        let from = try values["from"].map { text throws(APIError) in try time(text, "from") }
        let to = try values["to"].map { text throws(APIError) in try time(text, "to") }
        if let from, let to, from > to {
            throw APIError(
                status: 400, code: .invalidRange,
                message:
                    "from (\(RFC3339.formatMicros(from))) is after to (\(RFC3339.formatMicros(to))); from is inclusive, to exclusive"
            )
        }
        var limit = limitDefault
        if let text = values["limit"] {
            guard let number = Int(text), number >= 1, number <= limitMax else {
                throw APIError(
                    status: 400, code: .invalidLimit,
                    message: "limit must be a whole number from 1 to \(limitMax), got '\(text.prefix(32))'")
            }
            limit = number
        }
        guard let text = values["cursor"] else {
            return HistoryQuery(fromMicros: from, toMicros: to, limit: limit)
        }
        if kind == .locations {
            return HistoryQuery(
                fromMicros: from, toMicros: to, limit: limit,
                locationsCursor: try LocationsCursor.decode(text, deviceID: deviceID))
        }
        return HistoryQuery(
            fromMicros: from, toMicros: to, limit: limit,
            cursor: try HistoryCursor.decode(text, kind: kind, deviceID: deviceID))
    }

    static func time(_ text: String, _ name: String) throws(APIError) -> Int64 {
        do {
            return try RFC3339.parseMicros(text)
        } catch {
            throw APIError(
                status: 400, code: .invalidRange,
                message:
                    "\(name) must be an RFC 3339 time like 2026-05-01T09:00:00Z (a '+' offset must be sent as %2B): \(error.description)"
            )
        }
    }
}

/// `after_offset=N`: the `offset` a write returned. Nil when absent.
public func afterOffset(_ items: [(name: String, value: String)]) throws(APIError) -> UInt64? {
    guard let text = items.first(where: { $0.name == "after_offset" })?.value else { return nil }
    guard let offset = UInt64(text), offset <= UInt64(Int64.max) else {
        throw APIError(
            status: 400, code: .invalidAfterOffset,
            message:
                "after_offset must be the offset a write answered (a whole number), got '\(text.prefix(32))'")
    }
    return offset
}

/// The query items as a dictionary; an unknown or repeated parameter is a 400, so that a typo
/// (`form=`) is not silently ignored.
func checkedParameters(_ items: [(name: String, value: String)], allowed: Set<String>) throws(APIError)
    -> [String: String]
{
    var values: [String: String] = [:]
    for item in items {
        guard allowed.contains(item.name) else {
            throw APIError(
                status: 400, code: .unknownParameter,
                message:
                    "unknown query parameter '\(item.name.prefix(64))'; this endpoint takes \(allowed.sorted().joined(separator: ", "))"
            )
        }
        guard values.updateValue(item.value, forKey: item.name) == nil else {
            throw APIError(
                status: 400, code: .unknownParameter,
                message: "query parameter '\(item.name)' is given twice")
        }
    }
    return values
}
