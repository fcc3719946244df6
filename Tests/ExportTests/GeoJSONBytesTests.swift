import Events
import Export
import JSON
import Testing

/// The GeoJSON writer puts each feature straight into its buffer as fixed pieces and values, each
/// number column starting from a guess of its digits. Its bytes must be exactly those of the same
/// feature written token by token with `JSONWriter` (as the writer was first written), whatever
/// the values: every optional field there or not, numbers of any length in any order (so that
/// the guesses are right, wrong and out of range), sources that need escaping.
@Suite struct GeoJSONBytesTests {
    /// The feature as `JSONWriter`'s calls write it, one value at a time.
    static func tokenFeature(_ fix: Fix, receivedAtMicros: Int64) -> [UInt8] {
        var writer = JSONWriter()
        writer.beginObject()
        writer.plainKey("type")
        writer.string("Feature")
        writer.plainKey("geometry")
        writer.beginObject()
        writer.plainKey("type")
        writer.string("Point")
        writer.plainKey("coordinates")
        writer.beginArray()
        writer.double(fix.longitude)
        writer.double(fix.latitude)
        writer.endArray()
        writer.endObject()
        writer.plainKey("properties")
        writer.beginObject()
        writer.plainKey("recorded_at")
        writer.timestamp(micros: fix.recordedAtMicros)
        writer.plainKey("received_at")
        writer.timestamp(micros: receivedAtMicros)
        let numbers: [(StaticString, Double?)] = [
            ("accuracy_m", fix.accuracyMeters), ("altitude_m", fix.altitudeMeters),
            ("speed_mps", fix.speedMetersPerSecond), ("heading", fix.headingDegrees),
        ]
        for (key, value) in numbers {
            guard let value else { continue }
            writer.plainKey(key)
            writer.double(value)
        }
        if let battery = fix.batteryPercent {
            writer.plainKey("battery")
            writer.int64(Int64(battery))
        }
        if let charging = fix.isCharging {
            writer.plainKey("charging")
            writer.bool(charging)
        }
        writer.plainKey("source")
        writer.string(fix.source)
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }

    /// A number as one of the shapes that reach an export: a device's decimal of 0 to 17 fraction
    /// digits, any double, a power of two or zero (which the fast path leaves to `description`),
    /// or one far out of the fast path's range.
    static func number(seed: UInt64) -> Double {
        var generator = SplitMix(seed)
        switch generator.next() % 6 {
        case 0, 1:
            let digits = Int(generator.next() % 18)
            let fraction = String(generator.next()).prefix(digits)
            return Double("\(Int(generator.next() % 2000) - 1000).\(fraction)0")!
        case 2: return Double(generator.next() % 1_000_000) / 1_000_000 * 360 - 180
        case 3: return [0, 1, 2, 0.5, 4, 1024, -8][Int(generator.next() % 7)]
        case 4: return [1e-7, -2.5e-5, 1e15, 123_456_789_012_345_680, 0.0009][Int(generator.next() % 5)]
        default: return Double(generator.next() % 100_000) / 10
        }
    }

    @Test func featuresAreByteForByteTheTokenWritersOnes() throws {
        var generator = SplitMix(41)
        let sources = ["significant", "visit", "a\"b\\c\n\u{1}", "é€😀", "", "gps"]
        var fixes: [Fix] = []
        for index in 0..<20_000 {
            func maybe() -> Double? {
                generator.next() % 4 == 0 ? nil : Self.number(seed: generator.next())
            }
            fixes.append(
                Fix(
                    latitude: Self.number(seed: generator.next()),
                    longitude: Self.number(seed: generator.next()), accuracyMeters: maybe(),
                    altitudeMeters: maybe(), speedMetersPerSecond: maybe(), headingDegrees: maybe(),
                    batteryPercent: generator.next() % 3 == 0 ? nil : UInt8(generator.next() % 101),
                    isCharging: generator.next() % 3 == 0 ? nil : generator.next() % 2 == 0,
                    source: sources[index % sources.count],
                    recordedAtMicros: Int64(generator.next() % 253_402_300_799_999_999)))
        }
        var expected = Array("{\"type\":\"FeatureCollection\",\"features\":[\n".utf8)
        for (index, fix) in fixes.enumerated() {
            if index > 0 { expected += Array(",\n".utf8) }
            expected += Self.tokenFeature(fix, receivedAtMicros: fix.recordedAtMicros + Int64(index))
        }
        expected += Array("]}\n".utf8)

        var written: [UInt8] = []
        var exporter = FixExporter(format: .geojson, flushBytes: 4096) { written += $0 }
        for (index, fix) in fixes.enumerated() {
            try exporter.write(fix, receivedAtMicros: fix.recordedAtMicros + Int64(index))
        }
        try exporter.finish()
        let expectedLines = String(decoding: expected, as: UTF8.self).split(separator: "\n")
        let writtenLines = String(decoding: written, as: UTF8.self).split(separator: "\n")
        #expect(writtenLines.count == expectedLines.count)
        let different = zip(writtenLines, expectedLines).enumerated().filter { $0.element.0 != $0.element.1 }
        #expect(different.isEmpty, "\(different.prefix(3).map { "line \($0.offset): \($0.element)" })")
    }
}

/// SplitMix64: the same numbers on every run, so a failure replays.
struct SplitMix {
    private var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
