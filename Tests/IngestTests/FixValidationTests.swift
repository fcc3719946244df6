import Events
import Ingest
import JSON
import Testing

/// `ReportDecoder.validate(Fix)` (the apps' fixes) checks the decoded values directly; it must give
/// the same answer, reason and message as the native rules do for the same fix as JSON, except that
/// an unknown accuracy is allowed. Every field walks its edge values while the others stay valid,
/// then a seeded mix of bad values checks which rule answers first.
@Suite struct FixValidationTests {
    static let now: Int64 = 1_796_220_000_000_000  // 2026-12-02T14:00:00Z
    let limits = IngestLimits()

    static let base = Fix(
        latitude: 52.52, longitude: 13.405, accuracyMeters: 12, source: "significant",
        recordedAtMicros: now - 60_000_000)

    static let latitudes = [-90.0, 90.0, 90.0001, -90.5, .nan, .infinity, -0.0, 0]
    static let longitudes = [-180.0, 180.0, 180.5, -180.0001, -.infinity, .nan]
    static let accuracies: [Double?] = [nil, 0, -0.0, -3, 1e-300, 1_000_000, 1_000_000.5, .infinity, .nan]
    static let altitudes: [Double?] = [nil, -12_000, -12_000.1, 100_000, 1e6, .nan]
    static let speeds: [Double?] = [nil, 0, -0.0, -1, 2_000, 2_000.01, .infinity]
    static let headings: [Double?] = [nil, 0, -0.0, 359.999, 360, 360.5, -1, .nan]
    static let batteries: [UInt8?] = [nil, 0, 100, 101, 255]
    static let sources = [
        "significant", "", "a-b_c.9", "Significant", "é", String(repeating: "a", count: 64),
        String(repeating: "a", count: 65),
    ]
    static let times: [Int64] = [
        now, now - 60_000_000, now + 3_600_000_000, now - 400 * 86_400_000_000, RFC3339.microsMin - 1,
        RFC3339.microsMax + 1, RFC3339.microsMin, Int64.min, Int64.max,
    ]

    /// The fix as a native client would send it, through the native rules.
    func native(_ fix: Fix) -> Result<Fix, FixRejection> {
        var members: [JSONObject.Member] = [
            .init(key: "latitude", value: .double(fix.latitude)),
            .init(key: "longitude", value: .double(fix.longitude)),
            // Unknown accuracy is the apps' exception; the native rules see a valid one.
            .init(key: "accuracy_m", value: .double(fix.accuracyMeters ?? 1)),
            .init(key: "source", value: .string(fix.source)),
        ]
        if let altitude = fix.altitudeMeters {
            members.append(.init(key: "altitude_m", value: .double(altitude)))
        }
        if let speed = fix.speedMetersPerSecond {
            members.append(.init(key: "speed_mps", value: .double(speed)))
        }
        if let heading = fix.headingDegrees {
            members.append(.init(key: "heading_deg", value: .double(heading)))
        }
        if let battery = fix.batteryPercent {
            members.append(.init(key: "battery_pct", value: .integer(Int64(battery))))
        }
        if let charging = fix.isCharging { members.append(.init(key: "is_charging", value: .bool(charging))) }
        let inCalendar =
            fix.recordedAtMicros >= RFC3339.microsMin && fix.recordedAtMicros <= RFC3339.microsMax
        guard inCalendar else {
            return .failure(FixRejection(.badTimestamp, "the fix time is outside years 0001 to 9999 in UTC"))
        }
        members.append(.init(key: "recorded_at", value: .string(RFC3339.formatMicros(fix.recordedAtMicros))))
        do {
            var valid = try ReportDecoder.decodeFix(
                .object(JSONObject(members)), receivedAtMicros: Self.now, limits: limits)
            valid.accuracyMeters = fix.accuracyMeters
            return .success(valid)
        } catch {
            return .failure(error)
        }
    }

    func direct(_ fix: Fix) -> Result<Fix, FixRejection> {
        Result { () throws(FixRejection) in
            try ReportDecoder.validate(fix, receivedAtMicros: Self.now, limits: limits)
        }
    }

    func expectSame(_ fix: Fix, sourceLocation: SourceLocation = #_sourceLocation) {
        let expected = native(fix)
        let got = direct(fix)
        switch (expected, got) {
        case (.success(let a), .success(let b)):
            // Bit for bit: NaN never gets here, -0.0 must stay -0.0.
            #expect(a.latitude.bitPattern == b.latitude.bitPattern, sourceLocation: sourceLocation)
            #expect(
                a.clockSuspect == b.clockSuspect && a.source == b.source
                    && a.batteryPercent == b.batteryPercent
                    && a.recordedAtMicros == b.recordedAtMicros && a == b, "\(fix)",
                sourceLocation: sourceLocation)
        case (.failure(let a), .failure(let b)):
            #expect(a == b, "\(fix)", sourceLocation: sourceLocation)
        default:
            Issue.record("native \(expected), direct \(got) for \(fix)", sourceLocation: sourceLocation)
        }
    }

    @Test func everyEdgeOfEveryFieldAnswersAsTheNativeRules() {
        var fix = Self.base
        for value in Self.latitudes {
            fix = Self.base
            fix.latitude = value
            expectSame(fix)
        }
        for value in Self.longitudes {
            fix = Self.base
            fix.longitude = value
            expectSame(fix)
        }
        for value in Self.accuracies {
            fix = Self.base
            fix.accuracyMeters = value
            expectSame(fix)
        }
        for value in Self.altitudes {
            fix = Self.base
            fix.altitudeMeters = value
            expectSame(fix)
        }
        for value in Self.speeds {
            fix = Self.base
            fix.speedMetersPerSecond = value
            expectSame(fix)
        }
        for value in Self.headings {
            fix = Self.base
            fix.headingDegrees = value
            expectSame(fix)
        }
        for value in Self.batteries {
            fix = Self.base
            fix.batteryPercent = value
            expectSame(fix)
        }
        for value in Self.sources {
            fix = Self.base
            fix.source = value
            expectSame(fix)
        }
        for value in Self.times {
            fix = Self.base
            fix.recordedAtMicros = value
            expectSame(fix)
        }
        fix = Self.base
        fix.isCharging = true
        fix.clockSuspect = true  // set by the rules, whatever the decoder put there
        expectSame(fix)
    }

    /// Several bad fields at once: the first rule broken is the answer, on both paths.
    @Test func theFirstBrokenRuleAnswersAsTheNativeRules() {
        var generator = SplitMix(seed: 0x5CA7_13)
        func pick<T>(_ values: [T]) -> T { values[Int(generator.next() % UInt64(values.count))] }
        for _ in 0..<2_000 {
            let fix = Fix(
                latitude: pick(Self.latitudes), longitude: pick(Self.longitudes),
                accuracyMeters: pick(Self.accuracies), altitudeMeters: pick(Self.altitudes),
                speedMetersPerSecond: pick(Self.speeds), headingDegrees: pick(Self.headings),
                batteryPercent: pick(Self.batteries), isCharging: pick([nil, true, false]),
                source: pick(Self.sources), recordedAtMicros: pick(Self.times))
            expectSame(fix)
        }
    }
}

/// A small seeded generator, so a failing mix replays.
private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
