import CPQ

#if canImport(Glibc)
    import Glibc
#endif

/// One libpq connection (`PGconn`), used by one thread at a time.
///
/// Not Sendable: libpq allows a PGconn on any thread but never on two at once, and a statement is a
/// send followed by reads that must not interleave with another's. Share a connection through
/// `PostgresClient`, which holds it behind a lock and reopens it when it breaks.
///
/// Every statement with values is parameterised (`PQexecParams`): SQL text is never assembled from
/// values. Each connection runs with client_encoding UTF8, DateStyle ISO, TimeZone UTC and
/// bytea_output hex, which the result decoders rely on.
public final class PostgresConnection {
    /// The `PGconn`; nil once closed.
    private(set) var handle: OpaquePointer?
    /// "PostgreSQL at /run/findmy (database findmy, user findmy)", for messages; never a password.
    public let target: String

    /// Connects with a conninfo string (`host=/path/to/socketdir dbname=findmy user=findmy`) or a URL
    /// (`postgresql://user@host:5432/db?sslmode=require`). Blocks until connected or failed.
    public init(_ conninfo: String) throws(PostgresError) {
        // Later keywords override the expanded conninfo, so the encoding cannot be changed by it.
        let keywords = ["fallback_application_name", "dbname", "client_encoding"]
        let values = ["findmy", conninfo, "UTF8"]
        let connection = withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        guard let connection else {
            throw PostgresError(
                .connect, message: "out of memory", connectionBroken: true, target: "PostgreSQL")
        }
        handle = connection
        target = describe(connection)
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = lastError
            close()
            throw PostgresError(.connect, message: message, connectionBroken: true, target: target)
        }
        PQsetNoticeProcessor(connection, ignoreNotice, nil)
        try executeScript("SET DateStyle = 'ISO'; SET TimeZone = 'UTC'; SET bytea_output = 'hex'")
    }

    deinit { close() }

    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    /// False once the connection is known to be broken. Reads, without sending anything, whatever the
    /// server sent unasked: after a restart that is a FATAL message and the end of the stream, so a
    /// caller that checks first reconnects instead of losing its next statement.
    public var isAlive: Bool {
        guard let handle, PQstatus(handle) == CONNECTION_OK else { return false }
        for _ in 0..<3 where PQconsumeInput(handle) == 1 {}
        return PQstatus(handle) == CONNECTION_OK
    }

    /// Open, outside any transaction, with no statement in flight: fit for another borrower.
    public var isIdle: Bool {
        guard let handle else { return false }
        return PQtransactionStatus(handle) == PQTRANS_IDLE
    }

    /// Runs one statement with `$1, $2, ...` parameters (nil is NULL). `PQexecParams`.
    ///
    /// `format: .binary` asks for every column in PostgreSQL's binary form, read with the
    /// `binary...` accessors of `PostgresResult`: the server formats nothing and the client parses
    /// no text, which is most of the cost of a large read (8,640 fixes of 12 values each).
    @discardableResult
    public func execute(
        _ sql: String, _ parameters: [PostgresValue?] = [], format: PostgresResultFormat = .text
    ) throws(PostgresError) -> PostgresResult {
        let handle = try openHandle()
        let result = try withEncoded(parameters) { count, types, values, lengths, formats in
            PQexecParams(handle, sql, count, types, values, lengths, formats, format.rawValue)
        }
        return try check(result, .statement)
    }

    /// Sends one statement like `execute` without waiting for its result (`PQsendQueryParams`), so
    /// that PostgreSQL works on it while the caller works on the previous one. `receive()` must
    /// read its result before anything else runs on this connection.
    public func send(
        _ sql: String, _ parameters: [PostgresValue?] = [], format: PostgresResultFormat = .text
    ) throws(PostgresError) {
        let handle = try openHandle()
        let sent = try withEncoded(parameters) { count, types, values, lengths, formats in
            PQsendQueryParams(handle, sql, count, types, values, lengths, formats, format.rawValue)
        }
        guard sent == 1 else {
            throw PostgresError(
                .statement, message: lastError, connectionBroken: PQstatus(handle) != CONNECTION_OK,
                target: target)
        }
    }

    /// The result of the statement `send` sent, once it has all arrived.
    public func receive() throws(PostgresError) -> PostgresResult {
        let handle = try openHandle()
        var first: OpaquePointer? = nil
        while let next = PQgetResult(handle) {
            if first == nil { first = next } else { PQclear(next) }
        }
        return try check(first, .statement)
    }

    private func withEncoded<R>(
        _ parameters: [PostgresValue?],
        _ body: (
            Int32, UnsafePointer<Oid>?, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?,
            UnsafePointer<Int32>?
        ) -> R
    ) throws(PostgresError) -> R {
        precondition(parameters.count <= Int(UInt16.max), "PostgreSQL takes at most 65535 parameters")
        var encoded = EncodedParameters()
        defer { encoded.release() }
        for parameter in parameters {
            try encoded.append(parameter)
        }
        return encoded.values.withUnsafeBufferPointer { values in
            encoded.types.withUnsafeBufferPointer { types in
                encoded.lengths.withUnsafeBufferPointer { lengths in
                    encoded.formats.withUnsafeBufferPointer { formats in
                        body(
                            Int32(parameters.count), types.baseAddress, values.baseAddress,
                            lengths.baseAddress,
                            formats.baseAddress)
                    }
                }
            }
        }
    }

    /// Runs one or more `;`-separated statements without parameters (`PQexec`), for migrations and
    /// session settings. Stops at the first error; returns the last statement's result.
    @discardableResult
    public func simpleQuery(_ sql: String) throws(PostgresError) -> PostgresResult {
        try check(PQexec(try openHandle(), sql), .statement)
    }

    /// `simpleQuery` for scripts whose results nobody reads.
    public func executeScript(_ sql: String) throws(PostgresError) {
        try simpleQuery(sql)
    }

    /// Runs `body` between BEGIN and COMMIT; ROLLBACK when it throws (the error is rethrown).
    /// A COMMIT that the server turns into a ROLLBACK (a statement failed and `body` caught it)
    /// throws too, so a caller never believes a rolled-back transaction was committed.
    @discardableResult
    public func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let status = handle.map { PQtransactionStatus($0) }
        precondition(
            status != PQTRANS_INTRANS && status != PQTRANS_INERROR, "transaction inside a transaction")
        try executeScript("BEGIN")
        let value: T
        do {
            value = try body(self)
        } catch {
            if isAlive { try? executeScript("ROLLBACK") }
            throw error
        }
        let commit = try simpleQuery("COMMIT")
        guard commit.commandTag != "ROLLBACK" else {
            throw PostgresError(
                .statement,
                message: "the transaction was rolled back, not committed, because a statement in it failed",
                target: target)
        }
        return value
    }

    /// `name` as a quoted SQL identifier (`"fixes"`, `"a""b"`); dots separate schema and name.
    /// For identifiers written in our code, which SQL cannot take as parameters.
    public static func quoteIdentifier(_ name: String) -> String {
        name.split(separator: ".", omittingEmptySubsequences: false)
            .map { "\"" + $0.replacing("\"", with: "\"\"") + "\"" }
            .joined(separator: ".")
    }

    /// `value` quoted for a conninfo string: `'/path with spaces/it\'s'`.
    public static func conninfoValue(_ value: String) -> String {
        "'" + value.replacing("\\", with: "\\\\").replacing("'", with: "\\'") + "'"
    }

    func openHandle() throws(PostgresError) -> OpaquePointer {
        guard let handle else {
            throw PostgresError(
                .statement, message: "the connection is closed", connectionBroken: true, target: target)
        }
        return handle
    }

    var lastError: String {
        guard let handle, let message = PQerrorMessage(handle) else { return "unknown error" }
        return trimmed(String(cString: message))
    }

    /// Wraps a result, or turns it into a PostgresError carrying the server's fields.
    func check(_ result: OpaquePointer?, _ kind: PostgresError.Kind) throws(PostgresError) -> PostgresResult {
        let broken = handle.map { PQstatus($0) != CONNECTION_OK } ?? true
        guard let result else {
            throw PostgresError(kind, message: lastError, connectionBroken: broken, target: target)
        }
        let status = PQresultStatus(result)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_COPY_IN {
            return PostgresResult(result)
        }
        defer { PQclear(result) }
        func field(_ code: Character) -> String? {
            PQresultErrorField(result, Int32(code.asciiValue!)).map { trimmed(String(cString: $0)) }
        }
        let message =
            field("M") ?? PQresultErrorMessage(result).map { trimmed(String(cString: $0)) } ?? lastError
        throw PostgresError(
            kind, message: message.isEmpty ? lastError : message, sqlState: field("C"), detail: field("D"),
            hint: field("H"), connectionBroken: broken, target: target)
    }
}

