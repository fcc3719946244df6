import Testing

@testable import JSON

/// Doubles are copied into reserved capacity: the output must be exactly what `description`
/// writes, for the values clients see (coordinates, accuracies) and the edge cases.
@Test func doublesMatchDescription() {
    var random = SeededGenerator(seed: 11)
    var values: [Double] = [
        0, -0.0, 1, -1, 0.1, 52.52, 13.405, 1e-7, .leastNonzeroMagnitude, 2.2250738585072014e-308,
        1.7976931348623157e308,
        -1.7976931348623157e308, 123_456_789_012_345_680, 1e16, 1e15, 9_007_199_254_740_992,
        0.30000000000000004,
        100, 12.000001, -179.99999999999997, 90,
    ]
    for _ in 0..<100_000 {
        values.append(Double(bitPattern: random.next()))
        values.append(Double.random(in: -180...180, using: &random))
        values.append(Double.random(in: 0...1e15, using: &random))
        values.append(Double.random(in: 0...0.01, using: &random))
        // Decimals as clients send them: 0 to 17 fraction digits, parsed from their text.
        let digits = Int.random(in: 0...17, using: &random)
        let whole = Int.random(in: -999...999, using: &random)
        let fraction = String(UInt64.random(in: 0...UInt64.max, using: &random)).prefix(digits)
        values.append(Double("\(whole).\(fraction)0")!)
        // Neighbours of powers of ten and two, and of the fast path's bounds.
        let power = Double(sign: .plus, exponent: Int.random(in: -12...52, using: &random), significand: 1)
        values.append(power)
        values.append(power.nextUp)
        values.append(power.nextDown)
        let ten = DecimalPowers.values[Int.random(in: 0..<DecimalPowers.values.count, using: &random)]
        values.append(ten.nextUp)
        values.append(ten.nextDown)
        // Whole numbers, of every size up to the fast path's bound and past it.
        let bits = UInt64.random(in: 1...53, using: &random)
        let wholeNumber = Double(UInt64.random(in: 0...(1 << bits), using: &random))
        values.append(wholeNumber)
        values.append(-wholeNumber)
    }
    var mismatches: [String] = []
    for value in values where value.isFinite {
        var writer = JSONWriter()
        writer.double(value)
        let written = String(decoding: writer.bytes, as: UTF8.self)
        if written != value.description && mismatches.count < 10 {
            mismatches.append("\(value.description) (bits \(value.bitPattern)) written as \(written)")
        }
    }
    #expect(mismatches.isEmpty, "\(mismatches)")
}

/// With a guess of the fraction digits (`JSONFlatObject.double(_:fractionDigitsGuess:)`), right,
/// wrong by one either way, far off or out of range, the output is still exactly `description`'s,
/// and the guess comes back as the fraction digits written whenever the fast path wrote them.
@Test func doublesWithAGuessMatchDescription() {
    var random = SeededGenerator(seed: 13)
    var running = 7
    var mismatches: [String] = []
    for round in 0..<200_000 {
        let value: Double =
            switch round % 4 {
            case 0: Double(bitPattern: random.next())
            case 1: Double.random(in: -180...180, using: &random)
            default: devicesDecimal(&random)
            }
        guard value.isFinite else { continue }
        // The running guess, a random one, and the right one (`DecimalDouble.nearbyDigits`).
        let description = value.description
        let right =
            description.firstIndex(of: ".").map { description[description.index(after: $0)...].count } ?? 0
        let guesses = [running, Int.random(in: -2...22, using: &random), right]
        for (index, start) in guesses.enumerated() {
            var guess = start
            let written = JSONFlatObject.append(value, fractionDigitsGuess: &guess)
            if written != value.description && mismatches.count < 10 {
                mismatches.append("\(value.description) with guess \(start) written as \(written)")
            }
            if guess != start, let point = written.firstIndex(of: ".") {
                let fraction = written[written.index(after: point)...]
                #expect(guess == (fraction == "0" ? 0 : fraction.count), "\(written) with guess \(start)")
            }
            if index == 0 { running = guess }
        }
    }
    #expect(mismatches.isEmpty, "\(mismatches)")
}

/// A decimal as devices send them: 0 to 17 fraction digits, parsed from its text.
private func devicesDecimal(_ random: inout SeededGenerator) -> Double {
    let whole = Int.random(in: -999...999, using: &random)
    let fraction = String(random.next()).prefix(Int.random(in: 0...17, using: &random))
    return Double("\(whole).\(fraction)0")!
}

