import Crypto
import Identity
import JSON
import Postgres

// Paging: a history or arrivals listing is read a page at a time by its keyset, which the last row
// of a page hands to the client as an opaque cursor; a large page is read in pieces.

/// A position in a device's history or arrivals, handed to clients as an opaque `next_cursor`.
///
/// Layout (then Base64URL without padding): version 1 (1 byte), kind (1 byte: 2 arrivals, 3 and 4
/// transitions; 1 was the history's, now `LocationsCursor`), device id (8 bytes), time in microseconds (8 bytes: `recorded_at` for locations,
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

    static let invalid = APIError(
        status: 400, code: .invalidCursor,
        message:
            "cursor is not a next_cursor this listing returned; pass next_cursor unchanged, or omit cursor to start from the beginning"
    )

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

/// Where a page of a device's history ends: the key of the history's unique index after the device,
/// (recorded_at, latitude, longitude). The history is read in this order, the index's own, so
/// PostgreSQL walks the index and sends rows as it finds them, with no sort (docs/benchmarks.md).
public struct FixKeyset: Equatable, Sendable {
    public var recordedAtMicros: Int64
    public var latitude: Double
    public var longitude: Double

    public init(recordedAtMicros: Int64, latitude: Double, longitude: Double) {
        self.recordedAtMicros = recordedAtMicros
        self.latitude = latitude
        self.longitude = longitude
    }

    /// Equal when every bit is: a stored NaN (PostgreSQL orders it above every number) is a position too.
    public static func == (left: FixKeyset, right: FixKeyset) -> Bool {
        left.recordedAtMicros == right.recordedAtMicros
            && left.latitude.bitPattern == right.latitude.bitPattern
            && left.longitude.bitPattern == right.longitude.bitPattern
    }
}

/// A position in a device's history (`/locations`), handed to clients as an opaque `next_cursor`.
///
/// Layout (then Base64URL without padding): version 2 (1 byte), kind 1 (1 byte, as
/// `HistoryCursor.Kind.locations`), device id (8 bytes), `recorded_at` in microseconds (8 bytes),
/// latitude and longitude (8 bytes each, the double's bits); integers big-endian. Version 1, the
/// layout of `HistoryCursor`, carried (recorded_at, log offset, fix index), the history's order
/// before it became its index's: such a cursor cannot say which fixes of its instant were sent, so
/// it is refused with a message saying to start again.
public struct LocationsCursor: Equatable, Sendable {
    public var deviceID: UInt64
    public var keyset: FixKeyset

    static let version: UInt8 = 2
    static let byteCount = 34

    public init(deviceID: UInt64, keyset: FixKeyset) {
        self.deviceID = deviceID
        self.keyset = keyset
    }

    public var encoded: String {
        var bytes: [UInt8] = [Self.version, HistoryCursor.Kind.locations.rawValue]
        bytes.reserveCapacity(Self.byteCount)
        for value in [
            deviceID, UInt64(bitPattern: keyset.recordedAtMicros), keyset.latitude.bitPattern,
            keyset.longitude.bitPattern,
        ] {
            for shift in stride(from: 56, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: value >> shift))
            }
        }
        assert(bytes.count == Self.byteCount)
        return Base64URL.encode(bytes)
    }

    /// Decodes a cursor of `deviceID`'s history; a 400 `invalid_cursor` for anything else.
    public static func decode(_ text: String, deviceID: UInt64) throws(APIError) -> LocationsCursor {
        guard let bytes = Base64URL.decode(text) else { throw HistoryCursor.invalid }
        if bytes.count == HistoryCursor.byteCount, bytes[0] == HistoryCursor.version,
            bytes[1] == HistoryCursor.Kind.locations.rawValue
        {
            throw APIError(
                status: 400, code: .invalidCursor,
                message:
                    "cursor was made by an earlier version of findmy, which ordered fixes of the same recorded_at differently; start again without cursor, or with from= the last recorded_at you have"
            )
        }
        guard bytes.count == byteCount, bytes[0] == version, bytes[1] == HistoryCursor.Kind.locations.rawValue
        else { throw HistoryCursor.invalid }
        func word(_ index: Int) -> UInt64 {
            bytes[(2 + 8 * index)..<(10 + 8 * index)].reduce(0) { $0 << 8 | UInt64($1) }
        }
        let cursor = LocationsCursor(
            deviceID: word(0),
            keyset: FixKeyset(
                recordedAtMicros: Int64(bitPattern: word(1)), latitude: Double(bitPattern: word(2)),
                longitude: Double(bitPattern: word(3))))
        guard cursor.deviceID == deviceID, cursor.keyset.recordedAtMicros >= RFC3339.microsMin,
            cursor.keyset.recordedAtMicros <= RFC3339.microsMax
        else { throw HistoryCursor.invalid }
        return cursor
    }
}

extension HistoryCursor {
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
    /// The keyset of row `row` of a `locationsStatement` result, which the next page's cursor
    /// carries; public for `findmy-bench read`, which pages the statement over a bare connection.
    public static func historyKeyset(_ result: PostgresResult, _ row: Int) throws(PostgresError) -> FixKeyset
    {
        let fix = try FixReader(result, first: 0).fix(row)
        guard let recordedAt = fix.recordedAt else {
            throw PostgresError(.decode, message: "row \(row) has an infinite recorded_at")
        }
        return FixKeyset(recordedAtMicros: recordedAt, latitude: fix.latitude, longitude: fix.longitude)
    }

    /// Rows per piece of a large read (`eachPiece`).
    static let pieceRows = 1_024

    /// Runs `statement` and hands its rows (at most `rowsMax`) to `body`. A small read is one
    /// result. A large one (the stays of 30 days read 8,640 fixes) goes through a cursor, FETCHed a
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
