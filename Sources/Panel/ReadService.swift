import Events
import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The read API (docs/api.md, "Read API"): the caller's devices with their latest fix and
/// staleness, a device's history and what arrived when. Reads PostgreSQL only.
///
/// Every read is ONE statement against the live projection schema (`ProjectionSchema.live`): a rebuild swaps the schema under an advisory
/// lock (`Schema.swapIn`), and a statement resolves its tables when it is parsed, so it sees the
/// old generation or the new one, never a mix. A multi-statement transaction could straddle a swap
/// (a large page is one statement's cursor, FETCHed in pieces: see `eachPiece`). The one exception
/// is a devices list with kept devices (`DeviceCardCache`): the versions, then the changed rows; a
/// device's version names the same row in every generation, so each device is still one row.
///
/// Authentication and who owns which device come from the identity registry (in memory, ahead of the
/// projection); the rule of who may read what lives in `ReadAccess` alone.
public final class ReadService: Sendable {
    public let identity: IdentityService
    public let pool: PostgresPool
    public let limits: ReadLimits
    /// The projection's checkpoint: every offset below it is in PostgreSQL.
    let projectedEnd: @Sendable () -> UInt64
    let clockMicros: @Sendable () -> Int64
    let access: ReadAccess
    /// Devices written as JSON, reused while PostgreSQL has the same version of them.
    let cards: DeviceCardCache

