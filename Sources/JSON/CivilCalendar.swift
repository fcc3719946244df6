/// The proleptic Gregorian calendar in UTC, as days since 1970-01-01: the one calendar of findmy.
/// RFC 3339 text, PostgreSQL's timestamp text and the projection's partition months all count days
/// with it (Howard Hinnant's `days_from_civil` and `civil_from_days`).
///
/// Year 0 is 1 BC and is a leap year, as in ISO 8601 and PostgreSQL's internal form. Exact for every
/// `Int64` microsecond instant (about ±292,000 years); the caller checks months (1...12) and days.
public enum CivilCalendar {
    /// Days from 1970-01-01 to `year`-`month`-`day`; negative before.
    public static func days(year: Int, month: Int, day: Int) -> Int64 {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return Int64(era * 146_097 + dayOfEra - 719_468)
    }

    /// The date `days` after 1970-01-01: the inverse of `days(year:month:day:)`.
    public static func date(days: Int64) -> (year: Int, month: Int, day: Int) {
        let shifted = Int(days) + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// `value` divided by `divisor` rounded toward negative infinity, and the non-negative remainder:
    /// the day of an instant before 1970 is the earlier one.
    public static func floorDivide(_ value: Int64, _ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let remainder = value % divisor
        return remainder < 0 ? (value / divisor - 1, remainder + divisor) : (value / divisor, remainder)
    }
}
