import Postgres
import Projector
import Testing

/// Partition months: computed from the instant, named by the projector, read back by the compactor.
@Suite struct MonthTests {
    @Test func monthOfAnInstantIsTheMonthOfItsTimestampText() {
        var micros: Int64 = -62_135_596_800_000_000  // 0001-01-01
        let stepMicros: Int64 = 86_400_000_000 * 7 + 3_599_999_999  // about a week, not whole hours
        while micros < 253_402_300_800_000_000 {  // 10000-01-01
            let text = PostgresTimestamp.text(micros: micros)
            let year = Int(text.prefix(4))!
            let monthOfYear = Int(text.dropFirst(5).prefix(2))!
            let month = Month(micros: micros)
            guard month.year == year, month.month == monthOfYear else {
                Issue.record("\(micros) is \(text), not \(month.year)-\(month.month)")
                return
            }
            micros += stepMicros
        }
    }

    @Test func instantsAtTheEdgesOfAMonth() {
        let december2025 = Month(micros: 1_767_225_599_999_999)  // 2025-12-31 23:59:59.999999
        #expect(december2025.year == 2025 && december2025.month == 12)
        let january2026 = Month(micros: 1_767_225_600_000_000)
        #expect(january2026.index == december2025.index + 1)
        #expect(january2026.startMicros == 1_767_225_600_000_000)
        let december1969 = Month(micros: -1)
        #expect(december1969.year == 1969 && december1969.month == 12)
        #expect(december1969.startMicros == -2_678_400_000_000)
    }

    @Test func partitionNamesRoundTrip() {
        let month = Month(micros: 1_767_225_600_000_000)
        #expect(month.partitionName == "device_locations_y2026m01")
        #expect(Month(partitionName: "device_locations_y2026m01") == month)
        #expect(Month(partitionName: "device_locations_y2026m12")?.index == month.index + 11)
        #expect(Month(partitionName: "device_locations_default") == nil)
        #expect(Month(partitionName: "device_locations_y2026m13") == nil)
        #expect(Month(partitionName: "device_locations_y2026") == nil)
        #expect(Month(partitionName: "devices") == nil)
    }
}
