import CPQ

extension PostgresConnection {
    /// Bytes buffered before each `PQputCopyData`: large enough to amortise the call, small enough
    /// that a bulk load never holds much more than one chunk of encoded rows in memory.
    public static let copyChunkBytesMax = 256 * 1024

    /// Loads `rows` with `COPY table (columns) FROM STDIN` in text format; returns the rows copied.
    ///
    /// `table` and `columns` are identifiers from our code, quoted here (so case is kept; a dot
    /// separates schema and table). Each row has one value per column, nil for NULL. Text format
    /// escaping: backslash, tab, newline and carriage return get a backslash, NULL is `\N`, so a
    /// value that merely looks like `\N` stays text. All rows are one statement: if any is rejected
    /// (a constraint, a bad value) none is stored.
    @discardableResult
    public func copyIn<Rows: Sequence<[PostgresValue?]>>(table: String, columns: [String], rows: Rows)
        throws(PostgresError) -> Int
    {
        var rowNumber = 0
        return try copyFromStdin(
            table: table, columns: columns, options: "", rows: rows, buffer: TextCopyRows()
        ) { (row, buffer) throws(PostgresError) in
            precondition(
                row.count == columns.count, "COPY row has \(row.count) values for \(columns.count) columns")
            rowNumber += 1
            try buffer.append(row, rowNumber)
        }
    }

    /// The one COPY FROM STDIN loop of both formats: starts the COPY, sends the rows `encode`
    /// writes into `buffer` in chunks of about `copyChunkBytesMax`, ends the data (the format's
    /// trailer) and reads the result until the connection is idle again. Returns the rows copied.
    ///
    /// A failure while encoding or sending ends the COPY with an error message, which makes the
    /// server roll it back; the connection stays usable once its results are read.
    func copyFromStdin<Rows: Sequence, Buffer: CopyRowBuffer>(
        table: String, columns: [String], options: String, rows: Rows, buffer initial: Buffer,
        encode: (Rows.Element, inout Buffer) throws(PostgresError) -> Void
    ) throws(PostgresError) -> Int {
        let handle = try openHandle()
        let sql =
            "COPY \(Self.quoteIdentifier(table)) (\(columns.map(Self.quoteIdentifier).joined(separator: ", "))) "
            + "FROM STDIN" + options
        _ = try check(PQexec(handle, sql), .copy)
        var buffer = initial
        buffer.reserveCapacity(Self.copyChunkBytesMax + 4096)
        do throws(PostgresError) {
            for row in rows {
                try encode(row, &buffer)
                if buffer.bytes.count >= Self.copyChunkBytesMax {
                    try putCopyData(handle, buffer.bytes)
                    buffer.removeAll()
                }
            }
            buffer.appendEnd()
            if !buffer.bytes.isEmpty { try putCopyData(handle, buffer.bytes) }
        } catch {
            _ = PQputCopyEnd(handle, "findmy aborted the COPY: \(error.message)")
            drainResults(handle)
            throw error
        }
        guard PQputCopyEnd(handle, nil) == 1 else {
            drainResults(handle)
            throw PostgresError(.copy, message: lastError, connectionBroken: !isAlive, target: target)
        }
        // The COPY's own result comes first; reading on to nil leaves the connection idle, also
        // when the COPY failed (check throws after the drain).
        let first = PQgetResult(handle)
        drainResults(handle)
        return try check(first, .copy).affectedRows
    }

    func putCopyData(_ handle: OpaquePointer, _ buffer: [UInt8]) throws(PostgresError) {
        let sent = buffer.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) {
                PQputCopyData(handle, $0.baseAddress, Int32(bytes.count))
            }
        }
        guard sent == 1 else {
            throw PostgresError(
                .copy, message: lastError, connectionBroken: PQstatus(handle) != CONNECTION_OK, target: target
            )
        }
    }

    func drainResults(_ handle: OpaquePointer) {
        while let result = PQgetResult(handle) { PQclear(result) }
    }
}

/// What `copyFromStdin` needs of a format's row buffer.
protocol CopyRowBuffer {
    var bytes: [UInt8] { get }
    mutating func reserveCapacity(_ count: Int)
    /// Empties the buffer after a chunk was sent (the header, once sent, is not written again).
    mutating func removeAll()
    /// Appends what ends the data: the binary trailer; nothing for text.
    mutating func appendEnd()
}

/// Rows in COPY's text format: tab-separated values, one row a line.
struct TextCopyRows: CopyRowBuffer {
    private(set) var bytes: [UInt8] = []

    mutating func reserveCapacity(_ count: Int) { bytes.reserveCapacity(count) }
    mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }
    mutating func appendEnd() {}

    mutating func append(_ row: [PostgresValue?], _ rowNumber: Int) throws(PostgresError) {
        for (index, value) in row.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: "\t")) }
            guard let value else {
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "N")])
                continue
            }
            for byte in value.textForm.utf8 {
                // These are ASCII, so they never occur inside a multi-byte UTF-8 sequence.
                switch byte {
                case 0:
                    throw PostgresError(
                        .parameter,
                        message: "COPY row \(rowNumber) column \(index + 1) contains a NUL character")
                case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                case UInt8(ascii: "\t"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
                case UInt8(ascii: "\n"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
                case UInt8(ascii: "\r"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
                default: bytes.append(byte)
                }
            }
        }
        bytes.append(UInt8(ascii: "\n"))
    }
}
