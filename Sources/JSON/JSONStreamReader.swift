/// A strict pull tokenizer over a JSON document of any size, read a buffer at a time through a
/// refill closure: the history import reads a gigabyte `Records.json` with it in bounded memory.
///
/// It accepts exactly what `JSONParser.parse` accepts (RFC 8259; no trailing garbage, no duplicate
/// keys, no leading zeros, NaN or Infinity, no bare control characters, valid UTF-8 only, no lone
/// surrogates, nesting at most `depthMax`), and an error names the byte offset into the whole input.
///
/// Memory: one buffer of `bufferBytes`, grown only while a single token (a string or a number) is
/// longer than what is buffered, and never past `tokenBytesMax`; plus, per open object, the keys
/// seen so far (to refuse duplicates). Tokens are handed out one at a time: a string's bytes are
/// valid until the next call.
///
/// Grammar of the token sequence (what `next()` returns), for a caller walking a known shape:
/// an object is `objectStart (key value)* objectEnd`, an array is `arrayStart value* arrayEnd`, a
/// value is one of those or `string`, `number`, `bool`, `null`; the document is one value, `end`.
public final class JSONStreamReader {
    /// Fills the start of the buffer it is given and answers how many bytes it wrote; 0 only at
    /// the end of the input.
    public typealias Refill = (UnsafeMutableRawBufferPointer) throws(JSONStreamError) -> Int

    public enum Token: Equatable, Sendable {
        case objectStart, objectEnd, arrayStart, arrayEnd
        /// An object member's name: `stringBytes`, `string`.
        case key
        /// `stringBytes`, `string`.
        case string
        /// `number`, `numberIsInteger`.
        case number
        /// `bool`.
        case bool
        case null
        /// After the document's one value, and only whitespace after it.
        case end
    }

    public static let bufferBytesDefault = 64 * 1024
    /// A string or number longer than this is refused rather than buffered: 16 MiB.
    public static let tokenBytesMaxDefault = 16 * 1024 * 1024

    /// Every field lives in one struct: each stored property of a class is checked for exclusive
    /// access at run time on every read and write, which was nearly half of the tokenizer's time;
    /// the struct costs one check a call.
    var core: JSONStreamCore

    public init(
        bufferBytes: Int = bufferBytesDefault, tokenBytesMax: Int = tokenBytesMaxDefault,
        depthMax: Int = JSONParser.depthMaxDefault, refill: @escaping Refill
    ) {
        core = JSONStreamCore(
            bufferBytes: bufferBytes, tokenBytesMax: tokenBytesMax, depthMax: depthMax, refill: refill)
    }

    deinit {
        core.buffer.deallocate()
        core.scratch.deallocate()
    }

    public var depthMax: Int { core.depthMax }

    /// How many containers are open around the next token.
    public var depth: Int { core.containers.count }

    /// The input's bytes consumed so far.
    public var bytesRead: Int64 { core.bytesRead }

    /// Where the last token started in the input.
    public var tokenOffset: Int64 { core.tokenOffset }

    /// The last key's or string's bytes (escapes decoded). Valid until the next call.
    public var stringBytes: UnsafeBufferPointer<UInt8> { core.stringBytes }

    public var string: String { core.string }

    /// The last `number` token's value (correctly rounded, always finite).
    public var number: Double { core.number }

    /// Whether the last number's literal had no fraction and no exponent.
    public var numberIsInteger: Bool { core.numberIsInteger }

    /// The last `bool` token's value.
    public var bool: Bool { core.bool }

    /// Whether the last key or string is exactly `literal`, without making a String.
    public func stringEquals(_ literal: StaticString) -> Bool { core.stringEquals(literal) }

    public func next() throws(JSONStreamError) -> Token { try core.next() }

    /// Reads past the next value whole (an object or array with everything inside it), validating
    /// it as strictly as `next` and keeping nothing. Call it where a value comes next: after a
    /// `key`, or inside an array.
    public func skipValue() throws(JSONStreamError) { try core.skipValue() }

    /// The next value as a tree, for a caller that maps a small element of a large file (one
    /// timeline segment, one feature). `bytesMax` bounds the element's size in the input.
    public func readValue(bytesMax: Int) throws(JSONStreamError) -> JSONValue {
        try core.readValue(bytesMax: bytesMax)
    }
}

/// The tokenizer's state and work (`JSONStreamReader` is its handle).
struct JSONStreamCore {
    typealias Token = JSONStreamReader.Token
    typealias Refill = JSONStreamReader.Refill

