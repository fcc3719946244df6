import CPQ

/// Rows in PostgreSQL's binary COPY format: the `PGCOPY` header, then per row a 16-bit field count
/// and per field a 32-bit length (-1 for NULL) and the value in the type's binary wire form, all
/// big-endian; a -1 field count ends the data.
///
/// Why binary: the text form formats every number and timestamp to decimal text and the server
/// parses it back; the binary form is a byte copy on both sides. A field's width must match the
/// column's type exactly (`int64` for bigint, `int32` for integer, `int16` for smallint), so the
/// caller writes each column with the encoder its declared type names.
public struct BinaryCopyRows: CopyRowBuffer {
    public private(set) var bytes: [UInt8]

    /// `PGCOPY\n\377\r\n\0`, then a flags word and a header extension length, both 0.
    static let header: [UInt8] =
        [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]
    static let trailer: [UInt8] = [0xFF, 0xFF]
    /// Microseconds from 1970-01-01 (ours) to 2000-01-01 (PostgreSQL's binary timestamp epoch).
    static let postgresEpochMicros: Int64 = 946_684_800_000_000

    /// Starts with the header; `writeHeader: false` continues a stream whose header was sent.
    public init(writeHeader: Bool = true) {
        bytes = writeHeader ? Self.header : []
    }

    public mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }
    public mutating func reserveCapacity(_ count: Int) { bytes.reserveCapacity(count) }

    public mutating func beginRow(fieldCount: Int) { appendBigEndian(UInt16(fieldCount)) }
    public mutating func appendTrailer() { bytes.append(contentsOf: Self.trailer) }
    mutating func appendEnd() { appendTrailer() }

    public mutating func null() { appendBigEndian(UInt32(bitPattern: -1)) }

    /// bigint.
    public mutating func int64(_ value: Int64) {
        appendBigEndian(UInt32(8))
        appendBigEndian(UInt64(bitPattern: value))
    }
    /// integer.
    public mutating func int32(_ value: Int32) {
        appendBigEndian(UInt32(4))
        appendBigEndian(UInt32(bitPattern: value))
    }
    /// smallint.
    public mutating func int16(_ value: Int16) {
        appendBigEndian(UInt32(2))
        appendBigEndian(UInt16(bitPattern: value))
    }
    /// double precision: the IEEE 754 bits, so NaN and ±infinity go as they are.
    public mutating func float8(_ value: Double) {
        appendBigEndian(UInt32(8))
        appendBigEndian(value.bitPattern)
    }
    public mutating func bool(_ value: Bool) {
        appendBigEndian(UInt32(1))
        bytes.append(value ? 1 : 0)
    }
    /// uuid: its 16 bytes in text order.
    public mutating func uuid(high: UInt64, low: UInt64) {
        appendBigEndian(UInt32(16))
        appendBigEndian(high)
        appendBigEndian(low)
    }

    /// timestamptz: microseconds since 2000-01-01 UTC. A value so far before 1970 that the shift
    /// overflows goes as `Int64.min + 1`, which the server rejects as out of range, as it rejects
    /// the text form of such a time; `Int64.min` itself would be `-infinity`.
    public mutating func timestamp(micros: Int64) {
        let (shifted, overflow) = micros.subtractingReportingOverflow(Self.postgresEpochMicros)
        int64(overflow ? Int64.min + 1 : shifted)
    }

    /// bytea, or any value already in its binary form: the bytes as they are.
    public mutating func bytea(_ value: [UInt8]) {
        appendBigEndian(UInt32(value.count))
        bytes.append(contentsOf: value)
    }

    /// A bytea of `count` bytes that `write` appends to the rows' bytes in place (no array of its
    /// own per value); it must append exactly `count`.
    public mutating func bytea(count: Int, _ write: (inout [UInt8]) -> Void) {
        appendBigEndian(UInt32(count))
        let start = bytes.count
        write(&bytes)
        precondition(
            bytes.count - start == count, "bytea(count:) wrote \(bytes.count - start) bytes, not \(count)")
    }

    /// A bare big-endian 32-bit word, for the inside of a composite value (an array's header).
    mutating func word(_ value: UInt32) { appendBigEndian(value) }

    /// text, as UTF-8. A NUL is refused here, as the text form refuses it (the server would too).
    public mutating func text(_ value: String) throws(PostgresError) {
        let utf8 = Array(value.utf8)
        guard !utf8.contains(0) else {
            throw PostgresError(.parameter, message: "a text value for COPY contains a NUL character")
        }
        appendBigEndian(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
    }

    @inline(__always)
    private mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }
}

extension PostgresConnection {
    /// Loads rows with `COPY table (columns) FROM STDIN (FORMAT binary)`; returns the rows copied.
    ///
    /// `encode` writes one row of `rows` (`beginRow` with `columns.count`, then one field per
    /// column in order); the header, the trailer and the chunking are done here. As with `copyIn`,
    /// all rows are one statement: if any is rejected none is stored.
    @discardableResult
    public func copyInBinary<Rows: Sequence>(
        table: String, columns: [String], rows: Rows,
        encode: (Rows.Element, inout BinaryCopyRows) throws(PostgresError) -> Void
    ) throws(PostgresError) -> Int {
        try copyFromStdin(
            table: table, columns: columns, options: " (FORMAT binary)", rows: rows, buffer: BinaryCopyRows(),
            encode: encode)
    }
}
