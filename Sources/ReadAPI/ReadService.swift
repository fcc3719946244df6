import Core
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
/// (a history page is one COPY, `copyOutBinary`; the stays' fixes one statement's cursor, FETCHed in
/// pieces: see `eachPiece`). The one exception
/// is a devices list with kept devices (`DeviceCardCache`): the versions, then the changed rows; a
/// device's version names the same row in every generation, so each device is still one row.
///
/// Authentication and who owns which device come from the identity registry (in memory, ahead of the
/// projection); the rule of who may read what lives in `ReadAccess` alone.
///
/// The files of this module, one concern each: `ReadRoutes` (the routes and their handlers),
/// `ReadStatements` (the SQL, and where each value sits in a row), `RowEncoding` (rows to JSON),
/// `Paging` (cursors and reading a large page in pieces), `DeviceCards` (devices written once and
/// kept), `ReadQuery` (limits and query parameters), `ReadAccess` (who may read what); this one holds
/// the service, read-your-writes, its status and how database failures are answered.
public final class ReadService: Sendable {
    public let identity: IdentityService
    public let pool: PostgresPool
    public let limits: ReadLimits
    /// The projection's checkpoint: every offset below it is in PostgreSQL.
    public let projectedEnd: @Sendable () -> UInt64
    /// Rung when `projectedEnd` may have moved (the projector's `checkpointBells`).
    let projectionBells: Doorbells
    let clockMicros: @Sendable () -> Int64
    let access: ReadAccess
    /// Devices written as JSON, reused while PostgreSQL has the same version of them.
    let cards: DeviceCardCache

    public init(
        identity: IdentityService, pool: PostgresPool, limits: ReadLimits = ReadLimits(),
        projectedEnd: @escaping @Sendable () -> UInt64, projectionBells: Doorbells = Doorbells(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        self.identity = identity
        self.pool = pool
        self.limits = limits
        self.projectedEnd = projectedEnd
        self.projectionBells = projectionBells
        self.clockMicros = clockMicros
        access = ReadAccess(identity: identity)
        cards = DeviceCardCache(bytesMax: limits.deviceCardCacheBytesMax)
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
    /// `end` and `bells`: another projection's checkpoint (the geofences'), else the main one's.
    func waitForProjection(
        _ request: HTTPRequest, end: (@Sendable () -> UInt64)? = nil, bells: Doorbells? = nil
    ) throws(APIError) {
        let projectedEnd = end ?? self.projectedEnd
        let projectionBells = bells ?? self.projectionBells
        guard let offset = try afterOffset(request.queryItems) else { return }
        let durableEnd = identity.store.durableEnd
        guard offset < durableEnd else {
            throw APIError(
                status: 400, code: .invalidAfterOffset,
                message:
                    "after_offset \(offset) was never written: the log ends at offset \(durableEnd); pass the offset a write answered"
            )
        }
        let deadline = monotonicMicros() + Int64(limits.readAfterOffsetWaitMillisMax) * 1_000
        // Added before the first look, so that a ring between the look and the sleep is kept.
        let bell = Doorbell()
        projectionBells.add(bell)
        defer { projectionBells.remove(bell) }
        while projectedEnd() <= offset {
            guard monotonicMicros() < deadline else {
                throw APIError(
                    status: 503, code: .projectionBehind,
                    message:
                        "the projection has not reached offset \(offset) within \(limits.readAfterOffsetWaitMillisMax) ms "
                        + "(it is at \(projectedEnd())); retry, or see /healthz for the projector's lag")
            }
            bell.wait(untilMonotonicMicros: deadline)
        }
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
        } catch let error as PostgresError where error.kind == .refused {
            // Why this server will not read the projection now: said to the client, since it is
            // about the deployment (which projection, which log), never about anyone's data.
            throw APIError(
                status: 503, code: .databaseUnavailable, message: "\(error.message); retry shortly")
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
}
