/// RFC 3339 timestamps as Int64 microseconds since the Unix epoch, with no Foundation.
///
/// Accepted: `YYYY-MM-DDTHH:MM:SS[.f]Z` or with `±HH:MM`, `T` and `Z` in either case, 1 to 9
/// fraction digits (truncated to microseconds: finer precision is noise on a phone's clock).
/// Refused: impossible dates and times (Feb 30, month 13, hour 24), leap second 60 (Unix time
/// has no slot for it), and any instant outside 0001-01-01T00:00:00Z ... 9999-12-31T23:59:59.999999Z,
/// so every parsed value can be formatted back.
public enum RFC3339 {
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public let byteOffset: Int
        public let message: String
        public var description: String { "\(message) at byte \(byteOffset)" }
    }

    static let microsPerSecond: Int64 = 1_000_000
    static let microsPerDay: Int64 = 86_400_000_000
    // Literals, not computed from the calendar: a computed `static let` is a `swift_once` on each
    // read, and these bound every time written (two per fix of a history page). RFC3339Tests
    // parses both texts back to these values.
    /// 0001-01-01T00:00:00Z.
    public static let microsMin: Int64 = -62_135_596_800_000_000
    /// 9999-12-31T23:59:59.999999Z.
    public static let microsMax: Int64 = 253_402_300_799_999_999

    public static func parseMicros(_ text: String) throws(ParseError) -> Int64 {
        try parseMicros(Array(text.utf8))
    }

    public static func parseMicros(_ bytes: [UInt8]) throws(ParseError) -> Int64 {
        let result = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(ParseError) in try parseMicros(buffer) }
        }
        return try result.get()
    }

    /// `parseMicros` of bytes still in their buffer (a string inside a request body), without
    /// copying them into an array.
    public static func parseMicros(_ bytes: UnsafeBufferPointer<UInt8>) throws(ParseError) -> Int64 {
        var reader = Reader(bytes: bytes)
        let year = try reader.digits(4, "a four-digit year")
        try reader.expect("-")
        let month = try reader.digits(2, "a two-digit month")
        try reader.expect("-")
        let day = try reader.digits(2, "a two-digit day")
        try reader.expect("T", orLowercase: true)
        let hour = try reader.digits(2, "a two-digit hour")
        try reader.expect(":")
        let minute = try reader.digits(2, "two-digit minutes")
        try reader.expect(":")
        let second = try reader.digits(2, "two-digit seconds")
        var fractionMicros: Int64 = 0
        if reader.peek == UInt8(ascii: ".") {
            reader.index += 1
            fractionMicros = try reader.fractionMicros()
        }
        let offsetMinutes = try reader.offsetMinutes()
        guard reader.index == bytes.count else {
            throw reader.fail("unexpected characters after the timestamp")
        }

        guard year >= 1 else { throw ParseError(byteOffset: 0, message: "year must be 0001 to 9999") }
        guard month >= 1 && month <= 12 else {
            throw ParseError(byteOffset: 5, message: "month must be 01 to 12")
        }
        guard day >= 1 && day <= daysInMonth(year: year, month: month) else {
            throw ParseError(
                byteOffset: 8,
                message: "day \(day) does not exist in \(year)-\(month < 10 ? "0" : "")\(month)")
        }
        guard hour <= 23 else { throw ParseError(byteOffset: 11, message: "hour must be 00 to 23") }
        guard minute <= 59 else { throw ParseError(byteOffset: 14, message: "minutes must be 00 to 59") }
        guard second <= 59 else {
            throw ParseError(
                byteOffset: 17, message: "seconds must be 00 to 59 (leap seconds are not accepted)")
        }
        let seconds = Int64(hour * 3600 + minute * 60 + second - offsetMinutes * 60)
        let micros =
            CivilCalendar.days(year: year, month: month, day: day) * microsPerDay + seconds * microsPerSecond
            + fractionMicros
        guard micros >= microsMin && micros <= microsMax else {
            throw ParseError(byteOffset: 0, message: "instant is outside years 0001 to 9999 in UTC")
        }
        return micros
    }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ`. `micros` must lie in `microsMin...microsMax`.
    public static func formatMicros(_ micros: Int64) -> String {
        var bytes: [UInt8] = []
        append(micros, fractionDigits: 6, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `YYYY-MM-DDTHH:MM:SS.fffZ`, truncated to the millisecond.
    public static func formatMillis(_ micros: Int64) -> String {
        var bytes: [UInt8] = []
        append(micros, fractionDigits: 3, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the formatted timestamp (fractionDigits 0, 3 or 6) without intermediate Strings.
    public static func append(_ micros: Int64, fractionDigits: Int, to bytes: inout [UInt8]) {
        // Into a fixed buffer, then one append: a per-byte append checks capacity and uniqueness
        // each time, which showed in profiles of the read API (two times per fix, 8,640 fixes a page).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: formattedBytesMax) { buffer in
            let count = write(micros, fractionDigits: fractionDigits, into: buffer.baseAddress!)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// The longest formatted time: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    public static let formattedBytesMax = 27

    /// The date of the last time written, `YYYY-MM-DDT` (11 bytes), and its day since the epoch:
    /// the times of a history page change their date once a day (once in 288 fixes at a 5-minute
    /// cadence), so the calendar's arithmetic runs once a day instead of twice a fix. With six
    /// fraction digits, also the last time whole and the last fraction: a batch's fixes share
    /// their arrival time, and a phone's fixes at a fixed cadence their fraction of a second.
    public struct DayCache: Sendable {
        var days = Int64.min
        /// Bytes 0..<8 and 7..<11 of the date, as stored (two overlapping copies cover the 11).
        var head: UInt64 = 0
        var tail: UInt32 = 0
        /// The last time written with six fraction digits, and its bytes 11..<19 and 18..<26
        /// (`HH:MM:SS.ffffff`, two overlapping copies).
        var micros = Int64.min
        var timeHead: UInt64 = 0
        var timeTail: UInt64 = 0
        /// The last fraction of a second written with six digits, and its bytes 19..<27
        /// (`.ffffffZ`).
        var fraction = -1
        var fractionBytes: UInt64 = 0

        public init() {}
    }

    /// Writes the formatted timestamp at `output`, which must have room for `formattedBytesMax`
    /// bytes, and returns the number of bytes written.
    @inline(__always)
    static func write(_ micros: Int64, fractionDigits: Int, into output: UnsafeMutablePointer<UInt8>) -> Int {
        var cache = DayCache()
        return write(micros, fractionDigits: fractionDigits, into: output, days: &cache)
    }

    /// `write`, copying the date from `cache` when the time falls on its day, else writing the
    /// date and keeping it there.
    @inline(__always)
    static func write(
        _ micros: Int64, fractionDigits: Int, into output: UnsafeMutablePointer<UInt8>,
        days cache: inout DayCache
    ) -> Int {
        precondition(
            micros >= microsMin && micros <= microsMax, "timestamp \(micros) µs is outside years 0001-9999")
        precondition(
            fractionDigits == 0 || fractionDigits == 3 || fractionDigits == 6,
            "fractionDigits must be 0, 3 or 6")
        let raw = UnsafeMutableRawPointer(output)
        if fractionDigits == 6 && micros == cache.micros {
            raw.storeBytes(of: cache.head, as: UInt64.self)
            (raw + 7).storeBytes(of: cache.tail, as: UInt32.self)
            (raw + 11).storeBytes(of: cache.timeHead, as: UInt64.self)
            (raw + 18).storeBytes(of: cache.timeTail, as: UInt64.self)
            output[26] = UInt8(ascii: "Z")
            return 27
        }
        let days = micros >= 0 ? micros / microsPerDay : (micros + 1) / microsPerDay - 1
        let microsOfDay = micros - days * microsPerDay
        // Two digits at a time: two times per fix, 8,640 fixes in a history page.
        func pair(_ value: Int, at position: Int) { Digits.writePair(value, into: output + position) }
        if days == cache.days {
            raw.storeBytes(of: cache.head, as: UInt64.self)
            (raw + 7).storeBytes(of: cache.tail, as: UInt32.self)
        } else {
            let (year, month, day) = CivilCalendar.date(days: days)
            pair(year / 100, at: 0)
            pair(year % 100, at: 2)
            output[4] = UInt8(ascii: "-")
            pair(month, at: 5)
            output[7] = UInt8(ascii: "-")
            pair(day, at: 8)
            output[10] = UInt8(ascii: "T")
            cache.days = days
            cache.head = raw.loadUnaligned(as: UInt64.self)
            cache.tail = (raw + 7).loadUnaligned(as: UInt32.self)
            // The kept time is of another day now (set again below for six fraction digits).
            cache.micros = Int64.min
        }
        let secondOfDay = Int(microsOfDay / microsPerSecond)
        let fraction = Int(microsOfDay % microsPerSecond)
        pair(secondOfDay / 3600, at: 11)
        output[13] = UInt8(ascii: ":")
        pair(secondOfDay / 60 % 60, at: 14)
        output[16] = UInt8(ascii: ":")
        pair(secondOfDay % 60, at: 17)
        var count = 19
        if fractionDigits == 6 {
            if fraction == cache.fraction {
                (raw + 19).storeBytes(of: cache.fractionBytes, as: UInt64.self)
            } else {
                output[19] = UInt8(ascii: ".")
                pair(fraction / 10_000, at: 20)
                pair(fraction / 100 % 100, at: 22)
                pair(fraction % 100, at: 24)
                output[26] = UInt8(ascii: "Z")
                cache.fraction = fraction
                cache.fractionBytes = (raw + 19).loadUnaligned(as: UInt64.self)
            }
            cache.micros = micros
            cache.timeHead = (raw + 11).loadUnaligned(as: UInt64.self)
            cache.timeTail = (raw + 18).loadUnaligned(as: UInt64.self)
            return 27
        } else if fractionDigits == 3 {
            let millis = fraction / 1000
            output[19] = UInt8(ascii: ".")
            output[20] = UInt8(ascii: "0") + UInt8(millis / 100)
            pair(millis % 100, at: 21)
            count = 23
        }
        output[count] = UInt8(ascii: "Z")
        return count + 1
    }

    static func isLeapYear(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 2: return isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    func fail(_ message: String) -> RFC3339.ParseError {
        RFC3339.ParseError(byteOffset: index, message: message)
    }

    mutating func digits(_ count: Int, _ what: String) throws(RFC3339.ParseError) -> Int {
        var value = 0
        for _ in 0..<count {
            guard let byte = peek, byte &- UInt8(ascii: "0") < 10 else { throw fail("expected \(what)") }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            index += 1
        }
        return value
    }

    mutating func expect(_ character: Unicode.Scalar, orLowercase: Bool = false) throws(RFC3339.ParseError) {
        let byte = UInt8(ascii: character)
        guard let found = peek, found == byte || (orLowercase && found == byte | 0x20) else {
            throw fail("expected '\(character)'")
        }
        index += 1
    }

    /// 1 to 9 digits, truncated to microseconds.
    mutating func fractionMicros() throws(RFC3339.ParseError) -> Int64 {
        var micros: Int64 = 0
        var digitCount = 0
        while let byte = peek, byte &- UInt8(ascii: "0") < 10 {
            digitCount += 1
            guard digitCount <= 9 else { throw fail("at most 9 fraction digits are accepted") }
            if digitCount <= 6 { micros = micros * 10 + Int64(byte - UInt8(ascii: "0")) }
            index += 1
        }
        guard digitCount > 0 else { throw fail("expected a digit after '.'") }
        for _ in digitCount..<max(digitCount, 6) { micros *= 10 }
        return micros
    }

    /// `Z`, `z` or `±HH:MM`, as minutes east of UTC.
    mutating func offsetMinutes() throws(RFC3339.ParseError) -> Int {
        guard let byte = peek else { throw fail("expected 'Z' or a UTC offset such as +02:00") }
        if byte == UInt8(ascii: "Z") || byte == UInt8(ascii: "z") {
            index += 1
            return 0
        }
        guard byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") else {
            throw fail("expected 'Z' or a UTC offset such as +02:00")
        }
        index += 1
        let hours = try digits(2, "a two-digit offset hour")
        try expect(":")
        let minutes = try digits(2, "two-digit offset minutes")
        guard hours <= 23 && minutes <= 59 else { throw fail("UTC offset must be at most 23:59") }
        let total = hours * 60 + minutes
        return byte == UInt8(ascii: "-") ? -total : total
    }
}
