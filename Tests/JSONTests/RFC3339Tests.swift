import JSON
import Testing

@Test func parsesTheFormsPhonesSend() throws {
    let base: Int64 = 1_796_220_000_000_000  // 2026-12-02T14:00:00Z
    let cases: [(String, Int64)] = [
        ("2026-12-02T14:00:00Z", base),
        ("2026-12-02T14:00:00.123Z", base + 123_000),
        ("2026-12-02t14:00:00.1z", base + 100_000),
        ("2026-12-02T14:00:00.123456789Z", base + 123_456),  // truncated, not rounded
        ("2026-12-02T14:00:00.999999999Z", base + 999_999),
        ("2026-12-02T16:00:00+02:00", base),
        ("2026-12-02T08:30:00-05:30", base),
        ("2026-12-02T14:00:00-00:00", base),
        ("1970-01-01T00:00:00Z", 0),
        ("1969-12-31T23:59:59.999999Z", -1),
        ("2024-02-29T00:00:00Z", 1_709_164_800_000_000),
        ("2000-02-29T12:00:00Z", 951_825_600_000_000),
        ("0001-01-01T00:00:00Z", RFC3339.microsMin),
        ("9999-12-31T23:59:59.999999Z", RFC3339.microsMax),
    ]
    for (text, micros) in cases {
        #expect(try RFC3339.parseMicros(text) == micros, "\(text)")
    }
}

@Test func rejectsImpossibleOrMalformedTimestamps() {
    let cases = [
        "2026-02-30T00:00:00Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
        "2026-00-10T00:00:00Z", "2026-04-31T00:00:00Z", "2026-12-00T00:00:00Z", "2026-12-02T24:00:00Z",
        "2026-12-02T14:60:00Z", "2026-12-02T14:00:60Z", "0000-12-31T00:00:00Z", "0001-01-01T00:00:00+00:01",
        "9999-12-31T23:59:59-00:01", "2026-12-02T14:00:00", "2026-12-02 14:00:00Z", "2026-12-02T14:00:00.Z",
        "2026-12-02T14:00:00.1234567890Z", "2026-12-02T14:00:00+0200", "2026-12-02T14:00:00+24:00",
        "2026-12-02T14:00:00Zjunk", "26-12-02T14:00:00Z", "2026-1-02T14:00:00Z", "", "12345-01-01T00:00:00Z",
    ]
    for text in cases {
        #expect(throws: RFC3339.ParseError.self, "\(text)") { try RFC3339.parseMicros(text) }
    }
}

@Test func formatsMicrosAndMillis() {
    #expect(RFC3339.formatMicros(1_796_220_000_123_456) == "2026-12-02T14:00:00.123456Z")
    #expect(RFC3339.formatMillis(1_796_220_000_123_456) == "2026-12-02T14:00:00.123Z")
    #expect(RFC3339.formatMicros(-1) == "1969-12-31T23:59:59.999999Z")
    #expect(RFC3339.formatMillis(-1) == "1969-12-31T23:59:59.999Z")
    #expect(RFC3339.formatMicros(RFC3339.microsMin) == "0001-01-01T00:00:00.000000Z")
    #expect(RFC3339.formatMicros(RFC3339.microsMax) == "9999-12-31T23:59:59.999999Z")
    #expect(RFC3339.formatMicros(951_825_600_000_000) == "2000-02-29T12:00:00.000000Z")
}

@Test func randomInstantsRoundTrip() throws {
    var generator = SeededGenerator(seed: UInt64.random(in: 0...UInt64.max))
    print("randomInstantsRoundTrip seed: \(generator.seed)")
    for _ in 0..<20_000 {
        let micros = Int64.random(in: RFC3339.microsMin...RFC3339.microsMax, using: &generator)
        let text = RFC3339.formatMicros(micros)
        #expect(try RFC3339.parseMicros(text) == micros, "seed \(generator.seed): \(text)")
        let millis = RFC3339.formatMillis(micros)
        let truncated = micros - ((micros % 1000) + 1000) % 1000
        #expect(try RFC3339.parseMicros(millis) == truncated, "seed \(generator.seed): \(millis)")
    }
}

@Test func leapYearsFollowTheGregorianRule() throws {
    for year in [4, 400, 1600, 2000, 2024, 2400, 9996] {
        let text = String(repeating: "0", count: 4 - String(year).count) + "\(year)-02-29T00:00:00Z"
        let micros = try RFC3339.parseMicros(text)
        #expect(RFC3339.formatMicros(micros).hasPrefix(text.prefix(10)))
    }
    for year in [100, 1700, 1800, 1900, 2100, 2023, 9999] {
        let text = String(repeating: "0", count: 4 - String(year).count) + "\(year)-02-29T00:00:00Z"
        #expect(throws: RFC3339.ParseError.self, "\(text)") { try RFC3339.parseMicros(text) }
    }
}
