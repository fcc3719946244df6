/// A failure reported by PostgreSQL or by libpq, worded so the operator knows what to change.
///
/// `sqlState` is the five-character SQLSTATE the server sent (`PQresultErrorField(PG_DIAG_SQLSTATE)`);
/// it is nil when the failure happened on our side of the socket (cannot connect, connection lost,
/// a value that cannot be decoded). Compare it with the constants below, never with `message`.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The connection could not be established.
        case connect
        /// The server rejected a statement, or the connection failed while running it.
        case statement
        /// A COPY could not be sent or was rejected.
        case copy
        /// A parameter cannot be sent (PostgreSQL text cannot hold a NUL character).
        case parameter
        /// A result value is not of the type asked for.
        case decode
        /// A pool's admission check refused to lend a connection (`PostgresPool.admission`): the
        /// message says why (the projection is not this log's, say). No server was asked.
        case refused
    }

    public var kind: Kind
    public var sqlState: String?
    /// The primary message, without the "ERROR:" prefix and without a trailing newline.
    public var message: String
    public var detail: String?
    public var hint: String?
    /// True when the connection can no longer be used (PQstatus is not CONNECTION_OK): open a new one.
    public var connectionBroken: Bool
    /// Where: "PostgreSQL at /run/findmy (database findmy, user findmy)".
    public var target: String

    public init(
        _ kind: Kind, message: String, sqlState: String? = nil, detail: String? = nil, hint: String? = nil,
        connectionBroken: Bool = false, target: String = ""
    ) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.connectionBroken = connectionBroken
        self.target = target
    }

    public static let uniqueViolation = "23505"
    public static let foreignKeyViolation = "23503"
    public static let syntaxError = "42601"
    public static let undefinedTable = "42P01"
    public static let serializationFailure = "40001"
    public static let deadlockDetected = "40P01"
    public static let adminShutdown = "57P01"

    public var description: String {
        var text: String
        switch kind {
        case .connect: text = "cannot connect to \(target): \(message)"
        case .statement: text = "statement failed on \(target): \(message)"
        case .copy: text = "COPY failed on \(target): \(message)"
        case .parameter: text = "cannot send parameter: \(message)"
        case .decode: text = "cannot decode result: \(message)"
        case .refused: text = "not reading \(target) now: \(message)"
        }
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let detail { text += "; detail: \(detail)" }
        if let hint { text += "; hint: \(hint)" }
        if connectionBroken && kind != .connect { text += "; the connection is broken and must be reopened" }
        return text
    }
}
