import JSON

/// The time formats the apps of the OsmAnd protocol and Overland send, as microseconds since 1970
/// (UTC). Each is named after the app or source code that writes it (docs/clients.md).
enum AppTime {
    /// An ISO 8601 date and time with a zone: RFC 3339 (`2026-12-01T08:00:00Z`,
    /// `2026-12-01T09:00:00.000+01:00`), or the basic offsets `+0100` and `+01` that older Overland
    /// versions (`%z`) and Java's `Z` pattern write. A time without a zone is refused: the device's
    /// zone is unknown, and guessing UTC would move the fix by hours.
    static func iso8601Micros(_ text: String) -> Int64? {
        var bytes = Array(text.utf8)
        // `...SS±HHMM` and `...SS±HH`: the offset starts after the seconds (or their fraction).
        if let sign = bytes.lastIndex(where: { $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") }),
            sign >= 19
        {
            let digits = bytes[(sign + 1)...]
            if digits.count == 4, digits.allSatisfy(isDigit) {
                bytes.insert(UInt8(ascii: ":"), at: sign + 3)
            } else if digits.count == 2, digits.allSatisfy(isDigit) {
                bytes += Array(":00".utf8)
            }
        }
        return try? RFC3339.parseMicros(bytes)
    }

    /// `iso8601Micros` of a string's bytes still in the body: an RFC 3339 time (what Overland
    /// sends) is read in place; the basic offsets (a sign at byte 19 or later) go through the
    /// `String` form, which rewrites them.
    static func iso8601Micros(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        if bytes.count > 19 {
            for index in 19..<bytes.count
            where bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                return iso8601Micros(String(decoding: bytes, as: UTF8.self))
            }
        }
        return try? RFC3339.parseMicros(bytes)
    }

    /// The OsmAnd protocol's `timestamp`, as the Traccar server reads it (OsmAndProtocolDecoder):
    /// whole seconds since 1970, or milliseconds when the number is not below 2^31 - 1 (OsmAnd
    /// sends milliseconds, Traccar Client and GPSLogger's `%TIMESTAMP` seconds); a value with a `T`
    /// is ISO 8601; otherwise `yyyy-MM-dd HH:mm:ss`, read as UTC.
    static func osmandMicros(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        if !bytes.isEmpty, bytes.count <= 18, bytes.allSatisfy(isDigit) {
            guard let number = Int64(text) else { return nil }
            let micros = number < Int64(Int32.max) ? number * 1_000_000 : number * 1_000
            return micros <= RFC3339.microsMax ? micros : nil
        }
        if bytes.contains(UInt8(ascii: "T")) || bytes.contains(UInt8(ascii: "t")) {
            return iso8601Micros(text)
        }
        // `yyyy-MM-dd HH:mm:ss`: the space becomes the `T` of RFC 3339, and the zone is UTC.
        guard bytes.count == 19, bytes[10] == UInt8(ascii: " ") else { return nil }
        var rfc = bytes
        rfc[10] = UInt8(ascii: "T")
        return try? RFC3339.parseMicros(rfc + [UInt8(ascii: "Z")])
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
