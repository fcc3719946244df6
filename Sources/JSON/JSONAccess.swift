/// A parsed document that does not have the shape a request needs: where (a path such as
/// `fixes[17].latitude`) and what was wrong, so the client can fix the exact field.
public struct JSONAccessError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case missingKey
        case unknownKey
        case wrongType
    }

    public enum PathComponent: Sendable, Equatable {
        case key(String)
        case index(Int)
    }

    public let code: Code
    /// From the outermost value inward; empty when the error is about the value itself.
    public private(set) var path: [PathComponent]
    public let message: String

    public init(code: Code, path: [PathComponent] = [], message: String) {
        self.code = code
        self.path = path
        self.message = message
    }

    /// The same error seen from the enclosing object or array.
    public func inside(key: String) -> JSONAccessError {
        var outer = self
        outer.path.insert(.key(key), at: 0)
        return outer
    }

    public func inside(index: Int) -> JSONAccessError {
        var outer = self
        outer.path.insert(.index(index), at: 0)
        return outer
    }

    /// `fixes[17].latitude`; `$` for the document itself.
    public var pathDescription: String {
        if path.isEmpty { return "$" }
        var text = ""
        for component in path {
            switch component {
            case .key(let key): text += text.isEmpty ? key : "." + key
            case .index(let index): text += "[\(index)]"
            }
        }
        return text
    }

    public var description: String { "\(pathDescription): \(message)" }
}

extension JSONValue {
    /// A number: integers are accepted too, since `1` and `1.0` mean the same coordinate.
    public var doubleValue: Double {
        get throws(JSONAccessError) {
            switch self {
            case .double(let value): return value
            case .integer(let value): return Double(value)
            default: throw wrongType("a number")
            }
        }
    }

    /// An integer literal that fits Int64; `1.0` and `1e3` are refused rather than guessed at.
    public var int64Value: Int64 {
        get throws(JSONAccessError) {
            guard case .integer(let value) = self else { throw wrongType("an integer") }
            return value
        }
    }

    public var stringValue: String {
        get throws(JSONAccessError) {
            guard case .string(let value) = self else { throw wrongType("a string") }
            return value
        }
    }

    public var boolValue: Bool {
        get throws(JSONAccessError) {
            guard case .bool(let value) = self else { throw wrongType("true or false") }
            return value
        }
    }

    public var arrayValue: [JSONValue] {
        get throws(JSONAccessError) {
            guard case .array(let value) = self else { throw wrongType("an array") }
            return value
        }
    }

    public var objectValue: JSONObject {
        get throws(JSONAccessError) {
            guard case .object(let value) = self else { throw wrongType("an object") }
            return value
        }
    }

    /// Decodes each element of an array; an error names the element's index.
    public func mapArray<T>(_ transform: (JSONValue) throws(JSONAccessError) -> T) throws(JSONAccessError)
        -> [T]
    {
        let elements = try arrayValue
        var results: [T] = []
        results.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            do {
                results.append(try transform(element))
            } catch {
                throw error.inside(index: index)
            }
        }
        return results
    }

    private func wrongType(_ expected: String) -> JSONAccessError {
        let found: String
        switch self {
        case .double where expected == "an integer": found = "a number with a fraction or exponent"
        case .null: found = "null"
        default: found = "a" + (typeName.first.map { "aeiou".contains($0) } == true ? "n " : " ") + typeName
        }
        return JSONAccessError(code: .wrongType, message: "expected \(expected), found \(found)")
    }
}

extension JSONObject {
    /// Strict request decoding: the first member (in document order) whose key is not allowed.
    public func checkKeys(allowed: Set<String>) throws(JSONAccessError) {
        for member in members where !allowed.contains(member.key) {
            throw JSONAccessError(
                code: .unknownKey, path: [.key(member.key)],
                message: "unknown member; allowed: \(allowed.sorted().joined(separator: ", "))")
        }
    }

    /// The member named `key`, which must be present (null counts as present).
    public func required(_ key: String) throws(JSONAccessError) -> JSONValue {
        guard let value = self[key] else {
            throw JSONAccessError(code: .missingKey, path: [.key(key)], message: "required member is missing")
        }
        return value
    }

    /// Reads a required member; errors name `key`.
    public func decode<T>(_ key: String, _ read: (JSONValue) throws(JSONAccessError) -> T)
        throws(JSONAccessError) -> T
    {
        let value = try required(key)
        do {
            return try read(value)
        } catch {
            throw error.inside(key: key)
        }
    }

    /// Reads an optional member: absent and null both give nil.
    public func decodeIfPresent<T>(_ key: String, _ read: (JSONValue) throws(JSONAccessError) -> T)
        throws(JSONAccessError) -> T?
    {
        guard let value = self[key], value != .null else { return nil }
        do {
            return try read(value)
        } catch {
            throw error.inside(key: key)
        }
    }

    public func double(_ key: String) throws(JSONAccessError) -> Double {
        try decode(key) { v throws(JSONAccessError) in try v.doubleValue }
    }
    public func int64(_ key: String) throws(JSONAccessError) -> Int64 {
        try decode(key) { v throws(JSONAccessError) in try v.int64Value }
    }
    public func string(_ key: String) throws(JSONAccessError) -> String {
        try decode(key) { v throws(JSONAccessError) in try v.stringValue }
    }
    public func bool(_ key: String) throws(JSONAccessError) -> Bool {
        try decode(key) { v throws(JSONAccessError) in try v.boolValue }
    }

    public func int64IfPresent(_ key: String) throws(JSONAccessError) -> Int64? {
        try decodeIfPresent(key) { v throws(JSONAccessError) in try v.int64Value }
    }
    public func stringIfPresent(_ key: String) throws(JSONAccessError) -> String? {
        try decodeIfPresent(key) { v throws(JSONAccessError) in try v.stringValue }
    }
    public func boolIfPresent(_ key: String) throws(JSONAccessError) -> Bool? {
        try decodeIfPresent(key) { v throws(JSONAccessError) in try v.boolValue }
    }
}
