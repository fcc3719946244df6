import CPQ

// COPY (query) TO STDOUT in binary format, read row by row as the rows arrive.
//
// Why: a result read with `execute` is parsed by libpq value by value into a PGresult (a copy of
// each value with its length), then read back with two or three calls per value. For a history
// page (8,640 fixes of 12 values) that was about 26 M of the server's 65 M instructions
// (docs/benchmarks.md). A binary COPY arrives as one message per row, which libpq hands over
// whole; its fields are read here in order. PostgreSQL's own cost per value is the same (one send
// function per value either way), and the rows stream as the executor finds them, with no FETCH
// round trips.
//
// The format (PostgreSQL's documentation, COPY, "Binary Format"); integers big-endian:
//
//   header   the signature `PGCOPY\n\377\r\n\0` (11 bytes), flags (32 bits; bit 16 says each
//            tuple carries an OID, which we never ask for; bits 17-31 are critical, unknown),
//            a header extension's length (32 bits) and that many bytes, skipped
//   tuple    a field count (16 bits), then per field a length (32 bits, -1 for NULL) and that
//            many bytes: the value in its type's binary send form
//   trailer  a field count of -1
//
// The server sends the header in the message of the first tuple (or of the trailer), then one
// message per tuple, the trailer last. What the reader checks, in order:
//   1. the first message begins with the signature and a header whose flags are 0;
//   2. every tuple has the field count the caller expects, and its fields end exactly where its
//      message ends (a tuple never spans messages);
//   3. nothing follows the trailer, and the COPY's result is a success.
// A violation is a `.decode` error. Column types are not sent: the caller's SQL fixes them, and
// each decoder checks a value's length.

/// One tuple of a binary COPY: its fields, read in order with `next()`. Points into libpq's
/// buffer for the message: valid only during the `copyOutBinary` callback that receives it.
public struct PostgresCopyRow {
    // Inlinable (`next` is called for every value of a page, from another module).
    @usableFromInline let bytes: UnsafeRawBufferPointer
    @usableFromInline var position = 0
    /// The tuple's number in the COPY, from 0.
    public let number: Int

    fileprivate init(_ bytes: UnsafeRawBufferPointer, number: Int) {
        self.bytes = bytes
        self.number = number
    }

    /// The next field's bytes, nil for NULL. The tuple was checked whole before it was handed
    /// over (rule 2), so only reading past its last field traps (a programmer error).
    @inlinable @inline(__always)
    public mutating func next() -> UnsafeRawBufferPointer? {
        precondition(position + 4 <= bytes.count, "PostgresCopyRow: read past the tuple's last field")
        let base = bytes.baseAddress.unsafelyUnwrapped + position
        let length = Int(Int32(bigEndian: base.loadUnaligned(as: Int32.self)))
        position += 4
        guard length >= 0 else { return nil }
        position += length
        // Within the tuple: `isWhole` checked every length before the row was handed over.
        return UnsafeRawBufferPointer(start: base + 4, count: length)
    }

    /// Whether `tuple` (after its field count) is `fieldCount` fields ending exactly at its end.
    /// Called for every row of a page (8,640 rows of 12 fields): positions stay within 0 ...
    /// `tuple.count` (each step is checked against what is left first), so the arithmetic needs
    /// no overflow checks and the loads no bounds checks.
    @inline(__always)
    fileprivate static func isWhole(_ tuple: UnsafeRawBufferPointer, fieldCount: Int) -> Bool {
        guard let base = tuple.baseAddress else { return fieldCount == 0 }
        let end = tuple.count
        var position = 0
        var left = fieldCount
        while left > 0 {
            guard end &- position >= 4 else { return false }
            let length = Int(Int32(bigEndian: (base + position).loadUnaligned(as: Int32.self)))
            position &+= 4
            if length >= 0 {
                guard length <= end &- position else { return false }
                position &+= length
            } else if length != -1 {
                return false
            }
            left &-= 1
        }
        return position == end
    }
}

extension PostgresConnection {
    /// The binary COPY signature, the first 11 bytes of the data.
    static let copySignature: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00]

    /// Runs `COPY (query) TO STDOUT (FORMAT binary)` and hands `body` each row as it arrives, its
    /// `fieldCount` fields read with `PostgresCopyRow.next()`; returns the number of rows.
    ///
    /// `query` is one SELECT without parameters (COPY takes none): values go in as literals
    /// (`PostgresValue.sqlLiteral`). It is one statement, so it sees one snapshot and resolves its
    /// tables once. When `body` throws, the rest of the data is read and dropped (the connection
    /// stays usable: bound the query with a LIMIT), then the error is rethrown.
    ///
    /// `settings` hold for this COPY alone: each is a `SET LOCAL` sent before it in the same query
    /// string, which PostgreSQL runs as one implicit transaction, so they end with it, in the same
    /// round trip. (Inside an explicit transaction they last until that ends.)
    @discardableResult
    public func copyOutBinary(
        query: String, fieldCount: Int, settings: [PostgresSetting] = [],
        _ body: (inout PostgresCopyRow) throws -> Void
    ) throws -> Int {
        let handle = try openHandle()
        let prelude = settings.map { $0.setLocal + "; " }.joined()
        let started = PQexec(handle, prelude + "COPY (" + query + ") TO STDOUT (FORMAT binary)")
        if let started, PQresultStatus(started) == PGRES_COPY_OUT {
            PQclear(started)
        } else {
            // An error (or, impossibly, another result): check throws with the server's fields.
            let result = try check(started, .statement)
            drainResults(handle)
            throw PostgresError(
                .statement, message: "COPY did not start (\(result.commandTag))", target: target)
        }
        var reader = CopyOutReader(fieldCount: fieldCount)
        var failure: (any Error)? = nil
        while true {
            var buffer: UnsafeMutablePointer<CChar>? = nil
            let length = PQgetCopyData(handle, &buffer, 0)
            if length == -1 { break }
            guard length > 0, let buffer else {
                drainResults(handle)
                throw PostgresError(
                    .statement, message: lastError, connectionBroken: !isAlive, target: target)
            }
            defer { PQfreemem(buffer) }
            guard failure == nil else { continue }
            do {
                try reader.read(UnsafeRawBufferPointer(start: buffer, count: Int(length)), body)
            } catch {
                failure = error
            }
        }
        // The COPY's own result, then nil: the connection is idle again.
        let ended = PQgetResult(handle)
        drainResults(handle)
        _ = try check(ended, .statement)
        if let failure { throw failure }
        guard reader.ended else {
            throw PostgresError(.decode, message: "the COPY data ended without its trailer", target: target)
        }
        return reader.rows
    }
}