extension JSONFlatObject {
    /// `value` written alone through `append(to:)` and `double(_:fractionDigitsGuess:)`.
    fileprivate static func append(_ value: Double, fractionDigitsGuess guess: inout Int) -> String {
        var bytes: [UInt8] = []
        append(to: &bytes, bytesMax: doubleBytesMax) { object in
            object.double(value, fractionDigitsGuess: &guess)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// `append(to:)` writes after what the array holds, `raw` pieces as they are, and nothing past
/// what was written however large the bound.
@Test func appendWritesAfterTheBytesThere() {
    var bytes = Array("[".utf8)
    for (index, name) in ["a", "b\"c"].enumerated() {
        JSONFlatObject.append(to: &bytes, bytesMax: 4096) { object in
            if index > 0 { object.raw(",\n") }
            object.beginObject()
            object.key("name")
            var copy = name
            copy.withUTF8 { object.string(utf8: $0) }
            object.raw(",\"n\":")
            object.int64(Int64(index))
            object.endObject()
        }
    }
    bytes.append(UInt8(ascii: "]"))
    #expect(
        String(decoding: bytes, as: UTF8.self) == "[{\"name\":\"a\",\"n\":0},\n{\"name\":\"b\\\"c\",\"n\":1}]"
    )
}

private enum DecimalPowers {
    static let values: [Double] = (-4...16).map { exponent in Double("1e\(exponent)")! }
}

/// A flat object writes byte for byte what the token-by-token calls write, commas included, inside
/// an array and after other values.
@Test func flatObjectMatchesTokenWriter() {
    var random = SeededGenerator(seed: 12)
    let names = ["plain", "a\"b\\c</script>&\n\u{1}", "é€😀", "", "x\u{2028}y"]
    for round in 0..<500 {
        let latitude = Double.random(in: -90...90, using: &random)
        let altitude: Double? = round % 3 == 0 ? nil : Double.random(in: -400...9000, using: &random)
        let battery = Int64.random(in: Int64.min...Int64.max, using: &random) >> (round % 64)
        let micros = Int64.random(in: RFC3339.microsMin...RFC3339.microsMax, using: &random)
        let charging = round % 2 == 0
        let name = names[round % names.count]

        var tokens = JSONWriter()
        tokens.beginArray()
        tokens.int64(7)
        tokens.beginObject()
        tokens.plainKey("latitude")
        tokens.double(latitude)
        tokens.plainKey("altitude_m")
        if let altitude { tokens.double(altitude) } else { tokens.null() }
        tokens.plainKey("battery_pct")
        tokens.int64(battery)
        tokens.plainKey("name")
        tokens.string(name)
        tokens.plainKey("latest")
        tokens.beginObject()
        tokens.plainKey("recorded_at")
        tokens.timestamp(micros: micros)
        tokens.plainKey("is_charging")
        tokens.bool(charging)
        tokens.endObject()
        tokens.plainKey("empty")
        tokens.beginObject()
        tokens.endObject()
        tokens.endObject()
        tokens.endArray()

        var flat = JSONWriter()
        flat.beginArray()
        flat.int64(7)
        flat.flatObject(bytesMax: 400) { object in
            object.key("latitude")
            object.double(latitude)
            object.key("altitude_m")
            if let altitude { object.double(altitude) } else { object.null() }
            object.key("battery_pct")
            object.int64(battery)
            object.key("name")
            var copy = name
            copy.withUTF8 { object.string(utf8: $0) }
            object.key("latest")
            object.beginObject()
            object.key("recorded_at")
            object.timestamp(micros: micros)
            object.key("is_charging")
            object.bool(charging)
            object.endObject()
            object.key("empty")
            object.beginObject()
            object.endObject()
        }
        flat.endArray()
        #expect(
            String(decoding: flat.bytes, as: UTF8.self) == String(decoding: tokens.bytes, as: UTF8.self),
            "round \(round)")
    }
}

/// The fast path is taken for the values a history page is made of (else it would only be tested,
/// never used), and declines the cases it leaves to `description`.
@Test func decimalFastPathCoversCoordinates() {
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { buffer in
        for value in [
            52.52, -13.405, 12.0, 0.001, 52.520008123456789, 179.99999999999997, 999_999_999_999_999.0,
            0.0012345678901234567, 12.5, 4.25, 7.75, 100.125,
            // Whole numbers, powers of two among them, before any search.
            0.0, -0.0, 2.0, 16.0, -32.0, 65.0, 1_125_899_906_842_624.0 / 2,
        ] {
            let written = DecimalDouble.write(value, into: buffer.baseAddress!)
            #expect(written.map { String(decoding: buffer[..<$0], as: UTF8.self) } == value.description)
        }
        for value in [1e15, 0.0009, 0.5, 1e300, 2.0.nextUp * 1e15] {
            #expect(DecimalDouble.write(value, into: buffer.baseAddress!) == nil, "\(value)")
        }
    }
}

/// Every length, short ones through overlapping words and long ones through `memcpy`, copies
/// exactly its bytes and nothing around them.
@Test func copyBytesCopiesExactlyCountBytes() {
    let source = (0..<64).map { UInt8($0 + 1) }
    for count in 0...40 {
        var destination = [UInt8](repeating: 0, count: 64)
        source.withUnsafeBufferPointer { from in
            destination.withUnsafeMutableBufferPointer { to in
                copyBytes(from.baseAddress!, to: to.baseAddress! + 3, count: count)
            }
        }
        #expect(destination[3..<(3 + count)].elementsEqual(source[0..<count]), "count \(count)")
        #expect(
            destination[0..<3].allSatisfy { $0 == 0 } && destination[(3 + count)...].allSatisfy { $0 == 0 })
    }
}

