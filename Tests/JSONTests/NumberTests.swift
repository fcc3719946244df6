import JSON
import Testing

private func number(_ text: String) throws -> JSONValue {
    try JSONParser.parse(text)
}

@Test func integersThatFitInt64AreIntegers() throws {
    #expect(try number("9223372036854775807") == .integer(Int64.max))
    #expect(try number("-9223372036854775808") == .integer(Int64.min))
    #expect(try number("9223372036854775808") == .double(9_223_372_036_854_775_808.0))
    #expect(try number("-9223372036854775809") == .double(-9_223_372_036_854_775_809.0))
    #expect(try number("18446744073709551616") == .double(18_446_744_073_709_551_616.0))
    #expect(try number("9007199254740993") == .integer(9_007_199_254_740_993))  // 2^53 + 1, exact
    #expect(try number("1.0") == .double(1))
    #expect(try number("1e0") == .double(1))
}

@Test func doublesAreCorrectlyRounded() throws {
    let cases: [(String, Double)] = [
        ("1e308", 1e308),
        ("1.7976931348623157e308", Double.greatestFiniteMagnitude),
        ("5e-324", Double.leastNonzeroMagnitude),
        ("2.2250738585072014e-308", Double.leastNormalMagnitude),
        ("0.1", 0.1),
        ("0.2", 0.2),
        ("0.30000000000000004", 0.1 + 0.2),
        ("9007199254740993.0", 9_007_199_254_740_992),  // 2^53 + 1 rounds to even
        ("9007199254740995.0", 9_007_199_254_740_996),
        ("52.5200066", 52.520_006_6),
        ("-122.4194155", -122.419_415_5),
        ("1e22", 1e22),
        ("1e23", 1e23),  // just past the fast path
        ("8.98846567431158e307", 8.98846567431158e307),
        // The value that hung old parsers.
        ("2.2250738585072011e-308", Double(bitPattern: 0x000F_FFFF_FFFF_FFFF)),
        ("123456789012345678901234567890", 123_456_789_012_345_678_901_234_567_890.0),
        ("0.000000000000000000000000000001", 1e-30),
        ("1e-400", 0),
        ("-1e-400", -0.0),
        ("1e-99999999999999999999", 0),
    ]
    for (text, expected) in cases {
        let value = try number(text)
        guard case .double(let double) = value else {
            Issue.record("\(text) parsed as \(value)")
            continue
        }
        #expect(double.bitPattern == expected.bitPattern, "\(text): \(double) != \(expected)")
    }
}

@Test func fastPathAgreesWithTheSlowPath() throws {
    var generator = SeededGenerator(seed: 0xD1CE)
    print("fastPathAgreesWithTheSlowPath seed: \(generator.seed)")
    for _ in 0..<20_000 {
        let mantissa = UInt64.random(in: 0...(1 << 53), using: &generator)
        let exponent = Int.random(in: -22...22, using: &generator)
        let text = "\(mantissa)e\(exponent)"
        guard case .double(let double) = try number(text) else {
            Issue.record("\(text) is not a double")
            return
        }
        #expect(double == Double(text)!, "\(text)")
    }
}
