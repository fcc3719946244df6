import Crypto

/// A statement parameter, or a value for COPY.
///
/// Sent in PostgreSQL's binary form with its type, except `text`: numbers, booleans, timestamps,
/// uuids, `bytea` and arrays are bytes copied on both sides, where the text form would format them
/// as decimal text for the server to parse back (the projector sends thousands per transaction).
/// `text` goes as text with type "unknown", so the server infers its type from the statement (a
/// jsonb, an enum, a cast); a value in another type's text form can still go as `.text` with a cast.
public enum PostgresValue: Sendable, Equatable {
    case text(String)
    case int64(Int64)
    case double(Double)
    case bool(Bool)
    /// `bytea`.
    case bytes([UInt8])
    /// `timestamptz`, microseconds since the Unix epoch; exact (see `PostgresTimestamp`).
    case timestamp(micros: Int64)
    /// `uuid`: its 16 bytes in text order, as two big-endian halves.
    case uuid(high: UInt64, low: UInt64)
    /// A one-dimensional array of one element type (`$1::bigint[]` needs no cast, but may have one).
    case array(PostgresArray)

    /// The type OID sent with the parameter; 0 lets the server infer it.
    var typeOID: UInt32 {
        switch self {
        case .text: 0
        case .int64: PostgresArray.ElementType.bigint.oid
        case .double: PostgresArray.ElementType.float8.oid
        case .bool: PostgresArray.ElementType.boolean.oid
        case .bytes: PostgresArray.ElementType.bytea.oid
        case .timestamp: PostgresArray.ElementType.timestamptz.oid
        case .uuid: PostgresArray.ElementType.uuid.oid
        case .array(let array): array.elementType.arrayOID
        }
    }

    /// The PostgreSQL text input form (for `bytes`: the hex form `\x0a1b`; for an array: its
    /// literal, `{1,NULL,"a\"b"}`).
    public var textForm: String {
        switch self {
        case .text(let value): value
        case .int64(let value): String(value)
        case .double(let value):
            value.isNaN ? "NaN" : value.isInfinite ? (value < 0 ? "-Infinity" : "Infinity") : "\(value)"
        case .bool(let value): value ? "t" : "f"
        case .bytes(let value): "\\x" + Hex.encode(value)
        case .timestamp(let micros): PostgresTimestamp.text(micros: micros)
        case .uuid(let high, let low):
            Self.uuidText(high: high, low: low)
        case .array(let array): array.literal
        }
    }

    /// The value in its type's binary form (PostgreSQL's `*_send`), without a length; nil for
    /// `text`, which is sent as text.
    func binaryForm() throws(PostgresError) -> [UInt8]? {
        if case .text = self { return nil }
        var field = BinaryCopyRows(writeHeader: false)
        try appendField(to: &field, as: nil)
        // A field is its 32-bit length, then the value.
        return Array(field.bytes.dropFirst(4))
    }

    /// Appends the value as one binary field (length, then bytes). `element` narrows `.int64` to
    /// an array's `integer` or `smallint` elements and makes `.text` a `text` value.
    func appendField(to field: inout BinaryCopyRows, as element: PostgresArray.ElementType?)
        throws(PostgresError)
    {
        switch self {
        case .int64(let value):
            switch element {
            case .integer?:
                precondition(Int64(Int32.min)...Int64(Int32.max) ~= value, "\(value) does not fit an integer")
                field.int32(Int32(value))
            case .smallint?:
                precondition(Int64(Int16.min)...Int64(Int16.max) ~= value, "\(value) does not fit a smallint")
                field.int16(Int16(value))
            default: field.int64(value)
            }
        case .double(let value): field.float8(value)
        case .bool(let value): field.bool(value)
        case .bytes(let value): field.bytea(value)
        case .timestamp(let micros): field.timestamp(micros: micros)
        case .uuid(let high, let low): field.uuid(high: high, low: low)
        case .text(let value): try field.text(value)
        case .array(let array): try field.array(array)
        }
    }

