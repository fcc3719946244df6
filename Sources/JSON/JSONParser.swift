/// A strict RFC 8259 parser.
///
/// Rejects what lax parsers let through, because each is either a client bug we want reported or a
/// way to smuggle a value past validation: trailing garbage, duplicate keys, leading zeros, NaN and
/// Infinity, bare control characters, invalid UTF-8, lone surrogates in `\u` escapes, and nesting
/// deeper than `depthMax`. Errors name the byte offset and what was expected there.
public struct JSONParser: ~Copyable {
    /// Containers (objects and arrays) nested deeper than this are rejected. A report batch needs 3.
    public static let depthMaxDefault = 64

    public static func parse(_ bytes: [UInt8], depthMax: Int = depthMaxDefault)
        throws(JSONParseError) -> JSONValue
    {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(JSONParseError) in try parse(buffer, depthMax: depthMax) }
        }
        return try result.get()
    }

    public static func parse(_ text: String, depthMax: Int = depthMaxDefault)
        throws(JSONParseError) -> JSONValue
    {
        try parse(Array(text.utf8), depthMax: depthMax)
    }

    public static func parse(_ buffer: UnsafeRawBufferPointer, depthMax: Int = depthMaxDefault)
        throws(JSONParseError) -> JSONValue
    {
        precondition(depthMax >= 0, "depthMax must not be negative")
        guard let base = buffer.baseAddress, buffer.count > 0 else {
            throw JSONParseError(
                code: .unexpectedEnd, byteOffset: 0, line: 1, column: 1,
                message: "empty document: expected a JSON value")
        }
        var parser = JSONParser(
            base: base.assumingMemoryBound(to: UInt8.self), count: buffer.count, depthMax: depthMax)
        return try parser.parseDocument()
    }

    let base: UnsafePointer<UInt8>
    let count: Int
    let depthMax: Int
    var index = 0
    /// Reused for strings with escapes, so only the final String allocates.
    var scratch: [UInt8] = []

    init(base: UnsafePointer<UInt8>, count: Int, depthMax: Int) {
        self.base = base
        self.count = count
        self.depthMax = depthMax
    }

    private mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        if index < count {
            throw fail(.trailingGarbage, "unexpected \(describeByte(at: index)) after the top-level value")
        }
        return value
    }

    private mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard index < count else {
            throw fail(.unexpectedEnd, "unexpected end of input: expected a value")
        }
        switch base[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "N"), UInt8(ascii: "I"):
            throw fail(.unexpectedByte, "NaN and Infinity are not JSON: send a finite number or null")
        default:
            throw fail(
                .unexpectedByte,
                "expected a value (object, array, string, number, true, false or null), found "
                    + describeByte(at: index))
        }
    }

    private mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        try checkDepth(depth)
        index += 1
        skipWhitespace()
        var members: [JSONObject.Member] = []
        if index < count, base[index] == UInt8(ascii: "}") {
            index += 1
            return .object(JSONObject(members))
        }
        var keysSeen: Set<String> = []
        while true {
            guard index < count, base[index] == UInt8(ascii: "\"") else {
                throw failExpecting("a string key for an object member")
            }
            let keyOffset = index
            let key = try parseString()
            skipWhitespace()
            guard index < count, base[index] == UInt8(ascii: ":") else {
                throw failExpecting("':' after object key")
            }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth)
            // Small objects (a fix has about ten members) are cheaper to scan than to hash.
            let duplicate =
                members.count < 16
                ? members.contains { $0.key == key } : !keysSeen.insert(key).inserted
            if duplicate {
                throw fail(.duplicateKey, "duplicate key \"\(key)\" in object", at: keyOffset)
            }
            if members.count == 15 { keysSeen = Set(members.map(\.key) + [key]) }
            members.append(JSONObject.Member(key: key, value: value))
            skipWhitespace()
            guard index < count else { throw failExpecting("',' or '}' after object member") }
            if base[index] == UInt8(ascii: ",") {
                index += 1
                skipWhitespace()
            } else if base[index] == UInt8(ascii: "}") {
                index += 1
                return .object(JSONObject(members))
            } else {
                throw failExpecting("',' or '}' after object member")
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        try checkDepth(depth)
        index += 1
        skipWhitespace()
        var elements: [JSONValue] = []
        if index < count, base[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < count else { throw failExpecting("',' or ']' after array element") }
            if base[index] == UInt8(ascii: ",") {
                index += 1
                skipWhitespace()
            } else if base[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            } else {
                throw failExpecting("',' or ']' after array element")
            }
        }
    }

    private func checkDepth(_ depth: Int) throws(JSONParseError) {
        if depth > depthMax {
            throw fail(.depthExceeded, "objects and arrays nested deeper than depthMax (\(depthMax) levels)")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let length = literal.utf8CodeUnitCount
        let bytes = literal.utf8Start
        for offset in 0..<length where index + offset >= count || base[index + offset] != bytes[offset] {
            throw fail(.unexpectedByte, "invalid literal: expected '\(literal)'")
        }
        index += length
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while index < count {
            switch base[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    // MARK: Errors (cold path)

    @inline(never)
    func fail(_ code: JSONParseError.Code, _ message: String, at offset: Int? = nil) -> JSONParseError {
        let offset = offset ?? index
        var line = 1
        var lineStart = 0
        for position in 0..<min(offset, count) where base[position] == 0x0A {
            line += 1
            lineStart = position + 1
        }
        return JSONParseError(
            code: code, byteOffset: offset, line: line, column: offset - lineStart + 1, message: message)
    }

    @inline(never)
    func failExpecting(_ expected: String) -> JSONParseError {
        if index >= count {
            return fail(.unexpectedEnd, "unexpected end of input: expected \(expected)")
        }
        return fail(.unexpectedByte, "expected \(expected), found \(describeByte(at: index))")
    }

    func describeByte(at offset: Int) -> String {
        let byte = base[offset]
        if byte >= 0x20 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x" + String(byte, radix: 16, uppercase: true)
    }
}
