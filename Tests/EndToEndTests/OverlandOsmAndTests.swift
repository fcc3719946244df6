import Foundation
import HTTPClient
import JSON
import Testing

/// A request of `Fixtures/clients/<app>/cases.json` (see its README) with a real device token.
struct AppRequestFixture: CustomStringConvertible {
    var app: String
    var name: String
    var method: String
    var target: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    var status: Int
    var answer: String
    var fixes: [JSONValue]

    var description: String { "\(app)/\(name)" }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/clients")

    static func all(_ app: String, token: String) throws -> [AppRequestFixture] {
        let directory = root.appendingPathComponent(app)
        let manifest = try JSONParser.parse(
            Array(try Data(contentsOf: directory.appendingPathComponent("cases.json"))))
        func filled(_ text: String) -> String {
            text.replacingOccurrences(of: "{{DEVICE_TOKEN}}", with: token)
        }
        return try manifest["cases"]!.arrayValue.map { entry in
            let body: String =
                if let file = entry["body_file"] {
                    try String(
                        contentsOf: directory.appendingPathComponent(try file.stringValue), encoding: .utf8)
                } else {
                    try entry["body"]!.stringValue
                }
            return AppRequestFixture(
                app: app, name: try entry["name"]!.stringValue, method: try entry["method"]!.stringValue,
                target: filled(try entry["target"]!.stringValue),
                headers: try entry["headers"]!.arrayValue.map {
                    (try $0[0]!.stringValue, filled(try $0[1]!.stringValue))
                },
                body: Array(filled(body).utf8), status: Int(try entry["status"]!.int64Value),
                answer: try entry["answer"]!.stringValue, fixes: try entry["fixes"]!.arrayValue)
        }
    }

    func send(_ connection: HTTPConnection) throws -> HTTPClientResponse {
        try connection.send(method, target, headers: headers, body: body)
    }
}

/// Overland, GPSLogger, Traccar Client and OsmAnd against a real `findmy serve` (embedded
/// PostgreSQL): every fixture request as the app sends it, what the app gets back, the history it
/// leaves (units converted, both clocks), a resend answered as a duplicate.
@Suite(.serialized) struct OverlandOsmAndTests {
    struct Setup {
        let data = ScratchDirectory("findmy-apps")
        let server: ServerProcess
        let connection: HTTPConnection
        let userToken: String

        init(projector: Bool = true) throws {
            userToken = try addUser("anna", data: data.path)
            // The fixtures' dates are fixed (late 2026, and the Traccar server's 2013-2016 vectors).
            server = try ServerProcess(
                data: data.path,
                extraArguments: (projector ? ["--projector", "on"] : []) + ["--retention-days", "36500"])
            connection = HTTPConnection(address: server.address)
        }

        /// A new device: its id and token.
        func device() throws -> (id: Int64, token: String) {
            let enrolled = try enrol(connection, userToken: userToken, uuid: UUID().uuidString)
            return (enrolled.int("device_id")!, enrolled.string("device_token")!)
        }

        func stop() { _ = server.stop() }
    }

    static func metric(_ text: String, _ line: String) -> Int? {
        text.split(separator: "\n").first { $0.hasPrefix(line + " ") }.flatMap {
            Int($0.split(separator: " ").last!)
        }
    }

