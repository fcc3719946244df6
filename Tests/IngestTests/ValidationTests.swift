import Events
import Identity
import Ingest
import JSON
import Testing

/// Per-fix rules and the envelope: what fails a request, what rejects one fix.
@Suite struct ValidationTests {
    static let now: Int64 = 1_796_220_000_000_000  // 2026-12-02T14:00:00Z
    let limits = IngestLimits()

    func fix(_ extra: String = "", recordedAt: String = "2026-12-02T13:59:00Z") -> String {
        "{\"latitude\": 52.52, \"longitude\": 13.405, \"accuracy_m\": 12, \"source\": \"significant\", \"recorded_at\": \"\(recordedAt)\"\(extra)}"
    }

    func decode(_ fixes: [String], batchID: String = "1b4e28ba-2fa1-11d2-883f-0016d3cca427") throws(APIError)
        -> DecodedReport
    {
        let body = "{\"batch_id\": \"\(batchID)\", \"fixes\": [\(fixes.joined(separator: ","))]}"
        return try ReportDecoder.decode(Array(body.utf8), receivedAtMicros: Self.now, limits: limits)
    }

    func reasonCode(_ fixJSON: String) throws -> String? {
        let report = try decode([fixJSON])
        return report.rejections.first.map { String($0.reason.prefix { $0 != ":" }) }
    }

    @Test func aValidFixIsAcceptedWithEveryField() throws {
        let report = try decode([
            fix(
                ", \"altitude_m\": 34, \"speed_mps\": 1.2, \"heading_deg\": 90, \"battery_pct\": 81, \"is_charging\": false"
            )
        ])
        #expect(report.rejections.isEmpty)
        let fix = try #require(report.fixes.first)
        #expect(fix.latitude == 52.52 && fix.longitude == 13.405 && fix.accuracyMeters == 12)
        #expect(fix.altitudeMeters == 34 && fix.speedMetersPerSecond == 1.2 && fix.headingDegrees == 90)
        #expect(fix.batteryPercent == 81 && fix.isCharging == false && fix.source == "significant")
        #expect(fix.recordedAtMicros == Self.now - 60_000_000 && !fix.clockSuspect)
    }