/// Times written with one `RFC3339.DayCache` kept from time to time (the date, the whole time,
/// the fraction) are what each is alone: repeated times, times a cadence apart sharing their
/// fraction, a day's last and next microsecond, times before 1970, and random ones, in an order
/// that makes each part of the cache hit and miss; three fraction digits mixed in on the same cache.
@Test func timesWrittenWithAKeptDayAreTheTimesAlone() {
    var random = SeededGenerator(seed: 17)
    let day: Int64 = 86_400_000_000
    var times: [Int64] = []
    var start: Int64 = 1_796_000_000_693_755
    for _ in 0..<300 {
        times += [start, start, start + 300_000_000, start + 300_000_000, start + 300_000_001]
        start += 300_000_000 * Int64.random(in: 1...400, using: &random)
    }
    times += [day - 1, day, day - 1, -1, 0, -1, -day, -day - 1, RFC3339.microsMin, RFC3339.microsMax]
    for _ in 0..<2_000 {
        times.append(Int64.random(in: RFC3339.microsMin...RFC3339.microsMax, using: &random))
        times.append(times[times.count - 2 - Int.random(in: 0...1, using: &random)])
    }
    var cache = RFC3339.DayCache()
    var mismatches: [String] = []
    for (index, micros) in times.enumerated() {
        let digits = index % 7 == 3 ? 3 : 6
        var kept = [UInt8](repeating: 0, count: RFC3339.formattedBytesMax)
        var alone = [UInt8](repeating: 0, count: RFC3339.formattedBytesMax)
        let keptCount = kept.withUnsafeMutableBufferPointer {
            RFC3339.write(micros, fractionDigits: digits, into: $0.baseAddress!, days: &cache)
        }
        let aloneCount = alone.withUnsafeMutableBufferPointer {
            RFC3339.write(micros, fractionDigits: digits, into: $0.baseAddress!)
        }
        if kept.prefix(keptCount) != alone.prefix(aloneCount) && mismatches.count < 10 {
            mismatches.append(
                "\(micros) (\(digits)): \(String(decoding: kept.prefix(keptCount), as: UTF8.self))")
        }
    }
    #expect(mismatches.isEmpty, "\(mismatches)")
    #expect(RFC3339.formatMicros(1_796_000_000_693_755) == "2026-11-30T00:53:20.693755Z")
}

/// Every byte alone, and inside a string, is escaped as `JSONWriter` documents whether the
/// string takes the path of strings without escapes (a table of the 256 bytes) or not.
@Test func everyByteIsEscapedAsDocumented() {
    /// The escaped form of ASCII `bytes`, spelled out.
    func expected(_ bytes: [UInt8]) -> String {
        var out = "\""
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""): out += "\\\""
            case UInt8(ascii: "\\"): out += "\\\\"
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0x00..<0x20, UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "&"):
                let hex = String(byte, radix: 16)
                out += "\\u00" + (hex.count == 1 ? "0" : "") + hex
            default: out.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return out + "\""
    }
    func written(_ bytes: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: bytes.count * 6 + 2)
        let count = bytes.withUnsafeBufferPointer { utf8 in
            output.withUnsafeMutableBufferPointer { JSONEscaping.writeQuoted(utf8, into: $0.baseAddress!) }
        }
        return Array(output.prefix(count))
    }
    for byte in UInt8(0)..<0x80 {
        for bytes in [[byte], Array("significant".utf8) + [byte] + Array("gps".utf8)] {
            #expect(String(decoding: written(bytes), as: UTF8.self) == expected(bytes), "byte \(byte)")
        }
    }
    // Bytes of 0x80 and above are copied as they are, but for U+2028 and U+2029.
    for byte in UInt8(0x80)...0xFF {
        let bytes: [UInt8] = [0x61, byte, 0x62]
        #expect(written(bytes) == [0x22] + bytes + [0x22], "byte \(byte)")
    }
    #expect(
        String(decoding: written(Array("a\u{2028}b\u{2029}c\u{20AC}".utf8)), as: UTF8.self)
            == "\"a\\u2028b\\u2029c\u{20AC}\"")
}