    @Test(arguments: ["overland", "gpslogger", "traccar", "osmand"])
    func theAppsRequestsBecomeHistory(_ app: String) throws {
        let setup = try Setup()
        defer { setup.stop() }
        // One device per request, so that each history is that request's alone.
        let requests = try AppRequestFixture.all(app, token: "{{DEVICE_TOKEN}}").map { fixture in
            let device = try setup.device()
            return (
                device, try AppRequestFixture.all(app, token: device.token).first { $0.name == fixture.name }!
            )
        }
        var windows: [String: (Int64, Int64)] = [:]
        for (_, fixture) in requests {
            let before = Int64(Date().timeIntervalSince1970 * 1_000_000)
            let response = try fixture.send(setup.connection)
            windows[fixture.name] = (
                before - 1_000_000, Int64(Date().timeIntervalSince1970 * 1_000_000) + 1_000_000
            )
            #expect(response.status == fixture.status, "\(fixture): \(response.status) \(response.bodyText)")
            #expect(response.bodyText == fixture.answer, "\(fixture): \(response.bodyText)")
            if !fixture.answer.isEmpty {
                #expect(response.header("Content-Type")?.hasPrefix("application/json") == true, "\(fixture)")
            }
            // The app resends after a timeout: the same answer, nothing appended.
            let resent = try fixture.send(setup.connection)
            #expect(resent.status == fixture.status && resent.bodyText == fixture.answer, "\(fixture) resent")
        }
        try waitForProjector(setup.data.path)

        for (device, fixture) in requests {
            let history = try get(
                setup.connection, "/api/find-my/devices/\(device.id)/locations?limit=100",
                token: setup.userToken)
            #expect(history.status == 200, "\(fixture): \(history.body)")
            let locations = try history.body["locations"]!.arrayValue
            let expected = try fixture.fixes.sorted { a, b in
                try a["recorded_at"]!.stringValue < b["recorded_at"]!.stringValue
            }
            #expect(locations.count == expected.count, "\(fixture): \(locations)")
            for (location, want) in zip(locations, expected) {
                for key in ["latitude", "longitude", "accuracy_m", "altitude_m", "speed_mps", "heading_deg"] {
                    if want[key] == .null {
                        #expect(location[key] == .null, "\(fixture) \(key): \(location)")
                    } else {
                        let actual = try location[key]!.doubleValue
                        let wanted = try want[key]!.doubleValue
                        #expect(
                            abs(actual - wanted) <= 1e-9 * max(1, abs(wanted)), "\(fixture) \(key): \(actual)"
                        )
                    }
                }
                #expect(location["battery_pct"] == want["battery_pct"], "\(fixture): \(location)")
                #expect(location["is_charging"] == want["is_charging"], "\(fixture): \(location)")
                #expect(location["source"] == want["source"], "\(fixture): \(location)")
                // Both clocks: the device's, and the server's when the request arrived.
                let recorded = try RFC3339.parseMicros(location["recorded_at"]!.stringValue)
                let received = try RFC3339.parseMicros(location["received_at"]!.stringValue)
                let window = windows[fixture.name]!
                #expect(received >= window.0 && received <= window.1, "\(fixture): \(location)")
                if want["recorded_at"] == .string("received") {
                    // The one clock reading of the request's arrival: not a moment before it.
                    #expect(recorded == received, "\(fixture): a request without a time is dated on arrival")
                } else {
                    #expect(
                        recorded == (try RFC3339.parseMicros(want["recorded_at"]!.stringValue)), "\(fixture)")
                }
            }
            let arrivals = try get(
                setup.connection, "/api/find-my/devices/\(device.id)/arrivals", token: setup.userToken)
            let rows = try arrivals.body["arrivals"]!.arrayValue
            #expect(rows.count == 1, "\(fixture): one arrival, none for the resend: \(rows)")
            let expectedProtocol = fixture.target.contains("/osmand") ? "osmand" : "overland"
            #expect(rows.first?["protocol"] == .string(expectedProtocol), "\(fixture)")
            #expect(rows.first?["rejected_count"] == .integer(0), "\(fixture)")
        }
        let metrics = try setup.connection.send("GET", "/metrics").bodyText
        #expect(Self.metric(metrics, "findmy_duplicate_batches_total") == requests.count)
    }
}

/// What bad input gets back from the Overland and OsmAnd endpoints, and that the valid fixes of the
/// same request are kept: read from the log itself (`findmy log dump`).
@Suite(.serialized) struct OverlandOsmAndBadInputTests {
    static let good =
        #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.4,52.5]},"properties":{"timestamp":"2026-12-01T08:00:00Z","horizontal_accuracy":5}}"#

    /// The stored batch of `device`: its fixes' latitudes and its rejections' index and reason code.
    static func stored(_ data: String, device: Int64) throws -> [(
        latitudes: [Double], rejected: [(Int64, String)]
    )] {
        try dumpLog(data).records.filter {
            $0["type"] == .string("fix_batch") && $0["device"] == .integer(device)
        }
        .map { record in
            (
                try record["fixes"]!.arrayValue.map { try $0["latitude"]!.doubleValue },
                try record["rejected"]!.arrayValue.map {
                    (
                        try $0["index"]!.int64Value,
                        String(try $0["reason"]!.stringValue.prefix { $0 != ":" })
                    )
                }
            )
        }
    }