/// The state of reading one binary COPY's messages (the rules at the top of this file).
struct CopyOutReader {
    let fieldCount: Int
    var headerRead = false
    var ended = false
    var rows = 0

    init(fieldCount: Int) {
        precondition(fieldCount > 0 && fieldCount <= Int(Int16.max), "a COPY row has 1 ... 32767 fields")
        self.fieldCount = fieldCount
    }

    /// Reads one CopyData message: the header first if not read yet, then one tuple or the trailer.
    mutating func read(_ message: UnsafeRawBufferPointer, _ body: (inout PostgresCopyRow) throws -> Void)
        throws
    {
        var message = message
        if !headerRead {
            message = try Self.afterHeader(message)
            headerRead = true
        }
        guard !ended else { throw Self.malformed("data after the trailer") }
        guard message.count >= 2 else { throw Self.malformed("a message without a field count") }
        let count = Int(Int16(bigEndian: message.loadUnaligned(as: Int16.self)))
        let tuple = UnsafeRawBufferPointer(rebasing: message[2...])
        if count == -1 {
            guard tuple.isEmpty else { throw Self.malformed("data after the trailer") }
            ended = true
            return
        }
        guard count == fieldCount, PostgresCopyRow.isWhole(tuple, fieldCount: fieldCount) else {
            throw Self.malformed("tuple \(rows) is not \(fieldCount) whole fields in its message")
        }
        var row = PostgresCopyRow(tuple, number: rows)
        rows += 1
        try body(&row)
    }

    /// The message after the header (rule 1).
    static func afterHeader(_ message: UnsafeRawBufferPointer) throws(PostgresError) -> UnsafeRawBufferPointer
    {
        let signature = PostgresConnection.copySignature
        guard message.count >= signature.count + 8, message.prefix(signature.count).elementsEqual(signature)
        else { throw malformed("no binary COPY signature") }
        let flags = UInt32(bigEndian: message.loadUnaligned(fromByteOffset: signature.count, as: UInt32.self))
        let extensionLength = Int(
            UInt32(bigEndian: message.loadUnaligned(fromByteOffset: signature.count + 4, as: UInt32.self)))
        guard flags == 0 else { throw malformed("header flags \(flags) (OIDs or an unknown critical flag)") }
        let start = signature.count + 8
        guard extensionLength <= message.count - start else {
            throw malformed("a header extension past the message")
        }
        return UnsafeRawBufferPointer(rebasing: message[(start + extensionLength)...])
    }

    static func malformed(_ what: String) -> PostgresError {
        PostgresError(.decode, message: "binary COPY data is malformed: \(what)")
    }
}

extension PostgresValue {
    /// The value as a SQL literal with its type (`42`, `'1.5'::float8`, `'2024-05-06 07:08:09.000000+00'::timestamptz`),
    /// `NULL` for nil: for a statement that takes no parameters, such as the query of a COPY. Exact:
    /// a double's text reads back as the same double, a time's to the microsecond. Numbers, booleans and
    /// times only: text goes as a parameter, never spliced into SQL.
    public static func sqlLiteral(_ value: PostgresValue?) -> String {
        guard let value else { return "NULL" }
        switch value {
        case .int64(let number): return "'\(number)'::bigint"
        case .double: return "'\(value.textForm)'::float8"
        case .bool(let flag): return flag ? "true" : "false"
        case .timestamp: return "'\(value.textForm)'::timestamptz"
        case .text, .bytes, .uuid, .array:
            preconditionFailure("sqlLiteral takes numbers, booleans and times only, not \(value)")
        }
    }
}

/// A run-time parameter of PostgreSQL's for one statement (`copyOutBinary`'s `settings`): a name
/// and a value from the program's own text, never from a request.
public struct PostgresSetting: Sendable, Equatable {
    public let name: String
    public let value: String

    /// `name` is a parameter's name (letters, digits, `_` and `.`), `value` a bare word or number.
    public init(_ name: String, _ value: String) {
        precondition(
            !name.isEmpty && name.utf8.allSatisfy { Self.isWordByte($0) || $0 == UInt8(ascii: ".") },
            "not a parameter's name: \(name)")
        precondition(
            !value.isEmpty && value.utf8.allSatisfy { Self.isWordByte($0) || $0 == UInt8(ascii: ".") },
            "not a bare value: \(value)")
        self.name = name
        self.value = value
    }

    /// The statement that sets it until the end of the transaction.
    public var setLocal: String { "SET LOCAL \(name) = \(value)" }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"):
            true
        default: false
        }
    }
}