    @Test(arguments: [
        ("\"latitude\": 90.0001", "out_of_range"), ("\"longitude\": -180.5", "out_of_range"),
        ("\"accuracy_m\": 0", "out_of_range"), ("\"accuracy_m\": -3", "out_of_range"),
        ("\"accuracy_m\": \"12\"", "wrong_type"), ("\"accuracy_m\": null", "missing_field"),
        ("\"latitude\": \"NaN\"", "wrong_type"), ("\"heading_deg\": 360", "out_of_range"),
        ("\"speed_mps\": -1", "out_of_range"), ("\"battery_pct\": 101", "out_of_range"),
        ("\"is_charging\": 1", "wrong_type"), ("\"source\": \"\"", "bad_source"),
        ("\"recorded_at\": \"yesterday\"", "bad_timestamp"), ("\"altitude_m\": 1e6", "out_of_range"),
    ])
    func aBadFieldRejectsTheFix(override: String, code: String) throws {
        // The override comes last; the strict parser refuses duplicate keys, so rebuild the fix.
        let key = String(override.prefix { $0 != ":" }).replacingQuotes
        var members = [
            "latitude": "52.52", "longitude": "13.405", "accuracy_m": "12", "source": "\"significant\"",
            "recorded_at": "\"2026-12-02T13:59:00Z\"",
        ]
        members[key] = String(override.drop { $0 != ":" }.dropFirst())
        let json = "{" + members.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ") + "}"
        #expect(try reasonCode(json) == code, "\(override)")
    }

    /// Each numeric field's range (IngestLimits, docs/api.md "Fix rules"): the limits themselves
    /// are accepted and stored as sent, the nearest doubles beyond them rejected, naming the field.
    static let ranges: [(key: String, lowest: Double, highest: Double, below: Double?, above: Double)] = [
        ("latitude", -90, 90, (-90.0).nextDown, (90.0).nextUp),
        ("longitude", -180, 180, (-180.0).nextDown, (180.0).nextUp),
        ("accuracy_m", 0.01, 1_000_000, (0.01).nextDown, (1_000_000.0).nextUp),
        ("altitude_m", -12_000, 100_000, (-12_000.0).nextDown, (100_000.0).nextUp),
        ("speed_mps", 0, 2_000, -Double.leastNonzeroMagnitude, (2_000.0).nextUp),
        ("heading_deg", 0, (360.0).nextDown, -Double.leastNonzeroMagnitude, 360),
        // A fractional percentage is rounded, so 100.5 would be 101: the range applies before rounding.
        ("battery_pct", 0, 100, -Double.leastNonzeroMagnitude, (100.0).nextUp),
    ]

    func fix(setting key: String, to value: Double) -> String {
        var members = [
            "latitude": "52.52", "longitude": "13.405", "accuracy_m": "12", "source": "\"significant\"",
            "recorded_at": "\"2026-12-02T13:59:00Z\"",
        ]
        members[key] = "\(value)"
        return "{" + members.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ") + "}"
    }

    func stored(_ key: String, _ fix: Fix) -> Double? {
        switch key {
        case "latitude": fix.latitude
        case "longitude": fix.longitude
        case "accuracy_m": fix.accuracyMeters
        case "altitude_m": fix.altitudeMeters
        case "speed_mps": fix.speedMetersPerSecond
        case "heading_deg": fix.headingDegrees
        case "battery_pct": fix.batteryPercent.map { Double($0) }
        default: nil
        }
    }

    @Test(arguments: ranges.indices)
    func eachFieldsLimitsAreAcceptedAndTheValuesBeyondRejected(index: Int) throws {
        let (key, lowest, highest, below, above) = Self.ranges[index]
        for value in [lowest, highest] {
            let report = try decode([fix(setting: key, to: value)])
            #expect(report.rejections.isEmpty, "\(key) \(value): \(report.rejections)")
            #expect(report.fixes.first.flatMap { stored(key, $0) } == value, "\(key) \(value)")
        }
        for value in [below, above, 1e308, -1e308].compactMap({ $0 })
        where !(lowest...highest).contains(value) {
            let report = try decode([fix(setting: key, to: value), fix()])
            #expect(report.fixes.count == 1, "\(key) \(value): only that fix is rejected")
            let reason = try #require(report.rejections.first?.reason, "\(key) \(value)")
            #expect(reason.hasPrefix("out_of_range: \(key) must be within "), "\(reason)")
            #expect(reason.hasSuffix("got \(value)") || reason.hasSuffix("; send 0"), "\(reason)")
        }
    }

    @Test func rangeMessagesSayTheRangeAndTheUnit() throws {
        func reason(_ key: String, _ value: Double) throws -> String? {
            try decode([fix(setting: key, to: value)]).rejections.first?.reason
        }
        #expect(
            try reason("accuracy_m", 1e21)
                == "out_of_range: accuracy_m must be within [0.01, 1000000] metres, got 1e+21")
        #expect(
            try reason("accuracy_m", 0)
                == "out_of_range: accuracy_m must be within [0.01, 1000000] metres, got 0.0")
        #expect(
            try reason("accuracy_m", Double("1e-320")!)
                == "out_of_range: accuracy_m must be within [0.01, 1000000] metres, got 1e-320")
        #expect(
            try reason("heading_deg", 360)
                == "out_of_range: heading_deg must be within [0, 360), got 360.0; send 0")
        #expect(
            try reason("heading_deg", 400) == "out_of_range: heading_deg must be within [0, 360), got 400.0")
        #expect(
            try reason("speed_mps", 1e308) == "out_of_range: speed_mps must be within [0, 2000], got 1e+308")
        #expect(
            try reason("battery_pct", 100.5) == "out_of_range: battery_pct must be within [0, 100], got 100.5"
        )
    }

    @Test func missingAccuracyAndUnknownFieldsRejectOnlyThatFix() throws {
        let report = try decode([
            fix(),
            "{\"latitude\": 1, \"longitude\": 2, \"source\": \"manual\", \"recorded_at\": \"2026-12-02T13:00:00Z\"}",
            fix(", \"colour\": \"red\""), "42", fix(),
        ])
        #expect(report.fixes.count == 2)
        #expect(report.rejections.map(\.index) == [1, 2, 3])
        #expect(report.rejections[0].reason.hasPrefix("missing_field: accuracy_m"))
        #expect(report.rejections[1].reason.hasPrefix("unknown_field: colour"))
        #expect(report.rejections[2].reason.hasPrefix("not_an_object"))
        #expect(report.rejectionCounts == [.missingField: 1, .unknownField: 1, .notAnObject: 1])
    }

    @Test func expiryCountsFromTheEarlierClock() throws {
        // 31 days old: expired. A clock in the future is not expired, only flagged.
        #expect(try reasonCode(fix(recordedAt: "2026-11-01T13:59:00Z")) == "expired")
        #expect(try reasonCode(fix(recordedAt: "2026-11-03T14:00:00Z")) == nil)
        let future = try decode([
            fix(recordedAt: "2046-12-02T14:00:00Z"), fix(recordedAt: "2026-12-02T14:04:59Z"),
        ])
        #expect(future.fixes.map(\.clockSuspect) == [true, false])
    }

    @Test func envelopeProblemsFailTheWholeRequest() throws {
        func status(_ body: String) -> (Int, String)? {
            do {
                _ = try ReportDecoder.decode(Array(body.utf8), receivedAtMicros: Self.now, limits: limits)
                return nil
            } catch {
                return (error.status, error.code.rawValue)
            }
        }
        let id = "\"batch_id\": \"1b4e28ba-2fa1-11d2-883f-0016d3cca427\""
        #expect(status("{\(id), \"fixes\": [") ?? (0, "") == (400, "malformed_json"))
        #expect(status("{\(id), \"fixes\": [{\"latitude\": NaN}]}") ?? (0, "") == (400, "malformed_json"))
        #expect(status("[]") ?? (0, "") == (400, "wrong_type"))
        #expect(status("{\(id), \"fixes\": []}") ?? (0, "") == (400, "empty_batch"))
        #expect(status("{\(id), \"fixes\": {}}") ?? (0, "") == (400, "wrong_type"))
        #expect(status("{\(id)}") ?? (0, "") == (400, "missing_field"))
        #expect(status("{\(id), \"fixes\": [\(fix())], \"device\": 1}") ?? (0, "") == (400, "unknown_field"))
        #expect(
            status("{\"batch_id\": \"nope\", \"fixes\": [\(fix())]}") ?? (0, "") == (400, "invalid_batch_id"))
        #expect(status("{\"batch_id\": 7, \"fixes\": [\(fix())]}") ?? (0, "") == (400, "wrong_type"))
        #expect(status("{\"fixes\": [\(fix())]}") ?? (0, "") == (400, "missing_field"))
    }

    @Test func batchFixesMaxIsEnforced() throws {
        var small = IngestLimits()
        small.batchFixesMax = 3
        let body =
            "{\"batch_id\": \"1b4e28ba-2fa1-11d2-883f-0016d3cca427\", \"fixes\": [\(Array(repeating: fix(), count: 4).joined(separator: ","))]}"
        #expect(throws: APIError.self) {
            try ReportDecoder.decode(Array(body.utf8), receivedAtMicros: Self.now, limits: small)
        }
        do {
            _ = try ReportDecoder.decode(Array(body.utf8), receivedAtMicros: Self.now, limits: small)
        } catch {
            #expect(error.status == 413 && error.code == .tooManyFixes && error.message.contains("3"))
        }
        // The default takes 10,000.
        let full = try decode(Array(repeating: fix(), count: 10_000))
        #expect(full.fixes.count == 10_000)
    }
}

extension String {
    var replacingQuotes: String { filter { $0 != "\"" } }
}
