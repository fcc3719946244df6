import JSON
import Testing

/// Known answers for the one calendar every module uses (RFC 3339, PostgreSQL timestamps, partition months).
@Test func civilDaysKnownAnswers() {
    #expect(CivilCalendar.days(year: 1970, month: 1, day: 1) == 0)
    #expect(CivilCalendar.days(year: 2000, month: 3, day: 1) == 11_017)
    #expect(CivilCalendar.days(year: 1969, month: 12, day: 31) == -1)
    #expect(CivilCalendar.days(year: 1, month: 1, day: 1) == -719_162)
    // Year 0 is 1 BC (proleptic Gregorian), a leap year.
    #expect(
        CivilCalendar.days(year: 0, month: 3, day: 1) - CivilCalendar.days(year: 0, month: 2, day: 28) == 2)
    #expect(CivilCalendar.days(year: 9999, month: 12, day: 31) == 2_932_896)
    #expect(CivilCalendar.date(days: 0) == (1970, 1, 1))
    #expect(CivilCalendar.date(days: 19_723) == (2024, 1, 1))
    #expect(CivilCalendar.date(days: -719_163) == (0, 12, 31))
}

@Test func civilDaysRoundTripEveryDayOverTwelveThousandYears() {
    var expected = (year: -2000, month: 1, day: 1)
    var days = CivilCalendar.days(year: -2000, month: 1, day: 1)
    while expected.year < 10_000 {
        #expect(CivilCalendar.days(year: expected.year, month: expected.month, day: expected.day) == days)
        let date = CivilCalendar.date(days: days)
        guard date == expected else {
            Issue.record("\(days): \(date) != \(expected)")
            return
        }
        let leap = expected.year % 4 == 0 && (expected.year % 100 != 0 || expected.year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][expected.month - 1]
        if expected.day < monthDays {
            expected.day += 1
        } else if expected.month < 12 {
            expected = (expected.year, expected.month + 1, 1)
        } else {
            expected = (expected.year + 1, 1, 1)
        }
        days += 1
    }
}