    public init(
        identity: IdentityService, pool: PostgresPool, limits: ReadLimits = ReadLimits(),
        projectedEnd: @escaping @Sendable () -> UInt64,
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        self.identity = identity
        self.pool = pool
        self.limits = limits
        self.projectedEnd = projectedEnd
        self.clockMicros = clockMicros
        access = ReadAccess(identity: identity)
        cards = DeviceCardCache(bytesMax: limits.deviceCardCacheBytesMax)
    }

    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/api/find-my/devices") { [self] request in
            respond { () throws(APIError) in try devices(request) }
        }
        router.add("GET", "/api/find-my/devices/{id}") { [self] request in
            respond { () throws(APIError) in try device(request) }
        }
        router.add("GET", "/api/find-my/devices/{id}/locations") { [self] request in
            respond { () throws(APIError) in try locations(request) }
        }
        router.add("GET", "/api/find-my/devices/{id}/arrivals") { [self] request in
            respond { () throws(APIError) in try arrivals(request) }
        }
        router.add("GET", "/api/find-my/admin/devices") { [self] request in
            respond { () throws(APIError) in try adminDevices(request) }
        }
    }

    /// The read routes of a server without a database (`--projector off`): each answers 503
    /// `reads_unavailable`, so a client learns why instead of getting a 404 or a 405.
    public static func addUnavailableRoutes(to router: inout GuardedRouter) {
        let error = APIError(
            status: 503, code: .readsUnavailable,
            message:
                "this server runs with --projector off and has no database to read from; start it with --projector on"
        )
        for pattern in [
            "/api/find-my/devices", "/api/find-my/devices/{id}", "/api/find-my/devices/{id}/locations",
            "/api/find-my/devices/{id}/arrivals", "/api/find-my/admin/devices",
        ] {
            router.add("GET", pattern) { _ in error.response }
        }
    }

    // MARK: handlers

    func devices(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        let reader = try identity.authenticatedUser(request)
        _ = try checkedParameters(request.queryItems, allowed: ["after_offset"])
        try waitForProjection(request)
        let scope = access.scope(of: reader)
        let sharedIDs = scope.sharedBy.keys.sorted()
        // The kept card of each device in scope, by the scope's index.
        let kept = cards.cards(scope.deviceIDs)
        // By id; nil for a device read again below.
        var list: [(id: UInt64, card: DeviceCard?)]
        if kept.count(where: { $0 != nil }) * 2 < scope.deviceIDs.count {
            // Few cards (a first read): every column in one statement, as if there were no cache.
            let fresh = try makeCards(
                try query(Self.devicesStatement(ownerID: reader, sharedIDs: sharedIDs)), scope)
            cards.insert(fresh)
            cards.count(reused: 0, written: fresh.count)
            list = fresh.map { ($0.id, $0.card) }
        } else {
            // The versions PostgreSQL has now; a card of another version is read and written again.
            let versions = try query(Self.deviceVersionsStatement(ownerID: reader, sharedIDs: sharedIDs))
            var stale: [UInt64] = []
            list = try decoding { () throws(PostgresError) in
                try rowsInScope(versions, scope).map { (id, row) throws(PostgresError) in
                    if let index = scope.index(of: id), let card = kept[index],
                        card.version == (try DeviceVersion(versions, row, 1))
                    {
                        return (id, card)
                    }
                    stale.append(id)
                    return (id, nil)
                }
            }
            cards.count(reused: list.count - stale.count, written: stale.count)
            if !stale.isEmpty {
                // Read a moment after the versions, so possibly newer: each device is still one
                // row's state, and a device gone in between is left out, as the scope would.
                let fresh = try makeCards(try query(Self.devicesStatement(ids: stale)), scope)
                cards.insert(fresh)
                var next = fresh.startIndex
                for index in list.indices where list[index].card == nil {
                    // Both by id, the fresh ones a subset of the stale.
                    while next < fresh.endIndex, fresh[next].id < list[index].id { next += 1 }
                    if next < fresh.endIndex, fresh[next].id == list[index].id {
                        list[index].card = fresh[next].card
                    }
                }
            }
        }
        let sharedBy = { (id: UInt64) -> String? in scope.sharedBy.isEmpty ? nil : scope.sharedBy[id] }
        var bytesMax = 64
        for (id, card) in list {
            bytesMax += card?.bytesMax(sharedByUTF8Count: sharedBy(id)?.utf8.count ?? 0) ?? 0
        }
        let now = clockMicros()
        var writer = JSONWriter(capacity: bytesMax)
        writer.beginObject()
        writer.key("devices")
        writer.beginArray()
        for case (let id, let card?) in list { card.write(&writer, nowMicros: now, sharedBy: sharedBy(id)) }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }

    /// The rows of `result` (device id in column 0) whose devices are in `scope`, by id. The
    /// statements leave the order to PostgreSQL (a sort there cost more than here), and the registry
    /// is ahead of the projection: a device removed a moment ago may still have a row.
    func rowsInScope(_ result: PostgresResult, _ scope: ReadAccess.ReadScope) throws(PostgresError) -> [(
        id: UInt64, row: Int
    )] {
        var rows: [(id: UInt64, row: Int)] = []
        rows.reserveCapacity(result.rowCount)
        for row in 0..<result.rowCount {
            let id = UInt64(bitPattern: try result.binaryInt64(row, 0) ?? 0)
            if scope.contains(id) { rows.append((id, row)) }
        }
        rows.sort { $0.id < $1.id }
        return rows
    }

    /// The cards of the rows of `result` (`deviceSelect`) whose devices are in `scope`, by id.
    /// Many are written in two halves at once, on this thread and one more: by then PostgreSQL has
    /// answered and the client waits, so the second core is free, and writing is most of the time.
    func makeCards(_ result: PostgresResult, _ scope: ReadAccess.ReadScope) throws(APIError) -> [(
        id: UInt64, card: DeviceCard
    )] {
        let rows = try decoding { () throws(PostgresError) in try rowsInScope(result, scope) }
        let halves = rows.count >= Self.parallelCardsMin ? 2 : 1
        let parts = (0..<halves).map { _ in CardsPart() }
        concurrentPerform(iterations: halves) { half in
            let part = parts[half]
            let slice = rows[(rows.count * half / halves)..<(rows.count * (half + 1) / halves)]
            part.cards.reserveCapacity(slice.count)
            var scratch = JSONWriter(capacity: 4096)
            do throws(PostgresError) {
                for (id, row) in slice {
                    part.cards.append((id, try makeCard(result, row, scratch: &scratch)))
                }
            } catch {
                part.failure = error
            }
        }
        var cards: [(id: UInt64, card: DeviceCard)] = []
        cards.reserveCapacity(rows.count)
        for part in parts {
            if let failure = part.failure { try decoding { () throws(PostgresError) in throw failure } }
            cards += part.cards
        }
        return cards
    }

    /// At least this many cards are written in two halves at once.
    static let parallelCardsMin = 256

    /// One half of the cards being written; touched by one thread at a time.
    final class CardsPart: @unchecked Sendable {
        var cards: [(id: UInt64, card: DeviceCard)] = []
        var failure: PostgresError?
    }

    func device(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        let reader = try identity.authenticatedUser(request)
        let (deviceID, sharedBy) = try access.device(request.pathParameters["id"], visibleTo: reader)
        _ = try checkedParameters(request.queryItems, allowed: ["after_offset"])
        try waitForProjection(request)
        let result = try query(Self.devicesStatement(ids: [deviceID]))
        // Known to the registry but not projected yet: the same answer as any unknown device.
        guard result.rowCount == 1 else { throw ReadAccess.notFound }
        var scratch = JSONWriter(capacity: 2048)
        let card = try decoding { () throws(PostgresError) in try makeCard(result, 0, scratch: &scratch) }
        var writer = JSONWriter(capacity: card.bytesMax(sharedByUTF8Count: sharedBy?.utf8.count ?? 0))
        card.write(&writer, nowMicros: clockMicros(), sharedBy: sharedBy)
        return .json(writer.bytes)
    }

    func locations(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        let reader = try identity.authenticatedUser(request)
        let deviceID = try access.device(request.pathParameters["id"], visibleTo: reader).id
        let query = try HistoryQuery.parse(
            request.queryItems, kind: .locations, deviceID: deviceID,
            limitDefault: limits.historyPageFixesDefault, limitMax: limits.historyPageFixesMax)
        try waitForProjection(request)
        // As for the devices: every fix's reservation fits without growing the buffer.
        var writer = JSONWriter(capacity: 4096 + query.limit * 768)
        writer.beginObject()
        writer.key("locations")
        writer.beginArray()
        var written = 0
        var nextPage = false
        var last: (piece: PostgresResult, row: Int)? = nil
        try eachPiece(Self.locationsStatement(deviceID: deviceID, query), rowsMax: query.limit + 1) {
            piece throws(APIError) in
            try decoding { () throws(PostgresError) in
                for row in 0..<piece.rowCount {
                    guard written < query.limit else {
                        nextPage = true
                        return
                    }
                    try writeFix(&writer, piece, row, 0)
                    written += 1
                    last = (piece, row)
                }
            }
        }
        writer.endArray()
        writer.key("next_cursor")
        if nextPage, let (piece, row) = last {
            let cursor = try decoding { () throws(PostgresError) in
                HistoryCursor(
                    kind: .locations, deviceID: deviceID,
                    micros: try piece.binaryTimestampMicros(row, Self.fixColumnCount - 3) ?? 0,
                    logOffset: UInt64(bitPattern: try piece.binaryInt64(row, Self.fixColumnCount) ?? 0),
                    fixIndex: UInt32(clamping: try piece.binaryInt64(row, Self.fixColumnCount + 1) ?? 0))
            }
            writer.string(cursor.encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }

    /// Rows per piece of a large read (`eachPiece`).
    static let pieceRows = 1_024

    /// Runs `statement` and hands its rows (at most `rowsMax`) to `body`. A small read is one
    /// result. A large one (a 30-day history page is 8,640 rows) goes through a cursor, FETCHed a
    /// piece at a time with the next FETCH sent before `body` gets the previous piece, so that
    /// PostgreSQL reads and sends one piece while this thread writes the other: the read takes
    /// about the longer of the two instead of their sum (docs/benchmarks.md).
    ///
    /// Still one statement's view of one generation: the cursor's query resolves its tables once,
    /// at DECLARE, and its transaction holds them until COMMIT, so a rebuild's swap waits for it.
    func eachPiece(
        _ statement: Statement, rowsMax: Int, _ body: (PostgresResult) throws(APIError) -> Void
    ) throws(APIError) {
        guard rowsMax > 2 * Self.pieceRows else { return try body(try query(statement)) }
        try database {
            try pool.withConnection { connection in
                try connection.transaction { connection in
                    try connection.execute(
                        "DECLARE piece NO SCROLL CURSOR FOR " + statement.sql, statement.parameters)
                    var fetched = 0
                    func fetchNext() throws -> Int {
                        let rows = min(Self.pieceRows, rowsMax - fetched)
                        try connection.send("FETCH \(rows) FROM piece", format: statement.format)
                        return rows
                    }
                    var requested = try fetchNext()
                    while true {
                        let piece = try connection.receive()
                        fetched += piece.rowCount
                        let done = piece.rowCount < requested || fetched >= rowsMax
                        if !done { requested = try fetchNext() }
                        try body(piece)
                        if done { break }
                    }
                }
            }
        }
    }

    func arrivals(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        let reader = try identity.authenticatedUser(request)
        let deviceID = try access.device(request.pathParameters["id"], visibleTo: reader).id
        let query = try HistoryQuery.parse(
            request.queryItems, kind: .arrivals, deviceID: deviceID,
            limitDefault: limits.arrivalsPageBatchesDefault, limitMax: limits.arrivalsPageBatchesMax)
        try waitForProjection(request)
        let result = try self.query(
            """
            SELECT b.received_at, b.batch_id::text, b.fix_count, b.rejected_count, b.recorded_min,
                b.recorded_max, b.log_offset, b.protocol
            FROM \(ProjectionSchema.Table.deviceBatches.live) b
            WHERE b.device_id = $1
              AND b.received_at >= coalesce($2::timestamptz, '-infinity')
              AND b.received_at < coalesce($3::timestamptz, 'infinity')
              AND ($4::timestamptz IS NULL OR (b.received_at, b.log_offset) > ($4, $5))
            ORDER BY b.received_at, b.log_offset
            LIMIT $6
            """,
            [
                .int64(Int64(deviceID)), query.fromMicros.map { .timestamp(micros: $0) },
                query.toMicros.map { .timestamp(micros: $0) },
                query.cursor.map { .timestamp(micros: $0.micros) },
                .int64(Int64(query.cursor?.logOffset ?? 0)), .int64(Int64(query.limit + 1)),
            ])
        let rows = min(result.rowCount, query.limit)
        var writer = JSONWriter(capacity: 256 + rows * 220)
        writer.beginObject()
        writer.key("arrivals")
        writer.beginArray()
        try decoding { () throws(PostgresError) in
            for row in 0..<rows {
                writer.beginObject()
                writer.key("received_at")
                try writeTime(&writer, result, row, 0)
                writer.key("batch_id")
                writer.string(result.string(row, 1) ?? "")
                writer.key("fix_count")
                writer.int64(try result.int64(row, 2) ?? 0)
                writer.key("rejected_count")
                writer.int64(try result.int64(row, 3) ?? 0)
                writer.key("recorded_min")
                try writeTime(&writer, result, row, 4)
                writer.key("recorded_max")
                try writeTime(&writer, result, row, 5)
                writer.key("offset")
                writer.int64(try result.int64(row, 6) ?? 0)
                writer.key("protocol")
                writer.string(result.string(row, 7) ?? "native")
                writer.endObject()
            }
        }
        writer.endArray()
        writer.key("next_cursor")
        if result.rowCount > query.limit {
            let last = rows - 1
            let cursor = try decoding { () throws(PostgresError) in
                HistoryCursor(
                    kind: .arrivals, deviceID: deviceID, micros: try result.timestampMicros(last, 0) ?? 0,
                    logOffset: UInt64(bitPattern: try result.int64(last, 6) ?? 0))
            }
            writer.string(cursor.encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }

    /// The kept devices as `/healthz` ("reads") and `/metrics` show them (docs/api.md).
    public var statusSource: any StatusSource { ReadStatus(service: self) }

    struct ReadStatus: StatusSource {
        let service: ReadService
        var name: String { "reads" }
        func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
            let usage = service.cards.usage
            return (
                false,
                [
                    ("device_cards", .integer(Int64(usage.cards))),
                    ("device_cards_bytes", .integer(Int64(usage.bytes))),
                ]
            )
        }
        func metricsText() -> String { service.metricsText }
    }

    var metricsText: String {
        let usage = cards.usage
        let counts = cards.counts
        return """
            # HELP findmy_read_device_cards Devices kept written as JSON for the devices list.
            # TYPE findmy_read_device_cards gauge
            findmy_read_device_cards \(usage.cards)
            # HELP findmy_read_device_cards_bytes What the kept devices cost, of --device-cache-mb.
            # TYPE findmy_read_device_cards_bytes gauge
            findmy_read_device_cards_bytes \(usage.bytes)
            # HELP findmy_read_device_cards_reused_total Devices of lists answered from a kept device.
            # TYPE findmy_read_device_cards_reused_total counter
            findmy_read_device_cards_reused_total \(counts.reused)
            # HELP findmy_read_device_cards_written_total Devices of lists read and written anew (first read, changed, or not kept).
            # TYPE findmy_read_device_cards_written_total counter
            findmy_read_device_cards_written_total \(counts.written)

            """
    }

    // MARK: read-your-writes

    /// With `after_offset=N`, waits until the projection holds offset N (its checkpoint is past N),
    /// at most `readAfterOffsetWaitMillisMax`; then 503 `projection_behind` with Retry-After, rather
    /// than an answer that silently lacks the client's own write.
    func waitForProjection(_ request: HTTPRequest) throws(APIError) {
        guard let offset = try afterOffset(request.queryItems) else { return }
        let durableEnd = identity.log.durableEnd
        guard offset < durableEnd else {
            throw APIError(
                status: 400, code: .invalidAfterOffset,
                message:
                    "after_offset \(offset) was never written: the log ends at offset \(durableEnd); pass the offset a write answered"
            )
        }
        let deadline = monotonicMicros() + Int64(limits.readAfterOffsetWaitMillisMax) * 1_000
        while projectedEnd() <= offset {
            guard monotonicMicros() < deadline else {
                throw APIError(
                    status: 503, code: .projectionBehind,
                    message:
                        "the projection has not reached offset \(offset) within \(limits.readAfterOffsetWaitMillisMax) ms "
                        + "(it is at \(projectedEnd())); retry, or see /healthz for the projector's lag")
            }
            usleep(UInt32(limits.afterOffsetPollMillis * 1_000))
        }
    }

    // MARK: statements

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

    /// A page of a device's history and one row more, which tells whether another page follows.
    ///
    /// The keyset (recorded_at, log_offset, fix_index) is unique, so pages neither repeat nor skip a
    /// fix, even among fixes with the same recorded_at.
    public static func locationsStatement(deviceID: UInt64, _ query: HistoryQuery) -> Statement {
        Statement(
            sql: """
                SELECT \(fixColumns("l")), l.log_offset, l.fix_index
                FROM \(ProjectionSchema.Table.deviceLocations.live) l
                WHERE l.device_id = $1
                  AND l.recorded_at >= coalesce($2::timestamptz, '-infinity')
                  AND l.recorded_at < coalesce($3::timestamptz, 'infinity')
                  AND l.recorded_at >= coalesce($4::timestamptz, '-infinity')
                  AND ($4::timestamptz IS NULL OR (l.recorded_at, l.log_offset, l.fix_index) > ($4, $5, $6))
                ORDER BY l.recorded_at, l.log_offset, l.fix_index
                LIMIT $7
                """,
            parameters: [
                .int64(Int64(deviceID)), query.fromMicros.map { .timestamp(micros: $0) },
                query.toMicros.map { .timestamp(micros: $0) },
                query.cursor.map { .timestamp(micros: $0.micros) },
                .int64(Int64(query.cursor?.logOffset ?? 0)), .int64(Int64(query.cursor?.fixIndex ?? 0)),
                .int64(Int64(query.limit + 1)),
            ], format: .binary)
    }

    // MARK: rows to JSON

    /// A device and its latest fix: columns 0...6 the device, then `fixColumns`, then `versionColumns`.
    static let deviceSelect = """
        SELECT d.id, d.name, d.platform, d.model, d.paused, d.created_at, d.last_seen_at, \(fixColumns("l")),
            \(versionColumns)
        FROM \(ProjectionSchema.Table.devices.live) d LEFT JOIN \(ProjectionSchema.Table.deviceLatest.live) l ON l.device_id = d.id
        """
    static let deviceColumnCount = 7
    /// What `DeviceVersion` reads.
    static let versionColumns = "d.as_of_offset, l.log_offset, l.fix_index"

    /// The fix columns in the order `writeFix` reads them; `recorded_at` is at `fixColumnCount - 3`.
    static let fixColumnList: [ProjectionSchema.FixColumn] = [
        .latitude, .longitude, .accuracy, .altitude, .speed, .heading, .battery, .isCharging, .source,
        .recordedAt, .receivedAt, .clockSuspect,
    ]
    static func fixColumns(_ table: String) -> String { ProjectionSchema.select(fixColumnList, from: table) }
    static let fixColumnCount = fixColumnList.count

    /// The card of a device of a binary-format result (`deviceSelect`) and its latest fix.
    ///
    /// Each row is read whole, then written as one `JSONFlatObject` (one reservation per device
    /// instead of one per token), as `writeFix` does for a history page.
    /// `scratch` is where it is written before being copied out at its exact length.
    func makeCard(_ result: PostgresResult, _ row: Int, scratch writer: inout JSONWriter)
        throws(PostgresError)
        -> DeviceCard
    {
        let id = try result.binaryInt64(row, 0) ?? 0
        let name = try result.binaryText(row, 1)
        let platform = try result.binaryText(row, 2)
        let model = try result.binaryText(row, 3)
        let paused = try result.binaryBool(row, 4) ?? false
        let createdAt = try result.binaryTimestampMicros(row, 5)
        let lastSeen = try result.binaryTimestampMicros(row, 6)
        let fixColumn = Self.deviceColumnCount
        let latest: FixRow? =
            try result.binaryTimestampMicros(row, fixColumn + Self.fixColumnCount - 3) == nil
            ? nil : try FixRow(result, row, fixColumn)
        let version = try DeviceVersion(result, row, fixColumn + Self.fixColumnCount)
        let bytesMax =
            Self.deviceBytesMaxFixed + JSONFlatObject.stringBytesMax(utf8Count: name.count)
            + JSONFlatObject.stringBytesMax(utf8Count: platform.count)
            + JSONFlatObject.stringBytesMax(utf8Count: model.count) + (latest?.bytesMax ?? 0)
        writer.reset()
        var holes = (sharedBy: 0, sinceLastReport: 0, fixAge: 0)
        writer.flatObject(bytesMax: bytesMax) { object in
            object.key("id")
            object.int64(id)
            object.key("name")
            object.string(utf8: name)
            object.key("platform")
            object.string(utf8: platform)
            object.key("model")
            object.string(utf8: model)
            object.key("paused")
            object.bool(paused)
            object.key("shared_by")
            holes.sharedBy = object.written
            object.key("created_at")
            Self.writeTime(&object, createdAt)
            object.key("last_seen_at")
            Self.writeTime(&object, lastSeen)
            object.key("since_last_report_seconds")
            holes.sinceLastReport = object.written
            object.key("fix_age_seconds")
            holes.fixAge = object.written
            object.key("latest")
            if let latest {
                object.beginObject()
                latest.write(&object)
                object.endObject()
            } else {
                object.null()
            }
        }
        let bytes = writer.bytes.withUnsafeBufferPointer { written in
            [UInt8](unsafeUninitializedCapacity: written.count) { output, count in
                count = output.initialize(fromContentsOf: written)
            }
        }
        return DeviceCard(
            version: version, bytes: bytes, sharedByAt: holes.sharedBy,
            sinceLastReportAt: holes.sinceLastReport, fixAgeAt: holes.fixAge, lastSeenMicros: lastSeen,
            recordedAtMicros: latest?.recordedAt)
    }

    /// The keys, punctuation and fixed-width values of a device, for `makeCard`'s bound.
    static let deviceBytesMaxFixed = 512

    /// The fix in columns `first ..< first + fixColumnCount` of a binary-format result, as an object.
    func writeFix(_ writer: inout JSONWriter, _ result: PostgresResult, _ row: Int, _ first: Int)
        throws(PostgresError)
    {
        let fix = try FixRow(result, row, first)
        writer.flatObject(bytesMax: fix.bytesMax) { object in fix.write(&object) }
    }

    /// One fix of a binary-format result, read straight from libpq's buffer: `source` points into
    /// the result, so a `FixRow` must not outlive it.
    struct FixRow {
        var latitude, longitude: Double
        var accuracy, altitude, speed, heading: Double?
        var battery: Int64?
        var charging: Bool?
        var source: UnsafeBufferPointer<UInt8>
        var recordedAt, receivedAt: Int64?
        var clockSuspect: Bool

        init(_ result: PostgresResult, _ row: Int, _ first: Int) throws(PostgresError) {
            latitude = try result.binaryDouble(row, first) ?? 0
            longitude = try result.binaryDouble(row, first + 1) ?? 0
            accuracy = try result.binaryDouble(row, first + 2)
            altitude = try result.binaryDouble(row, first + 3)
            speed = try result.binaryDouble(row, first + 4)
            heading = try result.binaryDouble(row, first + 5)
            battery = try result.binaryInt64(row, first + 6)
            charging = try result.binaryBool(row, first + 7)
            source = try result.binaryText(row, first + 8)
            recordedAt = try result.binaryTimestampMicros(row, first + 9)
            receivedAt = try result.binaryTimestampMicros(row, first + 10)
            clockSuspect = try result.binaryBool(row, first + 11) ?? false
        }

        /// Keys and punctuation (about 170 bytes), six doubles, an integer, two times, the source.
        var bytesMax: Int {
            256 + 6 * JSONFlatObject.doubleBytesMax + 2 * JSONFlatObject.timestampBytesMax
                + JSONFlatObject.stringBytesMax(utf8Count: source.count)
        }

        /// The members (the caller writes the braces), in the order of docs/api.md.
        func write(_ object: inout JSONFlatObject) {
            // Stored values are shown as stored, however outsized; only what JSON cannot say
            // (NaN, infinities) becomes null.
            object.key("latitude")
            object.finiteDouble(latitude)
            object.key("longitude")
            object.finiteDouble(longitude)
            object.key("accuracy_m")
            if let accuracy { object.finiteDouble(accuracy) } else { object.null() }
            object.key("altitude_m")
            if let altitude { object.finiteDouble(altitude) } else { object.null() }
            object.key("speed_mps")
            if let speed { object.finiteDouble(speed) } else { object.null() }
            object.key("heading_deg")
            if let heading { object.finiteDouble(heading) } else { object.null() }
            object.key("battery_pct")
            if let battery { object.int64(battery) } else { object.null() }
            object.key("is_charging")
            if let charging { object.bool(charging) } else { object.null() }
            object.key("source")
            object.string(utf8: source)
            object.key("recorded_at")
            ReadService.writeTime(&object, recordedAt)
            object.key("received_at")
            ReadService.writeTime(&object, receivedAt)
            object.key("clock_suspect")
            object.bool(clockSuspect)
        }
    }

    static func writeTime(_ object: inout JSONFlatObject, _ micros: Int64?) {
        guard let micros else { return object.null() }
        object.timestamp(micros: RFC3339.clampedMicros(micros))
    }

    func writeTime(_ writer: inout JSONWriter, _ result: PostgresResult, _ row: Int, _ column: Int)
        throws(PostgresError)
    {
        writeTime(&writer, try result.timestampMicros(row, column))
    }

    /// RFC 3339 with microseconds, or null. Ingest accepts only years 0001-9999, so every stored
    /// time can be written.
    func writeTime(_ writer: inout JSONWriter, _ micros: Int64?) {
        guard let micros else { return writer.null() }
        writer.timestamp(micros: RFC3339.clampedMicros(micros))
    }

    // MARK: errors

    func query(_ statement: Statement) throws(APIError) -> PostgresResult {
        try query(statement.sql, statement.parameters, format: statement.format)
    }

    func query(_ sql: String, _ parameters: [PostgresValue?], format: PostgresResultFormat = .text)
        throws(APIError) -> PostgresResult
    {
        try database { try pool.execute(sql, parameters, format: format) }
    }

    /// Runs `body`'s database work: an `APIError` it throws (from a caller's closure) passes
    /// through; any other failure is logged and answered as `databaseUnavailable`.
    func database<T>(_ body: () throws -> T) throws(APIError) -> T {
        do {
            return try body()
        } catch let error as APIError {
            throw error
        } catch {
            StructuredLog.error("read_failed", ["error": .string("\(error)")])
            throw Self.databaseUnavailable
        }
    }

    func decoding<T>(_ body: () throws(PostgresError) -> T) throws(APIError) -> T {
        do {
            return try body()
        } catch {
            // Not the error's text: a decode error quotes the value, and values are coordinates.
            StructuredLog.error("read_decode_failed", ["kind": .string("\(error.kind)")])
            throw Self.databaseUnavailable
        }
    }

    static let databaseUnavailable = APIError(
        status: 503, code: .databaseUnavailable,
        message: "the database did not answer this read; retry shortly (the server log has the cause)")

    func respond(_ body: () throws(APIError) -> HTTPResponse) -> HTTPResponse {
        do {
            return try body()
        } catch {
            var response = error.response
            if error.status == 503 { response.headers.set("Retry-After", "1") }
            return response
        }
    }
}

extension String? {
    /// The UTF-8 of the string, or nil, for the duration of `body`.
    mutating func withUTF8Optional<R>(_ body: (UnsafeBufferPointer<UInt8>?) -> R) -> R {
        guard var text = self else { return body(nil) }
        return text.withUTF8 { body($0) }
    }
}
