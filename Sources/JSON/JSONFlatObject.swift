/// The fast path of `JSONWriter` for the rows of a large answer (8,640 fixes in a history page,
/// 1,000 devices in a list): one object whose size the caller bounds up front is written straight
/// into capacity reserved once, instead of token by token into a growing array, where every append
/// checks capacity and uniqueness again. Profiles of the read API showed those checks as much of
/// its time.
///
/// The output is byte for byte what the token-by-token calls write (tested). Members are written
/// with `key` then one value call; a nested object goes between `beginObject` and `endObject`.
/// Writing past the reserved bound is a programmer error and traps: `JSONWriter.flatObject`
/// documents how much each call may write.
public struct JSONFlatObject: ~Copyable {
    // Usable from inline code: the fixed pieces, `null` and booleans of a large answer are
    // inlined into its writer (a call per piece was a twelfth of a history page's instructions).
    @usableFromInline let base: UnsafeMutablePointer<UInt8>
    @usableFromInline let capacity: Int
    @usableFromInline var count = 0
    @usableFromInline var needsComma = false

    /// The most bytes of each call, for the caller's bound: a key is its length plus 4, a double
    /// `doubleBytesMax`, an integer 20, a time `timestampBytesMax`, `true`/`false`/`null` 5, a string
    /// 6 bytes per byte of UTF-8 plus 2, `beginObject`/`endObject` 1, and a comma before each member.
    public static let doubleBytesMax = 32
    public static let integerBytesMax = 20
    public static let timestampBytesMax = RFC3339.formattedBytesMax + 2
    public static func stringBytesMax(utf8Count: Int) -> Int { utf8Count * 6 + 2 }

    fileprivate init(base: UnsafeMutablePointer<UInt8>, capacity: Int) {
        self.base = base
        self.capacity = capacity
    }

    @inlinable @inline(__always)
    mutating func reserve(_ bytes: Int) -> UnsafeMutablePointer<UInt8> {
        precondition(count + bytes <= capacity, "JSONFlatObject: the caller's bound is too small")
        return base + count
    }

    @inlinable @inline(__always)
    mutating func put(_ byte: UInt8) {
        _ = reserve(1)
        base[count] = byte
        count += 1
    }

    @inlinable @inline(__always)
    mutating func put(_ text: StaticString) {
        let output = reserve(text.utf8CodeUnitCount)
        copyBytes(text.utf8Start, to: output, count: text.utf8CodeUnitCount)
        count += text.utf8CodeUnitCount
    }

    /// `"key":`, after a comma when a member precedes it. ASCII letters, digits and `_` only, as
    /// `JSONWriter.plainKey`.
    @inline(__always)
    public mutating func key(_ key: StaticString) {
        let length = key.utf8CodeUnitCount
        let output = reserve(length + 4)
        var at = 0
        if needsComma {
            output[0] = UInt8(ascii: ",")
            at = 1
        }
        output[at] = UInt8(ascii: "\"")
        copyBytes(key.utf8Start, to: output + at + 1, count: length)
        output[at + length + 1] = UInt8(ascii: "\"")
        output[at + length + 2] = UInt8(ascii: ":")
        count += at + length + 3
        needsComma = true
    }

    /// Bytes written so far: where the next call writes, for a caller that cuts the output into
    /// pieces (a cached object with holes for values written later).
    public var written: Int { count }

    /// Bytes the caller guarantees are valid JSON at this place (a piece cut from earlier output).
    /// Copied as they are: commas and nesting are the caller's.
    public mutating func raw(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress else { return }
        copyBytes(source, to: reserve(bytes.count), count: bytes.count)
        count += bytes.count
    }

    /// Text the caller guarantees is valid JSON at this place (keys and punctuation written once
    /// for a shape that never changes), copied as it is: commas and nesting are the caller's.
    @inlinable @inline(__always)
    public mutating func raw(_ text: StaticString) { put(text) }

    public mutating func beginObject() {
        put(UInt8(ascii: "{"))
        needsComma = false
    }

    public mutating func endObject() {
        put(UInt8(ascii: "}"))
        needsComma = true
    }

