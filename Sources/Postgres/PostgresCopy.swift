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
        let handle = try openHandle()
        let sql =
            "COPY \(Self.quoteIdentifier(table)) (\(columns.map(Self.quoteIdentifier).joined(separator: ", "))) "
            + "FROM STDIN"
        _ = try check(PQexec(handle, sql), .copy)
        var buffer = [UInt8]()
        buffer.reserveCapacity(Self.copyChunkBytesMax + 4096)
        var rowNumber = 0
        do throws(PostgresError) {
            for row in rows {
                precondition(
                    row.count == columns.count,
                    "COPY row has \(row.count) values for \(columns.count) columns")
                rowNumber += 1
                try appendCopyRow(row, rowNumber, to: &buffer)
                if buffer.count >= Self.copyChunkBytesMax {
                    try putCopyData(handle, buffer)
                    buffer.removeAll(keepingCapacity: true)
                }
            }
            if !buffer.isEmpty { try putCopyData(handle, buffer) }
        } catch {
            // Ending the COPY with an error message makes the server roll it back; the connection
            // stays usable once the result is read.
            _ = PQputCopyEnd(handle, "findmy aborted the COPY: \(error.message)")
            drainResults(handle)
            throw error
        }
        guard PQputCopyEnd(handle, nil) == 1 else {
            throw PostgresError(.copy, message: lastError, connectionBroken: !isAlive, target: target)
        }
        // The COPY's own result comes first; reading on to nil leaves the connection idle.
        let result = try check(PQgetResult(handle), .copy)
        drainResults(handle)
        return result.affectedRows
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

    private func appendCopyRow(_ row: [PostgresValue?], _ rowNumber: Int, to buffer: inout [UInt8])
        throws(PostgresError)
    {
        for (index, value) in row.enumerated() {
            if index > 0 { buffer.append(UInt8(ascii: "\t")) }
            guard let value else {
                buffer.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "N")])
                continue
            }
            for byte in value.textForm.utf8 {
                // These are ASCII, so they never occur inside a multi-byte UTF-8 sequence.
                switch byte {
                case 0:
                    throw PostgresError(
                        .parameter,
                        message: "COPY row \(rowNumber) column \(index + 1) contains a NUL character")
                case UInt8(ascii: "\\"): buffer.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                case UInt8(ascii: "\t"): buffer.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
                case UInt8(ascii: "\n"): buffer.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
                case UInt8(ascii: "\r"): buffer.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
                default: buffer.append(byte)
                }
            }
        }
        buffer.append(UInt8(ascii: "\n"))
    }
}
