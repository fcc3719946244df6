/// Writes JSON into a byte buffer, one token at a time, with commas placed for the caller.
///
/// Strings escape `"`, `\`, control characters, and also `<`, `>`, `&`, U+2028 and U+2029, so the
/// output can be embedded in an HTML `<script>` as is. Doubles use Swift's shortest round-trip
/// form. A non-finite double is a programmer error and traps: the parser never produces one and
/// request validation rejects them, so one reaching a response is a bug, and writing `null`
/// instead would silently change the type of a field clients rely on.
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8]
    /// Whether the next value or key needs a ',' before it.
    private var needsComma = false
    /// Open containers, innermost last: true for an object. Guards the call sequence in debug builds.
    private var containers: [Bool] = []
    private var expectingKey = false

    public init(capacity: Int = 4096) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// A writer into `buffer`, emptied first, its capacity kept: for an array reused from an
    /// earlier answer (`KeptBuffers`).
    public init(buffer: [UInt8]) {
        bytes = buffer
        bytes.removeAll(keepingCapacity: true)
    }

    /// Empties the writer for another document, keeping its capacity: one writer serves many
    /// small documents without an allocation each.
    public mutating func reset() {
        bytes.removeAll(keepingCapacity: true)
        containers.removeAll(keepingCapacity: true)
        needsComma = false
        expectingKey = false
    }

    public mutating func beginObject() {
        beginValue()
        bytes.append(UInt8(ascii: "{"))
        containers.append(true)
        needsComma = false
        expectingKey = true
    }

    public mutating func endObject() {
        assert(containers.last == true && expectingKey, "endObject without a matching beginObject")
        containers.removeLast()
        bytes.append(UInt8(ascii: "}"))
        endValue()
    }

    public mutating func beginArray() {
        beginValue()
        bytes.append(UInt8(ascii: "["))
        containers.append(false)
        needsComma = false
    }

    public mutating func endArray() {
        assert(containers.last == false, "endArray without a matching beginArray")
        containers.removeLast()
        bytes.append(UInt8(ascii: "]"))
        endValue()
    }

    /// The key of the next object member; a value call must follow.
    public mutating func key(_ key: String) {
        assert(containers.last == true && expectingKey, "key outside an object or twice in a row")
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        appendQuoted(key)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
        expectingKey = false
    }

    /// The key of the next object member, written as is: for the fixed keys of a large answer
    /// (`"latitude"` 8,640 times a page), which need no escaping. The key must be ASCII letters,
    /// digits and `_` (checked in debug builds).
    public mutating func plainKey(_ key: StaticString) {
        assert(containers.last == true && expectingKey, "key outside an object or twice in a row")
        let utf8 = UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount)
        assert(
            utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
            }, "plainKey takes [A-Za-z0-9_] only")
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: utf8)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
        expectingKey = false
    }

    public mutating func string(_ value: String) {
        beginValue()
        appendQuoted(value)
        endValue()
    }

    /// A string given as UTF-8 bytes (a value read straight from a database buffer), escaped as
    /// `string(_:)` escapes it.
    public mutating func string(utf8: UnsafeBufferPointer<UInt8>) {
        beginValue()
        appendQuoted(utf8)
        endValue()
    }

    /// A time as an RFC 3339 string in UTC with microseconds (`RFC3339.formatMicros`), formatted
    /// into the output without an intermediate `String`. Traps outside years 0001-9999.
    public mutating func timestamp(micros: Int64) {
        beginValue()
        appendRaw(bytesMax: JSONFlatObject.timestampBytesMax) { output in
            output[0] = UInt8(ascii: "\"")
            let written = RFC3339.write(micros, fractionDigits: 6, into: output.baseAddress! + 1)
            output[written + 1] = UInt8(ascii: "\"")
            return written + 2
        }
        endValue()
    }

    public mutating func int64(_ value: Int64) {
        beginValue()
        appendDecimal(value)
        endValue()
    }

    public mutating func double(_ value: Double) {
        precondition(value.isFinite, "JSONWriter cannot write a non-finite double (\(value))")
        beginValue()
        appendRaw(bytesMax: JSONFlatObject.doubleBytesMax) { output in
            if let written = DecimalDouble.write(value, into: output.baseAddress!) { return written }
            var text = value.description
            return text.withUTF8 { utf8 in
                copyBytes(utf8.baseAddress!, to: output.baseAddress!, count: utf8.count)
                return utf8.count
            }
        }
        endValue()
    }

    public mutating func bool(_ value: Bool) {
        beginValue()
        bytes.append(contentsOf: value ? "true".utf8 : "false".utf8)
        endValue()
    }

    public mutating func null() {
        beginValue()
        bytes.append(contentsOf: "null".utf8)
        endValue()
    }

    /// Appends bytes the caller guarantees are one complete JSON value (a cached fragment).
    public mutating func rawValue(_ json: some Sequence<UInt8>) {
        beginValue()
        bytes.append(contentsOf: json)
        endValue()
    }

    public mutating func value(_ value: JSONValue) {
        switch value {
        case .null: null()
        case .bool(let flag): bool(flag)
        case .integer(let number): int64(number)
        case .double(let number): double(number)
        case .string(let text): string(text)
        case .array(let elements):
            beginArray()
            for element in elements { self.value(element) }
            endArray()
        case .object(let object):
            beginObject()
            for member in object.members {
                key(member.key)
                self.value(member.value)
            }
            endObject()
        }
    }

    /// Writes `value` as a complete document.
    public static func encode(_ value: JSONValue, capacity: Int = 256) -> [UInt8] {
        var writer = JSONWriter(capacity: capacity)
        writer.value(value)
        return writer.bytes
    }

    @inline(__always)
    private mutating func beginValue() {
        assert(containers.last != true || !expectingKey, "a value inside an object needs a key first")
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }

    @inline(__always)
    private mutating func endValue() {
        needsComma = true
        expectingKey = containers.last == true
    }

    /// Writes one complete value of at most `bytesMax` bytes straight into reserved capacity;
    /// `write` returns how many bytes it wrote.
    mutating func appendValue(bytesMax: Int, _ write: (UnsafeMutableBufferPointer<UInt8>) -> Int) {
        beginValue()
        appendRaw(bytesMax: bytesMax, write)
        endValue()
    }

    @inline(__always)
    private mutating func appendRaw(bytesMax: Int, _ write: (UnsafeMutableBufferPointer<UInt8>) -> Int) {
        bytes.append(addingCapacity: bytesMax) { span in
            span.withUnsafeMutableBufferPointer { output, initialized in
                let written = write(output)
                precondition(written <= output.count, "JSONWriter: wrote past the reserved bytes")
                initialized = written
            }
        }
    }

    private mutating func appendDecimal(_ value: Int64) {
        appendRaw(bytesMax: JSONFlatObject.integerBytesMax) { Digits.write(value, into: $0.baseAddress!) }
    }

    private mutating func appendQuoted(_ text: String) {
        var text = text
        text.withUTF8 { appendQuoted($0) }
    }

    private mutating func appendQuoted(_ utf8: UnsafeBufferPointer<UInt8>) {
        appendRaw(bytesMax: JSONFlatObject.stringBytesMax(utf8Count: utf8.count)) { output in
            JSONEscaping.writeQuoted(utf8, into: output.baseAddress!)
        }
    }
}