/// How the server sends the values of a result (`PQexecParams`' resultFormat).
public enum PostgresResultFormat: Int32, Sendable {
    /// Text, as `psql` shows it; the `PostgresResult` accessors without a prefix decode it.
    case text = 0
    /// Each type's binary send form (big-endian integers, IEEE doubles, microseconds since
    /// 2000-01-01 for timestamps, UTF-8 for text); read with the `binary...` accessors.
    case binary = 1
}

/// Server notices (`NOTICE: relation already exists, skipping`) would go to standard error by
/// default; they are expected noise for migrations.
private func ignoreNotice(_: UnsafeMutableRawPointer?, _: UnsafePointer<CChar>?) {}

private func describe(_ connection: OpaquePointer) -> String {
    let host = PQhost(connection).map { String(cString: $0) } ?? ""
    let port = PQport(connection).map { String(cString: $0) } ?? ""
    let database = PQdb(connection).map { String(cString: $0) } ?? ""
    let user = PQuser(connection).map { String(cString: $0) } ?? ""
    let place = host.hasPrefix("/") ? "socket directory \(host)" : "\(host):\(port)"
    return "PostgreSQL at \(place) (database \(database), user \(user))"
}

func trimmed(_ text: String) -> String {
    var text = Substring(text)
    while let last = text.last, last.isWhitespace { text.removeLast() }
    return String(text)
}