    @Test func overland() throws {
        let setup = try OverlandOsmAndTests.Setup(projector: false)
        defer { setup.stop() }
        let device = try setup.device()
        let json = [("Content-Type", "application/json")]
        func postOverland(_ body: String, _ headers: [(String, String)], query: String = "") throws
            -> HTTPClientResponse
        {
            try setup.connection.send(
                "POST", "/api/find-my/overland" + query,
                headers: (json + headers).map { (name: $0.0, value: $0.1) },
                body: Array(body.utf8))
        }
        let bearer = [("Authorization", "Bearer \(device.token)")]
        let body = "{\"locations\":[\(Self.good)]}"
        // Credentials: 401 (the app keeps its batch), nothing stored.
        let refused: [(String, [(String, String)], String, String)] = [
            ("no token", [], "", "missing_token"),
            ("an unknown token", [("Authorization", "Bearer nope")], "", "invalid_token"),
            ("a user token", [("Authorization", "Bearer \(setup.userToken)")], "", "invalid_token"),
            ("an unknown ?token=", [], "?token=nope", "invalid_token"),
            ("a session cookie only", [("Cookie", "findmy_session=whatever")], "", "missing_token"),
        ]
        for (label, headers, query, code) in refused {
            let response = try postOverland(body, headers, query: query)
            #expect(response.status == 401, "\(label): \(response.bodyText)")
            #expect((try? JSONParser.parse(response.body)["error"]?["code"]) == .string(code), "\(label)")
        }
        // An envelope the app never sends: 400.
        for (bad, code) in [
            ("not json", "malformed_json"), ("{}", "missing_field"), ("{\"locations\":3}", "wrong_type"),
        ] {
            let response = try postOverland(bad, bearer)
            #expect(response.status == 400, "\(bad): \(response.bodyText)")
            #expect((try? JSONParser.parse(response.body)["error"]?["code"]) == .string(code), "\(bad)")
        }
        #expect(try Self.stored(setup.data.path, device: device.id).isEmpty)

        // Bad locations beside good ones: ok, the good ones stored, the bad ones kept as rejections.
        let mixed = [
            Self.good.replacingOccurrences(of: "52.5", with: "1"),
            Self.good.replacingOccurrences(
                of: "\"horizontal_accuracy\":5", with: "\"horizontal_accuracy\":-1"),
            Self.good.replacingOccurrences(of: "52.5", with: "91"),
            Self.good.replacingOccurrences(
                of: "\"horizontal_accuracy\":5", with: "\"horizontal_accuracy\":5,\"battery_level\":101"),
            "\"not a feature\"",
            Self.good.replacingOccurrences(of: "2026-12-01T08:00:00Z", with: "1999-12-01T08:00:00+0000"),
            Self.good.replacingOccurrences(of: "52.5", with: "2"),
        ]
        let answer = try postOverland("{\"locations\":[\(mixed.joined(separator: ","))]}", bearer)
        #expect(answer.status == 200 && answer.bodyText == #"{"result":"ok"}"#, "\(answer.bodyText)")
        let batches = try Self.stored(setup.data.path, device: device.id)
        #expect(batches.count == 1)
        #expect(batches.first?.latitudes == [1, 52.5, 2], "the valid ones, the 1999 one under a long window")
        #expect(
            batches.first?.rejected.map { "\($0.0) \($0.1)" }
                == ["1 out_of_range", "2 out_of_range", "3 out_of_range", "4 not_an_object"])

