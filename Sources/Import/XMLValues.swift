import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// The text of one element a reader wants (a time, a number), gathered from its text nodes. A
/// value longer than `bytesMax` is an error: no field of GPX or KML that findmy reads is that long.
struct XMLFieldText {
    static let bytesMax = 4096
    private(set) var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(64) }

    mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }

    /// False when the value would exceed `bytesMax`.
    mutating func append(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        guard bytes.count + text.count <= Self.bytesMax else { return false }
        bytes.append(contentsOf: text)
        return true
    }

    var string: String { String(decoding: trimmed, as: UTF8.self) }

    /// Without XML's whitespace (space, tab, CR, LF) at either end, as xsd's whitespace collapse.
    var trimmed: ArraySlice<UInt8> { XMLValues.trimmed(bytes[...]) }
}

/// Numbers, times and booleans as XML Schema writes them (GPX and KML declare theirs as xsd types).
enum XMLValues {
    static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    static func trimmed(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, isSpace(first) { slice.removeFirst() }
        while let last = slice.last, isSpace(last) { slice.removeLast() }
        return slice
    }

    static let decimalBytesMax = 64

    /// An xsd:decimal or xsd:double in plain notation ("52.5", "-0.25", "1e3"); nil for anything
    /// else, "NaN", "INF" and hexadecimal included (strtod would take them).
    static func decimal(_ bytes: ArraySlice<UInt8>) -> Double? {
        let text = trimmed(bytes)
        guard !text.isEmpty, text.count < decimalBytesMax else { return nil }
        let allowed = text.allSatisfy { byte in
            (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: ".")
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "e")
                || byte == UInt8(ascii: "E")
        }
        guard allowed else { return nil }
        // strtod wants a NUL-terminated string: one on the stack, not an array per number.
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: decimalBytesMax) { buffer -> Double? in
            guard let start = buffer.baseAddress else { return nil }
            var index = 0
            for byte in text {
                buffer[index] = CChar(bitPattern: byte)
                index += 1
            }
            buffer[index] = 0
            var end: UnsafeMutablePointer<CChar>?
            let value = strtod(start, &end)
            guard let end, end - start == text.count else { return nil }
            return value.isFinite ? value : nil
        }
    }

    /// An xsd:integer in 0...max.
    static func integer(_ bytes: ArraySlice<UInt8>, max: Int) -> Int? {
        let text = trimmed(bytes)
        guard !text.isEmpty, text.count <= 9 else { return nil }
        var value = 0
        for byte in text {
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value <= max ? value : nil
    }

    /// An xsd:boolean: true, false, 1 or 0.
    static func boolean(_ bytes: ArraySlice<UInt8>) -> Bool? {
        switch String(decoding: trimmed(bytes), as: UTF8.self) {
        case "true", "1": true
        case "false", "0": false
        default: nil
        }
    }

    enum Time: Equatable {
        case micros(Int64)
        /// A valid xsd:date, gYearMonth or gYear ("2024-03-01", "2024-03", "2024"): KML allows
        /// them, but a day is no time for a fix.
        case dateOnly
    }

    /// An xsd:dateTime as RFC 3339. A time without a zone is taken as UTC: GPX says its times are
    /// UTC, and a KML file that leaves the zone out gives no better guess. Nil when malformed.
    static func time(_ bytes: ArraySlice<UInt8>) -> Time? {
        let slice = trimmed(bytes)
        let parsed = slice.withUnsafeBufferPointer { buffer in try? RFC3339.parseMicros(buffer) }
        if let parsed { return .micros(parsed) }
        let text = Array(slice)
        if let micros = try? RFC3339.parseMicros(text + [UInt8(ascii: "Z")]) { return .micros(micros) }
        return isDateOnly(text) ? .dateOnly : nil
    }

    /// YYYY, YYYY-MM or YYYY-MM-DD, with a month and day in range.
    private static func isDateOnly(_ text: [UInt8]) -> Bool {
        let parts = text.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard (1...3).contains(parts.count), parts[0].count == 4, integer(parts[0], max: 9999) != nil
        else { return false }
        if parts.count >= 2 {
            guard parts[1].count == 2, let month = integer(parts[1], max: 12), month >= 1 else {
                return false
            }
        }
        if parts.count == 3 {
            guard parts[2].count == 2, let day = integer(parts[2], max: 31), day >= 1 else { return false }
        }
        return true
    }
}
