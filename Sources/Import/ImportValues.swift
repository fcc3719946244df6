import JSON

/// Reading the values the formats share: times, Google's coordinates, numbers of a tree.
enum ImportValues {
    /// An RFC 3339 time (`2019-05-01T10:00:00.123Z`, `...+02:00`) in microseconds; nil otherwise.
    static func rfc3339Micros(_ text: String) -> Int64? {
        try? RFC3339.parseMicros(text)
    }

    /// Milliseconds since the epoch written as a string of digits (Google's `timestampMs`).
    static func millisStringMicros(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 16, let millis = Int64(text) else { return nil }
        return millis * 1000
    }

    /// A time written either way: Google's files carry `timestamp` or (before 2022) `timestampMs`.
    static func googleMicros(_ value: JSONValue?) -> Int64? {
        switch value {
        case .string(let text)?: return rfc3339Micros(text) ?? millisStringMicros(text)
        case .integer(let millis)?:
            return millis.multipliedReportingOverflow(by: 1000).overflow ? nil : millis * 1000
        case .double(let millis)?:
            return millis.isFinite && millis.magnitude < 1e15 ? Int64(millis) * 1000 : nil
        default: return nil
        }
    }

    /// Degrees from Google's E7 integers. Some Records.json files hold latitudes and longitudes that
    /// overflowed a signed 32-bit integer on Google's side (2^32 too large); those are brought back,
    /// as every reader of the format does. Anything still outside ±180 is kept as written, and the
    /// report path rejects it.
    static func degreesE7(_ value: Double) -> Double {
        var e7 = value
        if e7 > 1_800_000_000 { e7 -= 4_294_967_296 }
        return e7 / 10_000_000
    }

    /// "52.5163170°, 13.3777000°" (the Timeline export on Android) or "geo:52.516317,13.3777"
    /// (on iOS), as (latitude, longitude).
    static func latLng(_ text: String) -> (Double, Double)? {
        var body = Substring(text)
        if body.hasPrefix("geo:") { body = body.dropFirst(4) }
        let parts = body.split(separator: ",", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3 else { return nil }
        func degrees(_ part: Substring) -> Double? {
            var trimmed = part.trimmingSpaces()
            if trimmed.hasSuffix("°") { trimmed = trimmed.dropLast() }
            return Double(trimmed).flatMap { $0.isFinite ? $0 : nil }
        }
        guard let latitude = degrees(parts[0]), let longitude = degrees(parts[1]) else { return nil }
        return (latitude, longitude)
    }

    /// A finite number of a tree, also when written as a string ("12.5": the iOS Timeline export
    /// writes its numbers so).
    static func number(_ value: JSONValue?) -> Double? {
        switch value {
        case .integer(let integer)?: return Double(integer)
        case .double(let double)?: return double
        case .string(let text)?: return Double(text).flatMap { $0.isFinite ? $0 : nil }
        default: return nil
        }
    }

    static func string(_ value: JSONValue?) -> String? {
        guard case .string(let text)? = value else { return nil }
        return text
    }

    /// A value's lowercased spelling for `source` ("WIFI" -> "wifi"), or `fallback`.
    static func source(_ value: JSONValue?, fallback: String) -> String {
        guard case .string(let text)? = value, !text.isEmpty else { return fallback }
        return text.lowercased()
    }
}

extension Substring {
    func trimmingSpaces() -> Substring {
        var result = self
        while let first = result.first, first == " " || first == "\t" { result = result.dropFirst() }
        while let last = result.last, last == " " || last == "\t" || last == "\r" {
            result = result.dropLast()
        }
        return result
    }
}