    static func uuidText(high: UInt64, low: UInt64) -> String {
        let hex = Hex.encode(
            withUnsafeBytes(of: high.bigEndian, Array.init) + withUnsafeBytes(of: low.bigEndian, Array.init))
        let characters = Array(hex)
        return String(characters[0..<8]) + "-" + String(characters[8..<12]) + "-"
            + String(characters[12..<16])
            + "-" + String(characters[16..<20]) + "-" + String(characters[20..<32])
    }
}

/// A one-dimensional array parameter: an element type and the elements (nil for NULL), sent in
/// binary (`array_send`'s form: dimensions, a has-nulls flag, the element type, then each element
/// as a binary field). Combine several with `unnest($1::bigint[], $2::float8[], ...)` to write many
/// rows in one statement.
public struct PostgresArray: Sendable, Equatable {
    /// Element types, each with its OID and its array type's OID (`pg_type`).
    public enum ElementType: Sendable, Equatable {
        case bigint, integer, smallint, float8, boolean, text, timestamptz, uuid, bytea

        public var oid: UInt32 {
            switch self {
            case .bigint: 20
            case .integer: 23
            case .smallint: 21
            case .float8: 701
            case .boolean: 16
            case .text: 25
            case .timestamptz: 1184
            case .uuid: 2950
            case .bytea: 17
            }
        }

        public var arrayOID: UInt32 {
            switch self {
            case .bigint: 1016
            case .integer: 1007
            case .smallint: 1005
            case .float8: 1022
            case .boolean: 1000
            case .text: 1009
            case .timestamptz: 1185
            case .uuid: 2951
            case .bytea: 1001
            }
        }

        /// Whether `value` is of this element type (`.int64` for the three integer widths).
        func admits(_ value: PostgresValue) -> Bool {
            switch (self, value) {
            case (.bigint, .int64), (.integer, .int64), (.smallint, .int64), (.float8, .double),
                (.boolean, .bool), (.text, .text), (.timestamptz, .timestamp), (.uuid, .uuid),
                (.bytea, .bytes):
                true
            default: false
            }
        }
    }

    public let elementType: ElementType
    public let elements: [PostgresValue?]

    /// Every element must be of `elementType` (a programmer error otherwise).
    public init(_ elementType: ElementType, _ elements: [PostgresValue?]) {
        for case let element? in elements {
            precondition(elementType.admits(element), "\(element) is not a \(elementType) array element")
        }
        self.elementType = elementType
        self.elements = elements
    }

    /// The text literal: `{1,NULL,3}`, text elements quoted.
    var literal: String {
        var literal = "{"
        for (index, element) in elements.enumerated() {
            if index > 0 { literal += "," }
            guard let element else {
                literal += "NULL"
                continue
            }
            switch element {
            case .int64, .double, .bool: literal += element.textForm
            default: Self.appendQuoted(element.textForm, to: &literal)
            }
        }
        return literal + "}"
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

extension BinaryCopyRows {
    /// An array field in `array_send`'s form. An empty array has no dimensions.
    mutating func array(_ array: PostgresArray) throws(PostgresError) {
        var body = BinaryCopyRows(writeHeader: false)
        body.word(array.elements.isEmpty ? 0 : 1)
        // The has-nulls flag; the server also reads each element's length, -1 for NULL.
        body.word(array.elements.contains(nil) ? 1 : 0)
        body.word(array.elementType.oid)
        if !array.elements.isEmpty {
            body.word(UInt32(array.elements.count))
            body.word(1)  // lower bound
        }
        for element in array.elements {
            if let element { try element.appendField(to: &body, as: array.elementType) } else { body.null() }
        }
        bytea(body.bytes)
    }
}

extension PostgresValue {
    /// `$n::bigint[]`.
    public static func int64Array(_ values: [Int64?]) -> PostgresValue {
        .array(PostgresArray(.bigint, values.map { $0.map { .int64($0) } }))
    }
    /// `$n::timestamptz[]`, from microseconds since the epoch.
    public static func timestampArray(micros: [Int64?]) -> PostgresValue {
        .array(PostgresArray(.timestamptz, micros.map { $0.map { .timestamp(micros: $0) } }))
    }
    /// `$n::text[]`.
    public static func textArray(_ values: [String?]) -> PostgresValue {
        .array(PostgresArray(.text, values.map { $0.map { .text($0) } }))
    }
}