    /// Swift's shortest round-trip form, as `Double.description` writes it.
    public mutating func double(_ value: Double) {
        precondition(value.isFinite, "JSONFlatObject cannot write a non-finite double (\(value))")
        let output = reserve(Self.doubleBytesMax)
        if let written = DecimalDouble.write(value, into: output) {
            count += written
            return
        }
        var text = value.description
        text.withUTF8 { utf8 in
            precondition(utf8.count <= Self.doubleBytesMax)
            copyBytes(utf8.baseAddress!, to: output, count: utf8.count)
            count += utf8.count
        }
    }

    /// `double`, trying `fractionDigitsGuess` first (`DecimalDouble`'s guess): for a column of many
    /// rows, whose last count of fraction digits is the guess for its next value.
    public mutating func double(_ value: Double, fractionDigitsGuess: inout Int) {
        precondition(value.isFinite, "JSONFlatObject cannot write a non-finite double (\(value))")
        if let written = DecimalDouble.write(
            value, into: reserve(Self.doubleBytesMax), fractionDigitsGuess: &fractionDigitsGuess)
        {
            count += written
            return
        }
        double(value)
    }

    public mutating func int64(_ value: Int64) {
        count += Digits.write(value, into: reserve(Self.integerBytesMax))
    }

    @inlinable
    public mutating func bool(_ value: Bool) { value ? put("true") : put("false") }

    @inlinable
    public mutating func null() { put("null") }

    /// An RFC 3339 time with microseconds, as `JSONWriter.timestamp(micros:)`.
    public mutating func timestamp(micros: Int64) {
        let output = reserve(Self.timestampBytesMax)
        output[0] = UInt8(ascii: "\"")
        let written = RFC3339.write(micros, fractionDigits: 6, into: output + 1)
        output[written + 1] = UInt8(ascii: "\"")
        count += written + 2
    }

    /// `timestamp(micros:)`, its date copied from `days` when the time is on the day written last
    /// with it (`RFC3339.DayCache`): for a column of many rows.
    public mutating func timestamp(micros: Int64, days: inout RFC3339.DayCache) {
        let output = reserve(Self.timestampBytesMax)
        output[0] = UInt8(ascii: "\"")
        let written = RFC3339.write(micros, fractionDigits: 6, into: output + 1, days: &days)
        output[written + 1] = UInt8(ascii: "\"")
        count += written + 2
    }

    /// A string given as UTF-8 bytes, escaped as `JSONWriter.string(utf8:)` escapes it.
    public mutating func string(utf8: UnsafeBufferPointer<UInt8>) {
        let output = reserve(Self.stringBytesMax(utf8Count: utf8.count))
        count += JSONEscaping.writeQuoted(utf8, into: output)
    }
}

extension JSONFlatObject {
    /// Appends to `bytes` what `body` writes, into `bytesMax` bytes reserved at once (the bound must
    /// cover every call `body` makes): for a stream of values outside a `JSONWriter`, such as the
    /// features of a GeoJSON export, whose separators the caller writes with `raw`.
    public static func append(to bytes: inout [UInt8], bytesMax: Int, _ body: (inout JSONFlatObject) -> Void)
    {
        bytes.append(addingCapacity: bytesMax) { span in
            span.withUnsafeMutableBufferPointer { output, initialized in
                var object = JSONFlatObject(base: output.baseAddress!, capacity: output.count)
                body(&object)
                initialized = object.count
            }
        }
    }
}

extension JSONWriter {
    /// Writes one object through `JSONFlatObject`, into `bytesMax` bytes reserved at once; the
    /// bound must cover every call `body` makes (see `JSONFlatObject`'s constants).
    public mutating func flatObject(bytesMax: Int, _ body: (inout JSONFlatObject) -> Void) {
        appendValue(bytesMax: bytesMax + 2) { output in
            var object = JSONFlatObject(base: output.baseAddress!, capacity: output.count)
            object.beginObject()
            body(&object)
            object.endObject()
            return object.count
        }
    }

    /// Writes one value that `body` assembles through `JSONFlatObject` without braces of its own
    /// (from `raw` pieces and values), into `bytesMax` bytes reserved at once.
    public mutating func flatValue(bytesMax: Int, _ body: (inout JSONFlatObject) -> Void) {
        appendValue(bytesMax: bytesMax) { output in
            var object = JSONFlatObject(base: output.baseAddress!, capacity: output.count)
            body(&object)
            return object.count
        }
    }
}
