import Clients
import HTTP
import Identity
import Ingest
import JSON
import Testing

/// What the decoders make of input no app should send: which requests fail as a whole, and that
/// one bad item is rejected with its index while the valid items around it are kept.
@Suite struct BadInputDecodingTests {
    static let received: Int64 = 1_796_220_000_000_000  // 2026-12-02T14:00:00Z

    static let goodLocation =
        "{\"type\":\"Feature\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[13.4,52.5]},\"properties\":{\"timestamp\":\"2026-12-01T08:00:00Z\",\"horizontal_accuracy\":5,\"speed\":1,\"battery_level\":0.5}}"

    /// A whole request refused: status and code.
    @Test(arguments: [
        ("not json", 400, "malformed_json"),
        ("[]", 400, "wrong_type"),
        ("{}", 400, "missing_field"),
        ("{\"locations\": {}}", 400, "wrong_type"),
        ("{\"locations\": [\(goodLocation), \(goodLocation), \(goodLocation)]}", 413, "too_many_fixes"),
    ])
    func overlandEnvelope(_ body: String, _ status: Int, _ code: String) {
        var limits = IngestLimits()
        limits.batchFixesMax = 2
        #expect(throws: APIError.self) { try OverlandDecoder.decode(Array(body.utf8), limits: limits) }
        do {
            _ = try OverlandDecoder.decode(Array(body.utf8), limits: limits)
        } catch {
            #expect(error.status == status && error.code.rawValue == code, "\(body): \(error)")
        }
    }

    /// One bad element between two good ones: rejected at index 1 with `code`, both others kept.
    @Test(arguments: [
        ("\"a string\"", "not_an_object"),
        ("{\"type\":\"Feature\"}", "missing_field"),
        (
            goodLocation.replacingOccurrences(
                of: "\"geometry\":{\"type\":\"Point\",\"coordinates\":[13.4,52.5]},", with: ""),
            "missing_field"
        ),
        (goodLocation.replacingOccurrences(of: "[13.4,52.5]", with: "\"13.4,52.5\""), "wrong_type"),
        (goodLocation.replacingOccurrences(of: "[13.4,52.5]", with: "[\"13.4\",\"52.5\"]"), "wrong_type"),
        (
            goodLocation.replacingOccurrences(of: "\"timestamp\":\"2026-12-01T08:00:00Z\",", with: ""),
            "missing_field"
        ),
        (
            goodLocation.replacingOccurrences(of: "2026-12-01T08:00:00Z", with: "2026-12-01T08:00:00"),
            "bad_timestamp"
        ),
        (goodLocation.replacingOccurrences(of: "2026-12-01T08:00:00Z", with: "yesterday"), "bad_timestamp"),
        (
            goodLocation.replacingOccurrences(
                of: "\"horizontal_accuracy\":5", with: "\"horizontal_accuracy\":-1"), "out_of_range"
        ),
        (goodLocation.replacingOccurrences(of: "\"speed\":1", with: "\"speed\":\"fast\""), "wrong_type"),
    ])
    func overlandElement(_ element: String, _ code: String) throws {
        let body = "{\"locations\": [\(Self.goodLocation), \(element), \(Self.goodLocation)]}"
        let batch = try OverlandDecoder.decode(Array(body.utf8), limits: IngestLimits())
        #expect(batch.fixes.map(\.index) == [0, 2], "\(element)")
        #expect(batch.rejections.map(\.index) == [1])
        #expect(batch.rejections.first?.rejection.code.rawValue == code, "\(element): \(batch.rejections)")
    }

    @Test func overlandUnknownValuesAreAbsentNotRejected() throws {
        let location = Self.goodLocation.replacingOccurrences(
            of: "\"speed\":1,\"battery_level\":0.5",
            with:
                "\"speed\":-1,\"course\":-1,\"altitude\":12,\"vertical_accuracy\":-1,\"battery_level\":-1,\"battery_state\":\"unknown\""
        )
        let batch = try OverlandDecoder.decode(
            Array("{\"locations\":[\(location)]}".utf8), limits: IngestLimits())
        let fix = try #require(batch.fixes.first?.fix)
        #expect(fix.speedMetersPerSecond == nil && fix.headingDegrees == nil && fix.altitudeMeters == nil)
        #expect(fix.batteryPercent == nil && fix.isCharging == nil && fix.accuracyMeters == 5)
        // Overland rounds the course: 359.6 arrives as 360, which is north.
        let rounded = Self.goodLocation.replacingOccurrences(
            of: "\"speed\":1", with: "\"speed\":1,\"course\":360")
        let north = try OverlandDecoder.decode(
            Array("{\"locations\":[\(rounded)]}".utf8), limits: IngestLimits())
        #expect(north.fixes.first?.fix.headingDegrees == 0)
    }

    static let token = "tok"