        // A paused device: ok (the app may drop its batch: pause means "do not record me"), nothing stored.
        #expect(
            try post(
                setup.connection, "/api/find-my/reporting", token: device.token, body: "{\"paused\": true}"
            )
            .status == 200)
        let paused = try postOverland(
            "{\"locations\":[\(Self.good.replacingOccurrences(of: "52.5", with: "3"))]}", bearer)
        #expect(paused.status == 200 && paused.bodyText == #"{"result":"ok"}"#)
        #expect(try Self.stored(setup.data.path, device: device.id).count == 1)
    }

    @Test func osmand() throws {
        let setup = try OverlandOsmAndTests.Setup(projector: false)
        defer { setup.stop() }
        let device = try setup.device()
        func send(_ method: String, _ query: String, body: String = "", json: Bool = false) throws
            -> HTTPClientResponse
        {
            try setup.connection.send(
                method, "/api/find-my/osmand" + (query.isEmpty ? "" : "?" + query),
                headers: json ? [("Content-Type", "application/json")] : [], body: Array(body.utf8))
        }
        let fix = "lat=52.5&lon=13.4&timestamp=1796112000"
        // Credentials, wherever the app carries them: 401, nothing stored.
        let refused: [(String, String, String, Bool, String)] = [
            ("no id", fix, "", false, "missing_token"),
            ("an unknown id", "id=nope&" + fix, "", false, "invalid_token"),
            ("an unknown deviceid", "deviceid=nope&" + fix, "", false, "invalid_token"),
            ("an unknown id in the form", "", "id=nope&" + fix, false, "invalid_token"),
            ("a user token as id", "id=\(setup.userToken)&" + fix, "", false, "invalid_token"),
            (
                "an unknown device_id in JSON", "",
                #"{"device_id":"nope","location":{"timestamp":"2026-12-01T08:00:00Z","coords":{"latitude":1,"longitude":2}}}"#,
                true, "invalid_token"
            ),
        ]
        for (label, query, body, json, code) in refused {
            let response = try send(body.isEmpty ? "GET" : "POST", query, body: body, json: json)
            #expect(response.status == 401, "\(label): \(response.bodyText)")
            #expect((try? JSONParser.parse(response.body)["error"]?["code"]) == .string(code), "\(label)")
        }
        #expect(try Self.stored(setup.data.path, device: device.id).isEmpty)

        // Content: always 200 with an empty body, the fix stored or its rejection kept.
        let rows: [(String, String, String, Bool, [Double], [String])] = [
            ("a good fix in the query", "id=\(device.token)&" + fix, "", false, [52.5], []),
            ("a good fix in the form body", "", "id=\(device.token)&lat=1&lon=2", false, [1], []),
            ("latitude out of range", "id=\(device.token)&lat=91&lon=2", "", false, [], ["0 out_of_range"]),
            ("no position", "id=\(device.token)&timestamp=1796112000", "", false, [], ["0 missing_field"]),
            ("not a number", "id=\(device.token)&lat=north&lon=2", "", false, [], ["0 wrong_type"]),
            (
                "an unreadable time", "id=\(device.token)&lat=3&lon=2&timestamp=soon", "", false, [],
                ["0 bad_timestamp"]
            ),
            (
                "battery over 100", "id=\(device.token)&lat=4&lon=2&batt=150", "", false, [],
                ["0 out_of_range"]
            ),
            (
                "speed over Mach 6", "id=\(device.token)&lat=5&lon=2&speed=9000", "", false, [],
                ["0 out_of_range"]
            ),
            (
                "Traccar Client JSON, one bad location of two", "",
                #"{"device_id":"\#(device.token)","location":[{"timestamp":"2026-12-01T08:00:00Z","coords":{"latitude":6,"longitude":2}},{"coords":{}}]}"#,
                true, [6], ["1 missing_field"]
            ),
            ("not JSON", "", "{oops", true, [], []),
        ]
        var expected: [([Double], [String])] = []
        for (label, query, body, json, latitudes, rejected) in rows {
            let response = try send(body.isEmpty ? "GET" : "POST", query, body: body, json: json)
            if label == "not JSON" {
                // No token can be read from it: a credential problem, not content.
                #expect(response.status == 401, "\(label): \(response.bodyText)")
                continue
            }
            #expect(
                response.status == 200 && response.body.isEmpty,
                "\(label): \(response.status) \(response.bodyText)")
            expected.append((latitudes, rejected))
        }
        let batches = try Self.stored(setup.data.path, device: device.id)
        #expect(batches.count == expected.count)
        for (batch, want) in zip(batches, expected) {
            #expect(
                batch.latitudes == want.0 && batch.rejected.map { "\($0.0) \($0.1)" } == want.1, "\(want)")
        }
    }

    /// Traccar Client's JSON `location` array is capped like every other route's batch: 10,000
    /// elements at most, and past that the request answers 413 and nothing of it is stored.
    @Test func anOsmAndJSONArrayOverTheBatchLimitIsRefusedWhole() throws {
        let setup = try OverlandOsmAndTests.Setup(projector: false)
        defer { setup.stop() }
        let device = try setup.device()
        let location =
            "{\"timestamp\":\"2026-12-01T08:00:00Z\",\"coords\":{\"latitude\":52.5,\"longitude\":13.4,\"accuracy\":5}}"
        func postArray(_ count: Int) throws -> HTTPClientResponse {
            let body =
                "{\"device_id\":\"\(device.token)\",\"location\":["
                + Array(repeating: location, count: count).joined(separator: ",") + "]}"
            return try setup.connection.send(
                "POST", "/api/find-my/osmand", headers: [("Content-Type", "application/json")],
                body: Array(body.utf8))
        }
        let over = try postArray(10_001)
        #expect(over.status == 413, "\(over.bodyText.prefix(300))")
        #expect((try? JSONParser.parse(over.body)["error"]?["code"]) == .string("too_many_fixes"))
        #expect(try Self.stored(setup.data.path, device: device.id).isEmpty)
        let full = try postArray(10_000)
        #expect(full.status == 200, "\(full.bodyText.prefix(300))")
        #expect(try Self.stored(setup.data.path, device: device.id).first?.latitudes.count == 10_000)
    }

    @Test func unknownTokensInTheBodyCountAgainstTheAddress() throws {
        let setup = try OverlandOsmAndTests.Setup(projector: false)
        defer { setup.stop() }
        let device = try setup.device()
        var statuses: [Int] = []
        for attempt in 0..<31 {
            let response = try setup.connection.send(
                "POST", "/api/find-my/osmand", body: Array("id=guess\(attempt)&lat=1&lon=2".utf8))
            statuses.append(response.status)
        }
        #expect(statuses.dropLast().allSatisfy { $0 == 401 }, "\(statuses)")
        #expect(statuses.last == 429, "the 31st unknown token within a minute: \(statuses)")
        // Refused before its token is looked at, even a good one, until the minute has passed.
        let good = try setup.connection.send("GET", "/api/find-my/osmand?id=\(device.token)&lat=1&lon=2")
        #expect(good.status == 429)
        #expect(try Self.stored(setup.data.path, device: device.id).isEmpty)
    }
}
