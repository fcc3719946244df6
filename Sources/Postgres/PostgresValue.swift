import Crypto

/// A statement parameter, or a value for COPY.
///
/// Sent in text format except `bytes`, which goes in binary so no hex round trip is needed. `text`
/// goes with type "unknown" so the server infers it from the statement (a uuid, a jsonb, an enum);
/// the other cases carry their type, so `SELECT $1` needs no cast.
public enum PostgresValue: Sendable, Equatable {
    case text(String)
    case int64(Int64)
    case double(Double)
    case bool(Bool)
    /// `bytea`.
    case bytes([UInt8])
    /// `timestamptz`, microseconds since the Unix epoch; exact (see `PostgresTimestamp`).
    case timestamp(micros: Int64)

    /// The type OID sent with the parameter; 0 lets the server infer it.
    var typeOID: UInt32 {
        switch self {
        case .text: 0
        case .int64: 20
        case .double: 701
        case .bool: 16
        case .bytes: 17
        case .timestamp: 1184
        }
    }

    /// The PostgreSQL text input form (for `bytes`: the hex form `\x0a1b`).
    public var textForm: String {
        switch self {
        case .text(let value): value
        case .int64(let value): String(value)
        case .double(let value):
            value.isNaN ? "NaN" : value.isInfinite ? (value < 0 ? "-Infinity" : "Infinity") : "\(value)"
        case .bool(let value): value ? "t" : "f"
        case .bytes(let value): "\\x" + Hex.encode(value)
        case .timestamp(let micros): PostgresTimestamp.text(micros: micros)
        }
    }
}

extension PostgresValue {
    /// An array literal (`{1,NULL,3}`) sent as text: cast it in SQL, e.g. `$1::bigint[]`, and combine
    /// several with `unnest($1::bigint[], $2::float8[], ...)` to insert many rows in one statement.
    public static func array(_ elements: [PostgresValue?]) -> PostgresValue {
        var literal = "{"
        literal.reserveCapacity(elements.count * 12 + 2)
        for (index, element) in elements.enumerated() {
            if index > 0 { literal += "," }
            guard let element else {
                literal += "NULL"
                continue
            }
            switch element {
            case .int64, .double, .bool: literal += element.textForm
            case .text, .bytes, .timestamp: appendQuoted(element.textForm, to: &literal)
            }
        }
        return .text(literal + "}")
    }

    /// For `$n::bigint[]`.
    public static func int64Array(_ values: [Int64?]) -> PostgresValue {
        array(values.map { $0.map { .int64($0) } })
    }
    /// For `$n::timestamptz[]`, from microseconds since the epoch.
    public static func timestampArray(micros: [Int64?]) -> PostgresValue {
        array(micros.map { $0.map { .timestamp(micros: $0) } })
    }

    /// Array element quoting: inside double quotes only `"` and `\` need a backslash.
    private static func appendQuoted(_ text: String, to literal: inout String) {
        literal += "\""
        for scalar in text.unicodeScalars {
            if scalar == "\"" || scalar == "\\" { literal.unicodeScalars.append("\\") }
            literal.unicodeScalars.append(scalar)
        }
        literal += "\""
    }
}
