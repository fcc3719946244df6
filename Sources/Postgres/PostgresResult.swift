import CPQ
import Crypto

/// The rows of one statement, read in text format and decoded on access.
///
/// Owns a `PGresult`, freed with `PQclear` when the last reference goes. libpq never changes a
/// PGresult after creating it and documents it as safe to read from any thread, hence Sendable.
/// Rows and columns are 0-based; an index out of range, or a column name the statement did not
/// select, is a programmer error and traps. A value of another type than asked throws `.decode`.
public final class PostgresResult: @unchecked Sendable {
    private let result: OpaquePointer
    public let rowCount: Int
    public let columnNames: [String]
    /// Each column's type and whether it was sent in binary, read once: the binary accessors run
    /// for every value of a large read (14 columns x 8,640 rows of a history page).
    private let columnTypes: [Oid]
    private let columnIsBinary: [Bool]

    init(_ result: OpaquePointer) {
        self.result = result
        rowCount = Int(PQntuples(result))
        let columns = 0..<PQnfields(result)
        columnNames = columns.map { PQfname(result, $0).map { String(cString: $0) } ?? "" }
        columnTypes = columns.map { PQftype(result, $0) }
        columnIsBinary = columns.map { PQfformat(result, $0) == 1 }
    }

    deinit { PQclear(result) }

    /// Rows inserted, updated, deleted, copied or selected, from the command tag (`PQcmdTuples`).
    public var affectedRows: Int { Int(String(cString: PQcmdTuples(result))) ?? 0 }
    /// The command tag: `INSERT 0 1`, `COPY 10000`, ...
    public var commandTag: String { String(cString: PQcmdStatus(result)) }

    public func columnIndex(_ name: String) -> Int {
        guard let index = columnNames.firstIndex(of: name) else {
            preconditionFailure("no column \(name) in result with columns \(columnNames)")
        }
        return index
    }

    public func isNull(_ row: Int, _ column: Int) -> Bool {
        check(row, column)
        return PQgetisnull(result, Int32(row), Int32(column)) == 1
    }