/// The escaping of every string the writer writes (see `JSONWriter`).
enum JSONEscaping {
    /// Whether any of the `count` bytes at `start` is escaped, or may begin an escaped sequence
    /// (0xE2, the first byte of U+2028 and U+2029): a table of the 256 bytes, `1` where so.
    @inline(__always)
    static func needsEscaping(_ start: UnsafePointer<UInt8>, count: Int) -> Bool {
        let table: StaticString = """
            1111111111111111111111111111111100100010000000000000000000001010\
            0000000000000000000000000000100000000000000000000000000000000000\
            0000000000000000000000000000000000000000000000000000000000000000\
            0000000000000000000000000000000000100000000000000000000000000000
            """
        let flags = table.utf8Start
        var index = 0
        while index < count {
            if flags[Int(start[index])] != UInt8(ascii: "0") { return true }
            index &+= 1
        }
        return false
    }

    /// Writes `utf8` quoted and escaped at `output`, which must have room for 6 bytes per input
    /// byte plus 2; returns the number of bytes written.
    static func writeQuoted(_ utf8: UnsafeBufferPointer<UInt8>, into output: UnsafeMutablePointer<UInt8>)
        -> Int
    {
        // Most strings of a large answer need no escape (a fix's source, 8,640 a history page):
        // one look-up a byte finds that, then they are copied whole.
        if let start = utf8.baseAddress, !needsEscaping(start, count: utf8.count) {
            output[0] = UInt8(ascii: "\"")
            copyBytes(start, to: output + 1, count: utf8.count)
            output[utf8.count + 1] = UInt8(ascii: "\"")
            return utf8.count + 2
        }
        var count = 0
        func put(_ byte: UInt8) {
            output[count] = byte
            count += 1
        }
        func put(_ run: UnsafeBufferPointer<UInt8>) {
            guard let start = run.baseAddress, !run.isEmpty else { return }
            copyBytes(start, to: output + count, count: run.count)
            count += run.count
        }
        put(UInt8(ascii: "\""))
        var runStart = 0
        var index = 0
        while index < utf8.count {
            let byte = utf8[index]
            var escape: StaticString? = nil
            var length = 1
            switch byte {
            case UInt8(ascii: "\""): escape = "\\\""
            case UInt8(ascii: "\\"): escape = "\\\\"
            case 0x0A: escape = "\\n"
            case 0x0D: escape = "\\r"
            case 0x09: escape = "\\t"
            case 0x00..<0x20, UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "&"): escape = ""
            case 0xE2
            where index + 2 < utf8.count && utf8[index + 1] == 0x80
                && (utf8[index + 2] == 0xA8 || utf8[index + 2] == 0xA9):
                escape = utf8[index + 2] == 0xA8 ? "\\u2028" : "\\u2029"
                length = 3
            default: break
            }
            guard let escape else {
                index += 1
                continue
            }
            put(UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
            if escape.utf8CodeUnitCount == 0 {
                let hex: StaticString = "0123456789abcdef"
                put(UnsafeBufferPointer(start: ("\\u00" as StaticString).utf8Start, count: 4))
                put(hex.utf8Start[Int(byte >> 4)])
                put(hex.utf8Start[Int(byte & 0xF)])
            } else {
                put(UnsafeBufferPointer(start: escape.utf8Start, count: escape.utf8CodeUnitCount))
            }
            index += length
            runStart = index
        }
        put(UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        put(UInt8(ascii: "\""))
        return count
    }
}
