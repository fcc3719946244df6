/// Microseconds since the Unix epoch <-> PostgreSQL `timestamptz` text, exact to the microsecond.
///
/// Why text: `to_timestamp($1::float8 / 1e6)` goes through a double and loses microseconds for
/// present-day values (2^53 µs is only 285 years). The text form is exact, and PostgreSQL reads the
/// ISO form whatever the session's DateStyle. We write `2024-05-06 07:08:09.123456+00` (years before 1
/// as `... BC`); we read what the server writes with `DateStyle=ISO`, which every connection sets, in
/// any time zone offset. SQL that prefers numbers can read `(extract(epoch from ts) * 1000000)::bigint`:
/// `extract` returns numeric since PostgreSQL 14, so that is exact too.
public enum PostgresTimestamp {
    static let microsPerDay: Int64 = 86_400_000_000

    /// The `timestamptz` text for `micros` since 1970-01-01 00:00:00 UTC.
    public static func text(micros: Int64) -> String {
        let (days, microsOfDay) = floorDivide(micros, microsPerDay)
        let (year, month, day) = civil(fromDays: days)
        let seconds = microsOfDay / 1_000_000
        let fraction = microsOfDay % 1_000_000
        let bc = year <= 0
        var text = pad(bc ? 1 - year : year, 4) + "-" + pad(month, 2) + "-" + pad(day, 2)
        text += " " + pad(seconds / 3600, 2) + ":" + pad(seconds / 60 % 60, 2) + ":" + pad(seconds % 60, 2)
        text += "." + pad(fraction, 6) + "+00"
        return bc ? text + " BC" : text
    }

    /// Microseconds since the epoch for a `timestamptz` as the server writes it with DateStyle ISO
    /// (`2024-05-06 07:08:09.5+02`, `0044-03-15 12:00:00+00 BC`), or RFC 3339 (`...T...Z`).
    /// Nil for anything else, `infinity` included.
    public static func micros(text: String) -> Int64? {
        var scanner = Scanner(Array(text.utf8))
        guard let year = scanner.number(minDigits: 4, maxDigits: 7), scanner.skip("-"),
            let month = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip("-"),
            let day = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(" ") || scanner.skip("T"),
            let hour = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(":"),
            let minute = scanner.number(minDigits: 2, maxDigits: 2), scanner.skip(":"),
            let second = scanner.number(minDigits: 2, maxDigits: 2),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        var fraction: Int64 = 0
        if scanner.skip(".") {
            var digits = 0
            while let digit = scanner.digit() {
                // More than six digits cannot come from PostgreSQL; refuse rather than round.
                guard digits < 6 else { return nil }
                fraction = fraction * 10 + digit
                digits += 1
            }
            guard digits > 0 else { return nil }
            for _ in digits..<6 { fraction *= 10 }
        }
        guard let offsetSeconds = scanner.offsetSeconds() else { return nil }
        let bc = scanner.skip(" BC")
        guard scanner.atEnd else { return nil }
        let days = days(fromCivil: bc ? 1 - year : year, month, day)
        let secondsOfDay = (hour * 60 + minute) * 60 + second - offsetSeconds
        let (total, overflow) = days.multipliedReportingOverflow(by: microsPerDay)
        let (micros, overflowAgain) = total.addingReportingOverflow(secondsOfDay * 1_000_000 + fraction)
        guard !overflow, !overflowAgain else { return nil }
        return micros
    }

    /// The UTC calendar date of `micros` since the epoch, by arithmetic (no text): year 0 is 1 BC.
    /// The one civil-from-days of the tree, meant to become the shared calendar function.
    public static func civilDate(micros: Int64) -> (year: Int64, month: Int64, day: Int64) {
        civil(fromDays: floorDivide(micros, microsPerDay).0)
    }

    static func floorDivide(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let remainder = value % divisor
        return remainder < 0 ? (value / divisor - 1, remainder + divisor) : (value / divisor, remainder)
    }

    /// Howard Hinnant's days_from_civil / civil_from_days: proleptic Gregorian, year 0 = 1 BC.
    static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}

private struct Scanner {
    let bytes: [UInt8]
    var position = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { position == bytes.count }

    mutating func skip(_ literal: String) -> Bool {
        let expected = Array(literal.utf8)
        guard bytes.count - position >= expected.count,
            Array(bytes[position..<position + expected.count]) == expected
        else { return false }
        position += expected.count
        return true
    }

    mutating func digit() -> Int64? {
        guard position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position])
        else { return nil }
        position += 1
        return Int64(bytes[position - 1] - UInt8(ascii: "0"))
    }

    mutating func number(minDigits: Int, maxDigits: Int) -> Int64? {
        var value: Int64 = 0
        var count = 0
        while count < maxDigits, let digit = digit() {
            value = value * 10 + digit
            count += 1
        }
        return count >= minDigits ? value : nil
    }

    /// `Z`, `+HH`, `+HH:MM` or `+HH:MM:SS` (and `-`), as seconds east of UTC.
    mutating func offsetSeconds() -> Int64? {
        if skip("Z") { return 0 }
        let sign: Int64
        if skip("+") { sign = 1 } else if skip("-") { sign = -1 } else { return nil }
        guard let hours = number(minDigits: 2, maxDigits: 2) else { return nil }
        var seconds = hours * 3600
        if skip(":") {
            guard let minutes = number(minDigits: 2, maxDigits: 2) else { return nil }
            seconds += minutes * 60
            if skip(":") {
                guard let extra = number(minDigits: 2, maxDigits: 2) else { return nil }
                seconds += extra
            }
        }
        return sign * seconds
    }
}