    /// OsmAnd-protocol requests whose one fix cannot be read: never a failed request, a rejection.
    @Test(arguments: [
        ("id=tok&timestamp=1796112000", "missing_field"),
        ("id=tok&lat=52.5&timestamp=1796112000", "missing_field"),
        ("id=tok&lat=abc&lon=13.4", "wrong_type"),
        ("id=tok&lat=nan&lon=13.4", "wrong_type"),
        ("id=tok&lat=inf&lon=13.4", "wrong_type"),
        ("id=tok&lat=0x10&lon=13.4", "wrong_type"),
        ("id=tok&location=52.5", "wrong_type"),
        ("id=tok&lat=52.5&lon=13.4&timestamp=yesterday", "bad_timestamp"),
        ("id=tok&lat=52.5&lon=13.4&timestamp=2026-12-01T08:00:00", "bad_timestamp"),
        ("id=tok&lat=52.5&lon=13.4&timestamp=1796112000.5", "bad_timestamp"),
        ("id=tok&lat=52.5&lon=13.4&hdop=-1", "out_of_range"),
        ("id=tok&lat=52.5&lon=13.4&speed=fast", "wrong_type"),
    ])
    func osmandQuery(_ query: String, _ code: String) {
        let decoded = OsmAndDecoder.decode(
            HTTPRequest(method: "GET", target: "/api/find-my/osmand?\(query)"),
            receivedAtMicros: Self.received)
        #expect(decoded.token == Self.token)
        #expect(decoded.batch.fixes.isEmpty)
        #expect(decoded.batch.rejections.map(\.rejection.code.rawValue) == [code], "\(query)")
    }

    @Test func osmandFormAndQueryMergeAndTheFirstValueCounts() throws {
        let request = HTTPRequest(
            method: "POST", target: "/api/find-my/osmand?id=tok&lat=1",
            body: Array("lat=2&lon=3&hdop=&accuracy=0".utf8))
        let decoded = OsmAndDecoder.decode(request, receivedAtMicros: Self.received)
        let fix = try #require(decoded.batch.fixes.first?.fix)
        #expect(decoded.token == "tok" && fix.latitude == 1 && fix.longitude == 3)
        // No accuracy (0) and an empty hdop: unknown; no timestamp: taken as received.
        #expect(fix.accuracyMeters == nil && fix.recordedAtMicros == Self.received)
    }

    @Test(arguments: [
        ("not json", "not_an_object"),
        ("{\"device_id\": \"tok\"}", "missing_field"),
        (
            "{\"device_id\": \"tok\", \"location\": {\"timestamp\": \"2026-12-01T08:00:00Z\"}}",
            "missing_field"
        ),
        (
            "{\"device_id\": \"tok\", \"location\": {\"coords\": {\"latitude\": 1, \"longitude\": 2}}}",
            "missing_field"
        ),
        (
            "{\"device_id\": \"tok\", \"location\": {\"timestamp\": \"soon\", \"coords\": {\"latitude\": 1, \"longitude\": 2}}}",
            "bad_timestamp"
        ),
        (
            "{\"device_id\": \"tok\", \"location\": {\"timestamp\": \"2026-12-01T08:00:00Z\", \"coords\": {\"latitude\": \"1\", \"longitude\": 2}}}",
            "wrong_type"
        ),
    ])
    func osmandJSON(_ body: String, _ code: String) {
        let request = HTTPRequest(
            method: "POST", target: "/api/find-my/osmand",
            headers: HTTPHeaders([("Content-Type", "application/json")]),
            body: Array(body.utf8))
        let decoded = OsmAndDecoder.decode(request, receivedAtMicros: Self.received)
        #expect(decoded.batch.fixes.isEmpty)
        #expect(decoded.batch.rejections.map(\.rejection.code.rawValue) == [code], "\(body)")
    }

    @Test func osmandJSONBatchKeepsTheGoodLocations() {
        let good =
            "{\"timestamp\":\"2026-12-01T08:00:00Z\",\"coords\":{\"latitude\":1,\"longitude\":2,\"accuracy\":0,\"speed\":-1,\"heading\":-1,\"altitude\":0},\"battery\":{\"level\":-1,\"is_charging\":false}}"
        let body = "{\"device_id\":\"tok\",\"location\":[\(good),{\"coords\":{}},\(good)]}"
        let decoded = OsmAndDecoder.decode(
            HTTPRequest(method: "POST", target: "/api/find-my/osmand", body: Array(body.utf8)),
            receivedAtMicros: Self.received)
        #expect(decoded.token == "tok")
        #expect(decoded.batch.fixes.map(\.index) == [0, 2] && decoded.batch.rejections.map(\.index) == [1])
        let fix = decoded.batch.fixes[0].fix
        #expect(fix.accuracyMeters == nil && fix.speedMetersPerSecond == nil && fix.headingDegrees == nil)
        #expect(fix.batteryPercent == nil && fix.isCharging == false)
    }
}
