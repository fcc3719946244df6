import Crypto
import Identity
import JSON
import Postgres

// Paging: a history or arrivals listing is read a page at a time by its keyset, which the last row
// of a page hands to the client as an opaque cursor; a large page is read in pieces.

/// A position in a device's history or arrivals, handed to clients as an opaque `next_cursor`.
///
/// Layout (then Base64URL without padding): version 1 (1 byte), kind (1 byte: 1 locations,
/// 2 arrivals), device id (8 bytes), time in microseconds (8 bytes: `recorded_at` for locations,
/// `received_at` for arrivals), log offset (8 bytes), fix index (4 bytes; 0 for arrivals); integers
/// big-endian. The device id and kind are checked on the way back, so a cursor from another
/// device or another listing is refused instead of silently skipping rows.
public struct HistoryCursor: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        case locations = 1
        case arrivals = 2
        /// A geofence's transitions (GeofenceTransitions.swift): the id is the fence's, the time
        /// `recorded_at`, the log offset the transition's row id.
        case geofenceTransitions = 3
        /// A device's transitions, both sources, newest first (DeviceTransitions.swift): the time
        /// `recorded_at`, the log offset the row's id, the fix index its source (0 server, 1 device).
        case deviceTransitions = 4
    }

    public var kind: Kind
    public var deviceID: UInt64
    public var micros: Int64
    public var logOffset: UInt64
    public var fixIndex: UInt32

    static let version: UInt8 = 1
    static let byteCount = 30

    public init(kind: Kind, deviceID: UInt64, micros: Int64, logOffset: UInt64, fixIndex: UInt32 = 0) {
        self.kind = kind
        self.deviceID = deviceID
        self.micros = micros
        self.logOffset = logOffset
        self.fixIndex = fixIndex
    }

    public var encoded: String {
        var bytes: [UInt8] = [Self.version, kind.rawValue]
        bytes.reserveCapacity(Self.byteCount)
        func put<T: FixedWidthInteger>(_ value: T) {
            for shift in stride(from: T.bitWidth - 8, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: value >> T(shift)))
            }
        }
        put(deviceID)
        put(micros)
        put(logOffset)
        put(fixIndex)
        assert(bytes.count == Self.byteCount)
        return Base64URL.encode(bytes)
    }

    /// Decodes a cursor for `kind` of `deviceID`; a 400 `invalid_cursor` for anything else.
    public static func decode(_ text: String, kind: Kind, deviceID: UInt64) throws(APIError) -> HistoryCursor
    {
        let invalid = APIError(
            status: 400, code: .invalidCursor,
            message:
                "cursor is not a next_cursor this listing returned; pass next_cursor unchanged, or omit cursor to start from the beginning"
        )
        guard let bytes = Base64URL.decode(text), bytes.count == byteCount, bytes[0] == version,
            let found = Kind(rawValue: bytes[1])
        else { throw invalid }
        var index = 2
        func take<T: FixedWidthInteger>(_: T.Type) -> T {
            var value: T = 0
            for _ in 0..<(T.bitWidth / 8) {
                value = value << 8 | T(bytes[index])
                index += 1
            }
            return value
        }
        let cursor = HistoryCursor(
            kind: found, deviceID: take(UInt64.self), micros: Int64(bitPattern: take(UInt64.self)),
            logOffset: take(UInt64.self), fixIndex: take(UInt32.self))
        guard cursor.kind == kind, cursor.deviceID == deviceID, cursor.logOffset <= UInt64(Int64.max),
            cursor.micros >= RFC3339.microsMin, cursor.micros <= RFC3339.microsMax
        else { throw invalid }
        return cursor
    }
}

extension HistoryCursor {
    /// The cursor after row `row` of a `locationsStatement` result (binary): its keyset
    /// (recorded_at, log_offset, fix_index), read at the positions of `FixColumns.history`.
    init(locationsOf deviceID: UInt64, after result: PostgresResult, _ row: Int) throws(PostgresError) {
        typealias Columns = ReadService.FixColumns
        self.init(
            kind: .locations, deviceID: deviceID,
            micros: try result.binaryTimestampMicros(row, Columns.recordedAt) ?? 0,
            logOffset: UInt64(bitPattern: try result.binaryInt64(row, Columns.historyLogOffset) ?? 0),
            fixIndex: UInt32(clamping: try result.binaryInt64(row, Columns.historyFixIndex) ?? 0))
    }

    /// The cursor after row `row` of an `arrivalsStatement` result (text): (received_at, log_offset).
    init(arrivalsOf deviceID: UInt64, after result: PostgresResult, _ row: Int) throws(PostgresError) {
        typealias Column = ReadService.ArrivalColumn
        self.init(
            kind: .arrivals, deviceID: deviceID,
            micros: try result.timestampMicros(row, Column.receivedAt.rawValue) ?? 0,
            logOffset: UInt64(bitPattern: try result.int64(row, Column.logOffset.rawValue) ?? 0))
    }
}

extension ReadService {
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
}