    enum State {
        case documentStart, objectFirst, objectKey, colon, arrayFirst, value, afterValue, done
    }

    var buffer: UnsafeMutablePointer<UInt8>
    var capacity: Int
    /// The next unread byte; `filled` bytes of the buffer hold input.
    var index = 0
    var filled = 0
    /// The input's offset of `buffer[0]`.
    var bufferOffset: Int64 = 0
    var atInputEnd = false
    let refill: Refill
    let tokenBytesMax: Int
    let depthMax: Int

    /// 1: object, 2: array.
    var containers: [UInt8] = []
    var state = State.documentStart
    /// The keys of every open object, in one arena: `keyRanges[keyLevels[i]...]` are those of the
    /// i-th open object.
    var keyArena: [UInt8] = []
    var keyRanges: [(start: Int, count: Int, hash: UInt64)] = []
    var keyLevels: [Int] = []

    /// Where the last token started in the input.
    var tokenOffset: Int64 = 0
    var stringStart = 0
    var stringCount = 0
    var stringInScratch = false
    /// A string with escapes, decoded; its own allocation so that `stringBytes` can point into it.
    var scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)
    var scratchCapacity = 256
    var scratchCount = 0
    /// The last `number` token's value (correctly rounded, always finite).
    var number: Double = 0
    /// Whether the last number's literal had no fraction and no exponent.
    var numberIsInteger = false
    /// The last `bool` token's value.
    var bool = false

    init(
        bufferBytes: Int, tokenBytesMax: Int, depthMax: Int, refill: @escaping Refill
    ) {
        precondition(bufferBytes >= 16 && tokenBytesMax >= bufferBytes, "buffer limits out of order")
        capacity = bufferBytes
        buffer = .allocate(capacity: bufferBytes)
        self.tokenBytesMax = tokenBytesMax
        self.depthMax = depthMax
        self.refill = refill
    }

    /// How many containers are open around the next token.
    var depth: Int { containers.count }

    /// The input's bytes consumed so far.
    var bytesRead: Int64 { bufferOffset + Int64(index) }

    /// The last key's or string's bytes (escapes decoded). Valid until the next call.
    var stringBytes: UnsafeBufferPointer<UInt8> {
        if stringInScratch {
            return UnsafeBufferPointer(start: scratch, count: scratchCount)
        }
        return UnsafeBufferPointer(start: buffer + stringStart, count: stringCount)
    }

    var string: String { String(decoding: stringBytes, as: UTF8.self) }

    /// Whether the last key or string is exactly `literal`, without making a String.
    func stringEquals(_ literal: StaticString) -> Bool {
        let bytes = stringBytes
        guard bytes.count == literal.utf8CodeUnitCount else { return false }
        let expected = literal.utf8Start
        for position in 0..<bytes.count where bytes[position] != expected[position] { return false }
        return true
    }

    mutating func next() throws(JSONStreamError) -> Token {
        while true {
            try skipWhitespace()
            tokenOffset = bytesRead
            let byte: UInt8? = index < filled ? buffer[index] : nil
            switch state {
            case .done:
                guard let byte else { return .end }
                throw fail(.trailingGarbage, "unexpected \(describe(byte)) after the top-level value")
            case .afterValue:
                if let token = try afterValue(byte) { return token }
            case .colon:
                guard byte == UInt8(ascii: ":") else { throw failExpecting("':' after object key", byte) }
                index += 1
                state = .value
            case .objectFirst where byte == UInt8(ascii: "}"):
                return closeContainer()
            case .objectFirst, .objectKey:
                guard byte == UInt8(ascii: "\"") else {
                    throw failExpecting("a string key for an object member", byte)
                }
                try readString()
                try rememberKey()
                state = .colon
                return .key
            case .arrayFirst where byte == UInt8(ascii: "]"):
                return closeContainer()
            case .arrayFirst, .value, .documentStart:
                guard let byte else {
                    throw fail(.unexpectedEnd, "unexpected end of input: expected a value")
                }
                return try value(startingWith: byte)
            }
        }
    }

    /// Reads past the next value whole (an object or array with everything inside it), validating
    /// it as strictly as `next` and keeping nothing. Call it where a value comes next: after a
    /// `key`, or inside an array.
    mutating func skipValue() throws(JSONStreamError) {
        let token = try next()
        switch token {
        case .objectStart, .arrayStart:
            let outer = depth - 1
            while true {
                let token = try next()
                if (token == .objectEnd || token == .arrayEnd) && depth == outer { return }
            }
        case .string, .number, .bool, .null: return
        case .key, .objectEnd, .arrayEnd, .end:
            preconditionFailure("skipValue called where no value comes next (found \(token))")
        }
    }

    /// The next value as a tree, for a caller that maps a small element of a large file (one
    /// timeline segment, one feature). `bytesMax` bounds the element's size in the input.
    mutating func readValue(bytesMax: Int) throws(JSONStreamError) -> JSONValue {
        let start = bytesRead
        let token = try next()
        return try treeValue(token, start: start, bytesMax: Int64(bytesMax))
    }

    private mutating func treeValue(_ token: Token, start: Int64, bytesMax: Int64) throws(JSONStreamError)
        -> JSONValue
    {
        if bytesRead - start > bytesMax {
            throw JSONStreamError(
                code: .tokenTooLong, byteOffset: start,
                message:
                    "an element longer than \(bytesMax) bytes: this reader takes elements up to that size")
        }
        switch token {
        case .string: return .string(string)
        case .number:
            if numberIsInteger, number.magnitude <= 9_007_199_254_740_992 { return .integer(Int64(number)) }
            return .double(number)
        case .bool: return .bool(bool)
        case .null: return .null
        case .arrayStart:
            var elements: [JSONValue] = []
            while true {
                let element = try next()
                if element == .arrayEnd { return .array(elements) }
                elements.append(try treeValue(element, start: start, bytesMax: bytesMax))
            }
        case .objectStart:
            var members: [JSONObject.Member] = []
            while try next() == .key {
                let key = string
                members.append(
                    JSONObject.Member(
                        key: key, value: try treeValue(next(), start: start, bytesMax: bytesMax)))
            }
            return .object(JSONObject(members))
        case .key, .objectEnd, .arrayEnd, .end:
            preconditionFailure("readValue called where no value comes next (found \(token))")
        }
    }

    // MARK: Structure

    private mutating func afterValue(_ byte: UInt8?) throws(JSONStreamError) -> Token? {
        let inObject = containers.last == 1
        switch byte {
        case UInt8(ascii: ",")?:
            index += 1
            state = inObject ? .objectKey : .value
            return nil
        case UInt8(ascii: "}")? where inObject: return closeContainer()
        case UInt8(ascii: "]")? where !inObject: return closeContainer()
        default:
            throw failExpecting(
                inObject ? "',' or '}' after object member" : "',' or ']' after array element", byte)
        }
    }

    private mutating func closeContainer() -> Token {
        index += 1
        let wasObject = containers.removeLast() == 1
        if wasObject {
            let first = keyLevels.removeLast()
            if first < keyRanges.count {
                keyArena.removeSubrange(keyRanges[first].start...)
                keyRanges.removeSubrange(first...)
            }
        }
        state = containers.isEmpty ? .done : .afterValue
        return wasObject ? .objectEnd : .arrayEnd
    }

    private mutating func value(startingWith byte: UInt8) throws(JSONStreamError) -> Token {
        switch byte {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            guard containers.count < depthMax else {
                throw fail(
                    .depthExceeded, "objects and arrays nested deeper than depthMax (\(depthMax) levels)")
            }
            index += 1
            let isObject = byte == UInt8(ascii: "{")
            containers.append(isObject ? 1 : 2)
            if isObject { keyLevels.append(keyRanges.count) }
            state = isObject ? .objectFirst : .arrayFirst
            return isObject ? .objectStart : .arrayStart
        case UInt8(ascii: "\""):
            try readString()
            finishValue()
            return .string
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            try readNumber()
            finishValue()
            return .number
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            bool = true
            finishValue()
            return .bool
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            bool = false
            finishValue()
            return .bool
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            finishValue()
            return .null
        case UInt8(ascii: "N"), UInt8(ascii: "I"):
            throw fail(.unexpectedByte, "NaN and Infinity are not JSON: send a finite number or null")
        default:
            throw fail(
                .unexpectedByte,
                "expected a value (object, array, string, number, true, false or null), found \(describe(byte))"
            )
        }
    }

    @inline(__always)
    private mutating func finishValue() {
        state = containers.isEmpty ? .done : .afterValue
    }

    /// Refuses a key the innermost open object already has.
    private mutating func rememberKey() throws(JSONStreamError) {
        let bytes = stringBytes
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let first = keyLevels[keyLevels.count - 1]
        for position in first..<keyRanges.count where keyRanges[position].hash == hash {
            let range = keyRanges[position]
            let same = keyArena.withUnsafeBufferPointer { arena in
                range.count == bytes.count
                    && (bytes.isEmpty
                        || memcmpEqual(arena.baseAddress! + range.start, bytes.baseAddress!, bytes.count))
            }
            if same {
                throw JSONStreamError(
                    code: .syntax(.duplicateKey), byteOffset: tokenOffset,
                    message: "duplicate key \"\(string)\" in object")
            }
        }
        keyRanges.append((keyArena.count, bytes.count, hash))
        keyArena.append(contentsOf: bytes)
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONStreamError) {
        let length = literal.utf8CodeUnitCount
        try require(length, from: index)
        let bytes = literal.utf8Start
        for offset in 0..<length where index + offset >= filled || buffer[index + offset] != bytes[offset] {
            throw fail(.unexpectedByte, "invalid literal: expected '\(literal)'")
        }
        index += length
    }

    // MARK: Input

    @inline(__always)
    private mutating func skipWhitespace() throws(JSONStreamError) {
        while true {
            while index < filled {
                switch buffer[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
            if atInputEnd { return }
            try fill(keepingFrom: index)
        }
    }

    /// Makes `count` bytes from `start` available when the input has them (fewer only at its end).
    mutating func require(_ count: Int, from start: Int) throws(JSONStreamError) {
        var start = start
        while filled - start < count && !atInputEnd {
            try fill(keepingFrom: start)
            start = 0  // where fill moved the kept bytes
        }
    }

    /// Reads more input, keeping the bytes from `start` on (a token being read) at the buffer's
    /// start; `index` and `stringStart` move with them. Grows the buffer when the kept bytes fill it.
    mutating func fill(keepingFrom start: Int) throws(JSONStreamError) {
        if start > 0 {
            let kept = filled - start
            if kept > 0 { buffer.update(from: buffer + start, count: kept) }
            bufferOffset += Int64(start)
            index -= start
            stringStart -= start
            filled = kept
        }
        if filled == capacity {
            guard capacity < tokenBytesMax else {
                throw JSONStreamError(
                    code: .tokenTooLong, byteOffset: bufferOffset,
                    message: "a string or number longer than \(tokenBytesMax) bytes")
            }
            let grown = min(capacity * 2, tokenBytesMax)
            let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
            larger.update(from: buffer, count: filled)
            buffer.deallocate()
            buffer = larger
            capacity = grown
        }
        let count = try refill(
            UnsafeMutableRawBufferPointer(start: buffer + filled, count: capacity - filled))
        precondition(count >= 0 && count <= capacity - filled, "refill answered an impossible count")
        if count == 0 { atInputEnd = true }
        filled += count
    }

    // MARK: Errors (cold path)

    @inline(never)
    func fail(_ code: JSONParseError.Code, _ message: String, at offset: Int64? = nil) -> JSONStreamError {
        JSONStreamError(code: .syntax(code), byteOffset: offset ?? bytesRead, message: message)
    }

    @inline(never)
    func failExpecting(_ expected: String, _ byte: UInt8?) -> JSONStreamError {
        guard let byte else { return fail(.unexpectedEnd, "unexpected end of input: expected \(expected)") }
        return fail(.unexpectedByte, "expected \(expected), found \(describe(byte))")
    }

    func describe(_ byte: UInt8) -> String {
        if byte >= 0x20 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x" + String(byte, radix: 16, uppercase: true)
    }
}

@inline(__always)
private func memcmpEqual(_ left: UnsafePointer<UInt8>, _ right: UnsafePointer<UInt8>, _ count: Int) -> Bool {
    for position in 0..<count where left[position] != right[position] { return false }
    return true
}

/// Why a streamed document was refused, or could not be read, and where in the input.
public struct JSONStreamError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: Equatable, Sendable {
        /// The input is not JSON (the same codes as `JSONParser`'s).
        case syntax(JSONParseError.Code)
        /// One string or number, or one element read as a tree, is longer than its limit.
        case tokenTooLong
        /// The refill closure failed; `message` is its reason.
        case inputFailed
    }

    public var code: Code
    public var byteOffset: Int64
    public var message: String

    public init(code: Code, byteOffset: Int64, message: String) {
        self.code = code
        self.byteOffset = byteOffset
        self.message = message
    }

    public var description: String { "\(message) at byte \(byteOffset)" }
}
