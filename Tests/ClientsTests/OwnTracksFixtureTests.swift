import Clients
import Events
import Foundation
import Identity
import Ingest
import JSON
import Testing

/// The request bodies of Fixtures/clients/owntracks, exactly as the apps send them, decode into
/// the fixes, places and counted messages of its expected.json.
@Suite struct OwnTracksFixtureTests {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fixtures/clients/owntracks")
    }

    static func cases() throws -> [JSONValue] {
        try JSONParser.parse(Array(try Data(contentsOf: directory.appendingPathComponent("expected.json"))))
            .arrayValue
    }

    static func body(_ file: String) throws -> [UInt8] {
        Array(try Data(contentsOf: directory.appendingPathComponent(file)))
    }

    /// `expected` (a fix of expected.json) against `fix`; doubles to 1e-9, nulls as unknown.
    static func check(_ fix: Fix, _ expected: JSONValue, _ file: String) throws {
        func double(_ key: String) throws -> Double? {
            guard let value = expected[key], value != .null else { return nil }
            return try value.doubleValue
        }
        func close(_ actual: Double?, _ key: String) throws {
            let wanted = try double(key)
            #expect((actual == nil) == (wanted == nil), "\(file): \(key) \(String(describing: actual))")
            if let actual, let wanted { #expect(abs(actual - wanted) < 1e-9, "\(file): \(key) \(actual)") }
        }
        try close(fix.latitude, "latitude")
        try close(fix.longitude, "longitude")
        try close(fix.accuracyMeters, "accuracy_m")
        try close(fix.altitudeMeters, "altitude_m")
        try close(fix.speedMetersPerSecond, "speed_mps")
        try close(fix.headingDegrees, "heading_deg")
        #expect(fix.batteryPercent.map(Int64.init) == (try? expected["battery_pct"]?.int64Value), "\(file)")
        let charging: Bool? = if case .bool(let flag)? = expected["is_charging"] { flag } else { nil }
        #expect(fix.isCharging == charging, "\(file): is_charging")
        #expect(fix.source == (try expected["source"]!.stringValue), "\(file): source")
        #expect(
            fix.recordedAtMicros == (try RFC3339.parseMicros(expected["recorded_at"]!.stringValue)), "\(file)"
        )
    }

    @Test func everyFixtureDecodesToItsExpectedFixes() throws {
        let cases = try Self.cases()
        #expect(cases.count >= 10)
        for entry in cases {
            let file = try entry["file"]!.stringValue
            let decoded = OwnTracks.decode(try Self.body(file), deviceID: 7, clientProtocol: .owntracksHTTP)
            let fixes = try entry["fixes"]!.arrayValue
            #expect(decoded.items.count == fixes.count, "\(file)")
            for (item, expected) in zip(decoded.items, fixes) {
                try Self.check(item.fix, expected, file)
                // The decoded fix passes the same rules as a native one (unknown accuracy allowed).
                let received = try RFC3339.parseMicros(expected["recorded_at"]!.stringValue) + 5_000_000
                var limits = IngestLimits()
                limits.retentionDays = 36_500
                #expect(throws: Never.self) {
                    try ReportDecoder.validate(item.fix, receivedAtMicros: received, limits: limits)
                }
            }
            let places = decoded.places.map { event -> String in
                switch event {
                case .regionTransition: "region_transition"
                case .waypointsReported: "waypoints_reported"
                default: "other"
                }
            }
            #expect(places == (try entry["places"]!.arrayValue.map { try $0.stringValue }), "\(file)")
            #expect(
                decoded.counted == (try entry["counted"]!.arrayValue.map { try $0.stringValue }), "\(file)")
            #expect(decoded.rejections.count == (try entry["rejected"]!.int64Value), "\(file)")
        }
    }

    @Test func theTransitionAndWaypointKeepTheirRegion() throws {
        let transition = OwnTracks.decode(
            try Self.body("android-transition.json"), deviceID: 7, clientProtocol: .owntracksHTTP)
        #expect(
            transition.places == [
                .regionTransition(
                    RegionTransition(
                        deviceID: 7, clientProtocol: .owntracksHTTP, kind: .enter,
                        recordedAtMicros: 1_764_756_300_000_000, regionID: "", regionName: "Home",
                        trigger: "c",
                        latitude: 52.520008, longitude: 13.404954, accuracyMeters: 10))
            ])
        let waypoint = OwnTracks.decode(
            try Self.body("ios-waypoint.json"), deviceID: 7, clientProtocol: .owntracksMQTT)
        #expect(
            waypoint.places == [
                .waypointsReported(
                    WaypointsReported(
                        deviceID: 7, clientProtocol: .owntracksMQTT, complete: false,
                        waypoints: [
                            Waypoint(
                                createdAtMicros: 1_700_000_000_000_000, regionID: "5f3c9a", name: "Home",
                                latitude: 52.520008, longitude: 13.404954, radiusMeters: 120)
                        ]))
            ])
    }
}