    public func string(_ row: Int, _ column: Int) -> String? {
        guard !isNull(row, column) else { return nil }
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        return PQgetvalue(result, Int32(row), Int32(column)).withMemoryRebound(
            to: UInt8.self, capacity: length
        ) {
            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }

    public func int64(_ row: Int, _ column: Int) throws(PostgresError) -> Int64? {
        try decode(row, column, "bigint") { Int64($0) }
    }

    public func double(_ row: Int, _ column: Int) throws(PostgresError) -> Double? {
        try decode(row, column, "double precision") { Double($0) }
    }

    public func bool(_ row: Int, _ column: Int) throws(PostgresError) -> Bool? {
        try decode(row, column, "boolean") { $0 == "t" ? true : $0 == "f" ? false : nil }
    }

    /// A `timestamptz` as microseconds since the epoch, exactly.
    public func timestampMicros(_ row: Int, _ column: Int) throws(PostgresError) -> Int64? {
        try decode(row, column, "timestamptz") { PostgresTimestamp.micros(text: $0) }
    }

    /// A `bytea` in the hex output format (`\x0a1b`), which every connection sets.
    public func bytes(_ row: Int, _ column: Int) throws(PostgresError) -> [UInt8]? {
        try decode(row, column, "bytea (hex format)") { decodeHex($0) }
    }

    public func string(_ row: Int, _ column: String) -> String? { string(row, columnIndex(column)) }
    public func isNull(_ row: Int, _ column: String) -> Bool { isNull(row, columnIndex(column)) }
    public func int64(_ row: Int, _ column: String) throws(PostgresError) -> Int64? {
        try int64(row, columnIndex(column))
    }
    public func double(_ row: Int, _ column: String) throws(PostgresError) -> Double? {
        try double(row, columnIndex(column))
    }
    public func bool(_ row: Int, _ column: String) throws(PostgresError) -> Bool? {
        try bool(row, columnIndex(column))
    }
    public func timestampMicros(_ row: Int, _ column: String) throws(PostgresError) -> Int64? {
        try timestampMicros(row, columnIndex(column))
    }
    public func bytes(_ row: Int, _ column: String) throws(PostgresError) -> [UInt8]? {
        try bytes(row, columnIndex(column))
    }

    // MARK: binary format

    /// The accessors below read a result of `execute(..., format: .binary)` straight from the bytes
    /// `PQgetvalue` points at, without a `String` in between. Each checks the column's type (`PQftype`)
    /// and the value's length, and throws `.decode` when they are not what it reads.

    /// A `bigint`, `integer` or `smallint`.
    public func binaryInt64(_ row: Int, _ column: Int) throws(PostgresError) -> Int64? {
        try binary(row, column, "bigint, integer or smallint") { type, bytes in
            switch (type, bytes.count) {
            case (PostgresTypeOID.int8, 8): Int64(bigEndian: bytes.loadUnaligned(as: Int64.self))
            case (PostgresTypeOID.int4, 4): Int64(Int32(bigEndian: bytes.loadUnaligned(as: Int32.self)))
            case (PostgresTypeOID.int2, 2): Int64(Int16(bigEndian: bytes.loadUnaligned(as: Int16.self)))
            default: nil
            }
        }
    }

    /// A `double precision`.
    public func binaryDouble(_ row: Int, _ column: Int) throws(PostgresError) -> Double? {
        try binary(row, column, "double precision") { type, bytes in
            guard type == PostgresTypeOID.float8, bytes.count == 8 else { return nil }
            return Double(bitPattern: UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)))
        }
    }

    public func binaryBool(_ row: Int, _ column: Int) throws(PostgresError) -> Bool? {
        try binary(row, column, "boolean") { type, bytes in
            guard type == PostgresTypeOID.bool, bytes.count == 1 else { return nil }
            return bytes[0] != 0
        }
    }

    /// A `timestamptz` as microseconds since the Unix epoch. PostgreSQL sends microseconds since
    /// 2000-01-01 00:00:00 UTC; `infinity` and `-infinity` (Int64.max and .min) are refused.
    public func binaryTimestampMicros(_ row: Int, _ column: Int) throws(PostgresError) -> Int64? {
        try binary(row, column, "timestamptz") { type, bytes in
            guard type == PostgresTypeOID.timestamptz, bytes.count == 8 else { return nil }
            let sincePostgresEpoch = Int64(bigEndian: bytes.loadUnaligned(as: Int64.self))
            guard sincePostgresEpoch != .max && sincePostgresEpoch != .min else { return nil }
            // Times after about 292277 AD (PostgreSQL keeps them) do not fit: nil rather than a trap.
            let (micros, overflow) = sincePostgresEpoch.addingReportingOverflow(
                PostgresTypeOID.postgresEpochMicros)
            return overflow ? nil : micros
        }
    }

    /// Calls `body` with the UTF-8 bytes of a `text` value (valid only during the call); nil for NULL.
    public func withBinaryText<T>(_ row: Int, _ column: Int, _ body: (UnsafeBufferPointer<UInt8>) -> T)
        throws(PostgresError) -> T?
    {
        try binary(row, column, "text") { type, bytes in
            guard type == PostgresTypeOID.text else { return nil }
            return body(bytes.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// The UTF-8 bytes of a `text` value, pointing into the result: valid while the result lives,
    /// so the caller must keep it alive. Empty for NULL.
    public func binaryText(_ row: Int, _ column: Int) throws(PostgresError) -> UnsafeBufferPointer<UInt8> {
        try withBinaryText(row, column) { $0 } ?? UnsafeBufferPointer(start: nil, count: 0)
    }

    // MARK: binary format, a column checked once

    /// Throws `.decode` unless `column` was sent in binary as `type`: a reader of many rows checks
    /// each column once, then reads its values with `binaryBytes`.
    public func requireBinary(_ column: Int, _ type: PostgresBinaryType) throws(PostgresError) {
        precondition(column >= 0 && column < columnNames.count, "column \(column) out of range")
        guard columnIsBinary[column], columnTypes[column] == type.rawValue else {
            throw PostgresError(
                .decode,
                message:
                    "column \(columnNames[column]) is of type oid \(columnTypes[column])\(columnIsBinary[column] ? "" : " in text"), not \(type) in binary"
            )
        }
    }

    /// The bytes of a value (valid while the result lives), nil for NULL, for a column checked with
    /// `requireBinary`: no check of the type per value, which was most of the cost of reading a
    /// history page's 100,000 values one accessor at a time. `PostgresBinaryType` decodes them.
    public func binaryBytes(_ row: Int, _ column: Int) -> UnsafeRawBufferPointer? {
        check(row, column)
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        if length == 0 && PQgetisnull(result, Int32(row), Int32(column)) == 1 { return nil }
        return UnsafeRawBufferPointer(start: PQgetvalue(result, Int32(row), Int32(column)), count: length)
    }

    private func binary<T>(
        _ row: Int, _ column: Int, _ typeName: String, _ parse: (Oid, UnsafeRawBufferPointer) -> T?
    ) throws(PostgresError) -> T? {
        check(row, column)
        precondition(columnIsBinary[column], "column \(column) was not read in binary format")
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        // A NULL has length 0, and so has an empty text: only then is PQgetisnull worth a call.
        if length == 0 && PQgetisnull(result, Int32(row), Int32(column)) == 1 { return nil }
        let bytes = UnsafeRawBufferPointer(
            start: PQgetvalue(result, Int32(row), Int32(column)), count: length)
        guard let value = parse(columnTypes[column], bytes) else {
            throw PostgresError(
                .decode,
                message:
                    "column \(columnNames[column]) row \(row) holds \(length) bytes of type oid \(columnTypes[column]), not \(typeName)"
            )
        }
        return value
    }

    private func check(_ row: Int, _ column: Int) {
        precondition(row >= 0 && row < rowCount, "row \(row) out of range 0..<\(rowCount)")
        precondition(column >= 0 && column < columnNames.count, "column \(column) out of range")
    }

    private func decode<T>(_ row: Int, _ column: Int, _ type: String, _ parse: (String) -> T?)
        throws(PostgresError) -> T?
    {
        guard let text = string(row, column) else { return nil }
        guard let value = parse(text) else {
            throw PostgresError(
                .decode,
                message: "column \(columnNames[column]) row \(row) holds '\(text.prefix(64))', not \(type)")
        }
        return value
    }
}

/// A column type read in binary by `requireBinary` and `binaryBytes`, by its OID (`pg_type.oid`),
/// with the decoders of its values: each returns nil for bytes of another length than the type's.
// The decoders are inlinable: a history page decodes 100,000 values in another module.
public enum PostgresBinaryType: UInt32, Sendable {
    case bool = 16
    case int8 = 20
    case int2 = 21
    case int4 = 23
    case text = 25
    case float8 = 701
    case timestamptz = 1184

    @inlinable @inline(__always)
    public static func float8(_ bytes: UnsafeRawBufferPointer) -> Double? {
        guard bytes.count == 8 else { return nil }
        return Double(bitPattern: UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)))
    }

    @inlinable @inline(__always)
    public static func int2(_ bytes: UnsafeRawBufferPointer) -> Int16? {
        guard bytes.count == 2 else { return nil }
        return Int16(bigEndian: bytes.loadUnaligned(as: Int16.self))
    }

    @inlinable @inline(__always)
    public static func bool(_ bytes: UnsafeRawBufferPointer) -> Bool? {
        guard bytes.count == 1 else { return nil }
        return bytes[0] != 0
    }

    /// Microseconds since the Unix epoch, as `PostgresResult.binaryTimestampMicros`; nil also for
    /// the infinities and for times that do not fit.
    @inlinable @inline(__always)
    public static func timestampMicros(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard bytes.count == 8 else { return nil }
        let sincePostgresEpoch = Int64(bigEndian: bytes.loadUnaligned(as: Int64.self))
        guard sincePostgresEpoch != .max && sincePostgresEpoch != .min else { return nil }
        // `PostgresTypeOID.postgresEpochMicros`, written out: inlinable code sees public names only.
        let (micros, overflow) = sincePostgresEpoch.addingReportingOverflow(946_684_800_000_000)
        return overflow ? nil : micros
    }
}

/// The type OIDs of the binary accessors (`pg_type.oid`, fixed in every PostgreSQL).
enum PostgresTypeOID {
    static let bool: Oid = 16
    static let int8: Oid = 20
    static let int2: Oid = 21
    static let int4: Oid = 23
    static let text: Oid = 25
    static let float8: Oid = 701
    static let timestamptz: Oid = 1184
    /// 2000-01-01 00:00:00 UTC, PostgreSQL's epoch, in microseconds since the Unix epoch.
    static let postgresEpochMicros: Int64 = 946_684_800_000_000
}

/// `\x` and hex digits (either case), PostgreSQL's `bytea` hex output format.
private func decodeHex(_ text: String) -> [UInt8]? {
    guard text.hasPrefix("\\x") else { return nil }
    return Hex.decode(String(text.dropFirst(2)))
}
