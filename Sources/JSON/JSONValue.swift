/// A parsed JSON document.
///
/// Integer literals that fit `Int64` are `.integer`; every other number is `.double` (always finite).
/// The literal `-0` is `.double(-0.0)`: Int64 cannot carry the sign, and a round trip must keep it.
/// Objects keep their members in document order; the parser rejects duplicate keys, so a parsed
/// object never holds two members with the same key.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The member named `key` when this is an object holding it; nil otherwise.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[key]
    }

    /// The element at `index` when this is an array long enough; nil otherwise.
    public subscript(index: Int) -> JSONValue? {
        guard case .array(let elements) = self, elements.indices.contains(index) else { return nil }
        return elements[index]
    }

    /// The JSON type name, as error messages show it ("number", "string", ...).
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .integer, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

/// The members of a JSON object, in document order.
public struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    public struct Member: Sendable, Equatable {
        public var key: String
        public var value: JSONValue

        public init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    public var members: [Member]

    public init(_ members: [Member] = []) {
        self.members = members
    }

    /// Keeps the literal's order; the caller keeps keys unique.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.members = elements.map { Member(key: $0.0, value: $0.1) }
    }

    /// The first member named `key`. Linear: request objects hold about ten members, and a scan
    /// over inline small strings beats hashing every key of every fix.
    public subscript(key: String) -> JSONValue? {
        for member in members where member.key == key {
            return member.value
        }
        return nil
    }

    public var count: Int { members.count }
    public var keys: [String] { members.map(\.key) }
}