private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let pointers = strings.map { UnsafePointer(strdup($0)) } + [nil]
    defer { for pointer in pointers { free(UnsafeMutablePointer(mutating: pointer)) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Parameter arrays for PQexecParams; the values are malloc'ed copies, freed by `free()`.
private struct EncodedParameters {
    var values: [UnsafePointer<CChar>?] = []
    var types: [Oid] = []
    var lengths: [Int32] = []
    var formats: [Int32] = []

    mutating func append(_ parameter: PostgresValue?) throws(PostgresError) {
        types.append(parameter?.typeOID ?? 0)
        switch parameter {
        case nil:
            values.append(nil)
            lengths.append(0)
            formats.append(0)
        case let value?:
            if let binary = try value.binaryForm() {
                let copy = malloc(max(binary.count, 1))!
                binary.withUnsafeBytes {
                    if let base = $0.baseAddress { copy.copyMemory(from: base, byteCount: $0.count) }
                }
                values.append(UnsafePointer(copy.assumingMemoryBound(to: CChar.self)))
                lengths.append(Int32(binary.count))
                formats.append(1)
                return
            }
            let text = value.textForm
            guard !text.utf8.contains(0) else {
                throw PostgresError(
                    .parameter,
                    message:
                        "parameter $\(values.count + 1) contains a NUL character, which PostgreSQL text cannot hold"
                )
            }
            values.append(UnsafePointer(strdup(text)))
            lengths.append(0)
            formats.append(0)
        }
    }

    func release() {
        for case let value? in values { free(UnsafeMutablePointer(mutating: value)) }
    }
}
