/// A pull reader over one JSON document, for decoders of one known shape that want to skip
/// building a `JSONValue` tree (the report endpoint, whose fixes are its hot loop).
///
/// It reads strings and scalars with the same code as `JSONParser`, so a value read here is
/// exactly the value the tree would hold. What it does not do is report errors: every method
/// answers nil or false when the input is not what was asked for (or not JSON at all), and the
/// caller then gives up and parses with `JSONParser`, whose error messages are the contract. A
/// caller that only returns a result after consuming the whole document through these methods and
/// `atEnd` accepts a subset of what `JSONParser.parse` accepts.
public struct JSONScanner: ~Copyable {
    private var parser: JSONParser

    /// `buffer` must outlive the scanner.
    public init(_ buffer: UnsafeRawBufferPointer) {
        let base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(bitPattern: 1)!
        parser = JSONParser(base: base, count: buffer.count, depthMax: JSONParser.depthMaxDefault)
    }

    /// `buffer` must outlive the scanner; reading starts at `offset`.
    public init(_ buffer: UnsafeRawBufferPointer, offset: Int) {
        self.init(buffer)
        self.offset = offset
    }

    /// The scanned bytes, for a caller that reads plain runs (names, plain strings, punctuation)
    /// itself and hands the rest back through `offset`.
    public var bytes: UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(start: parser.base, count: parser.count)
    }

    /// Where the next read starts. A caller that moved past bytes itself sets it; any offset is
    /// safe (every read checks the end).
    public var offset: Int {
        get { parser.index }
        set {
            precondition(newValue >= 0 && newValue <= parser.count, "JSONScanner.offset outside the buffer")
            parser.index = newValue
        }
    }

    /// The number that comes next as the `Double` the tree would convert it to (`JSONValue`
    /// `.integer` or `.double`, the same literal read by the same code), without a `JSONValue`; nil
    /// when no valid number comes next, or it is out of a double's range.
    public mutating func number() -> Double? {
        parser.skipWhitespace()
        guard parser.index < parser.count else { return nil }
        if let value = parser.shortDecimal() { return value }
        switch parser.base[parser.index] {
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            switch try? parser.parseNumber() {
            case .integer(let integer)?: return Double(integer)
            case .double(let double)?: return double
            default: return nil
            }
        default: return nil
        }
    }

    /// Skips whitespace and consumes `byte` if it comes next.
    public mutating func take(_ byte: UInt8) -> Bool {
        parser.skipWhitespace()
        guard parser.index < parser.count, parser.base[parser.index] == byte else { return false }
        parser.index += 1
        return true
    }

    /// Skips whitespace; true when nothing else is left.
    public mutating func atEnd() -> Bool {
        parser.skipWhitespace()
        return parser.index == parser.count
    }

    /// The string that comes next (escapes decoded, UTF-8 checked), or nil.
    public mutating func string() -> String? {
        parser.skipWhitespace()
        guard parser.index < parser.count, parser.base[parser.index] == UInt8(ascii: "\"") else { return nil }
        return try? parser.parseString()
    }

    /// The bytes of the string that comes next when they are printable ASCII without escapes
    /// (so that they are also its value), or nil. Valid while the scanned buffer is; allocates
    /// nothing, for matching member names.
    public mutating func plainString() -> UnsafeBufferPointer<UInt8>? {
        parser.skipWhitespace()
        let start = parser.index + 1
        guard start <= parser.count, parser.base[parser.index] == UInt8(ascii: "\"") else { return nil }
        var end = start
        while end < parser.count {
            let byte = parser.base[end]
            if byte == UInt8(ascii: "\"") {
                parser.index = end + 1
                return UnsafeBufferPointer(start: parser.base + start, count: end - start)
            }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
            end += 1
        }
        return nil
    }

    /// The string, number, boolean or null that comes next, or nil (for an object or an array too).
    public mutating func scalar() -> JSONValue? {
        parser.skipWhitespace()
        guard parser.index < parser.count else { return nil }
        do {
            switch parser.base[parser.index] {
            case UInt8(ascii: "\""): return .string(try parser.parseString())
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parser.parseNumber()
            case UInt8(ascii: "t"):
                try parser.expectLiteral("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try parser.expectLiteral("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try parser.expectLiteral("null")
                return .null
            default: return nil
            }
        } catch {
            return nil
        }
    }
}
