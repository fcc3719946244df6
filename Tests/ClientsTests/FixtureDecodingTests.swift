import Clients
import Foundation
import HTTP
import Identity
import Ingest
import JSON
import Testing

/// One request of `Fixtures/clients/<app>/cases.json` (see its README), token filled in.
struct FixtureCase: CustomStringConvertible {
    static let token = "dGVzdC10b2tlbi1mb3ItZml4dHVyZXMtMDEyMzQ1Njc4OWFi"

    var app: String
    var name: String
    var method: String
    var target: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    var expected: [JSONValue]

    var description: String { "\(app)/\(name)" }

    var request: HTTPRequest {
        HTTPRequest(method: method, target: target, headers: HTTPHeaders(headers), body: body)
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/clients")

    static func all(_ app: String) throws -> [FixtureCase] {
        let directory = root.appendingPathComponent(app)
        let manifest = try JSONParser.parse(
            Array(Data(contentsOf: directory.appendingPathComponent("cases.json"))))
        func filled(_ text: String) -> String {
            text.replacingOccurrences(of: "{{DEVICE_TOKEN}}", with: token)
        }
        return try manifest["cases"]!.arrayValue.map { entry in
            let body: String =
                if let file = try entry["body_file"].map({ try $0.stringValue }) {
                    try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
                } else {
                    try entry["body"]!.stringValue
                }
            return FixtureCase(
                app: app, name: try entry["name"]!.stringValue, method: try entry["method"]!.stringValue,
                target: filled(try entry["target"]!.stringValue),
                headers: try entry["headers"]!.arrayValue.map { pair in
                    (try pair[0]!.stringValue, filled(try pair[1]!.stringValue))
                },
                body: Array(filled(body).utf8), expected: try entry["fixes"]!.arrayValue)
        }
    }
}

/// `actual` against a fix of a fixture (the read API's field names); numbers to 1e-9 relative, so
/// that a unit conversion's last bit does not matter. `recorded_at: "received"` matches `received`.
func fixDifferences(_ actual: AppFix, _ expected: JSONValue, receivedAtMicros: Int64) -> [String] {
    var differences: [String] = []
    func compare(_ name: String, _ value: Double?) {
        let want: Double? =
            switch expected[name] {
            case .integer(let integer)?: Double(integer)
            case .double(let double)?: double
            default: nil
            }
        switch (value, want) {
        case (nil, nil): break
        case (let value?, let want?) where abs(value - want) <= 1e-9 * max(1, abs(want)): break
        default: differences.append("\(name): \(String(describing: value)) != \(String(describing: want))")
        }
    }
    compare("latitude", actual.latitude)
    compare("longitude", actual.longitude)
    compare("accuracy_m", actual.accuracyMeters)
    compare("altitude_m", actual.altitudeMeters)
    compare("speed_mps", actual.speedMetersPerSecond)
    compare("heading_deg", actual.headingDegrees)
    compare("battery_pct", actual.batteryPercent.map { $0.rounded() })
    let charging: Bool? = if case .bool(let flag)? = expected["is_charging"] { flag } else { nil }
    if actual.isCharging != charging {
        differences.append("is_charging: \(String(describing: actual.isCharging))")
    }
    if expected["source"] != .string(actual.source) { differences.append("source: \(actual.source)") }
    let recordedAt = try? expected["recorded_at"]!.stringValue
    let wantMicros =
        recordedAt == "received" ? receivedAtMicros : recordedAt.flatMap { try? RFC3339.parseMicros($0) }
    if actual.recordedAtMicros != wantMicros {
        differences.append(
            "recorded_at: \(RFC3339.formatMicros(actual.recordedAtMicros)) != \(recordedAt ?? "?")")
    }
    return differences
}

/// Every fixture request decoded without a server: the fixes each app's request must give.
@Suite struct FixtureDecodingTests {
    static let receivedAt: Int64 = 1_796_220_000_000_000  // 2026-12-02T14:00:00Z

    func check(_ batch: AppBatch, _ fixture: FixtureCase) {
        #expect(batch.rejections.isEmpty, "\(fixture): \(batch.rejections)")
        #expect(batch.fixes.count == fixture.expected.count, "\(fixture): \(batch.fixes.map(\.fix))")
        for (item, expected) in zip(batch.fixes, fixture.expected) {
            let differences = fixDifferences(item.fix, expected, receivedAtMicros: Self.receivedAt)
            #expect(differences.isEmpty, "\(fixture) #\(item.index): \(differences)")
        }
    }

    @Test(
        arguments: try FixtureCase.all("overland")
            + (try FixtureCase.all("gpslogger")).filter {
                $0.target.contains("/overland/")
            })
    func overland(_ fixture: FixtureCase) throws {
        check(try OverlandDecoder.decode(fixture.body, limits: IngestLimits()), fixture)
    }

    @Test(
        arguments: try FixtureCase.all("osmand") + FixtureCase.all("traccar")
            + (try FixtureCase.all("gpslogger")).filter {
                $0.target.contains("/osmand")
            })
    func osmand(_ fixture: FixtureCase) {
        let decoded = OsmAndDecoder.decode(fixture.request, receivedAtMicros: Self.receivedAt)
        #expect(decoded.token == FixtureCase.token, "\(fixture)")
        check(decoded.batch, fixture)
    }

    @Test func overlandSkipsWhatIsNotAFixAndCountsIt() throws {
        let fixture = try #require(try FixtureCase.all("overland").first { $0.name == "all-data-batch" })
        let batch = try OverlandDecoder.decode(fixture.body, limits: IngestLimits())
        // The pause and resume actions and the trip record; `current` comes again in its own batch.
        #expect(batch.skipped == 3)
        #expect(batch.fixes.map(\.index) == [0, 1, 2, 3])
    }
}
