import Crypto
import Foundation
import HTTPClient
import JSON
import Testing

/// OwnTracks in HTTP mode against a real `findmy serve` (embedded PostgreSQL): the apps' bodies
/// from Fixtures/clients/owntracks, their answers, the history they leave, the arrivals audit.
@Suite(.serialized) struct OwnTracksHTTPTests {
    static var fixtures: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fixtures/clients/owntracks")
    }

    /// A server whose users are jane and bob, each with one enrolled device; fixtures are from
    /// December 2025, so the retention window is wide.
    struct Setup {
        let data = ScratchDirectory("findmy-owntracks")
        let server: ServerProcess
        let connection: HTTPConnection
        let janeToken: String
        let bobToken: String
        let janeDevice: (id: Int64, token: String)
        let bobDevice: (id: Int64, token: String)

        init(projector: Bool = true) throws {
            janeToken = try addUser("jane", data: data.path)
            bobToken = try addUser("bob", data: data.path)
            server = try ServerProcess(
                data: data.path,
                extraArguments: (projector ? ["--projector", "on"] : []) + ["--retention-days", "36500"])
            connection = HTTPConnection(address: server.address)
            let jane = try enrol(connection, userToken: janeToken, uuid: UUID().uuidString, name: "pixel")
            let bob = try enrol(connection, userToken: bobToken, uuid: UUID().uuidString, name: "iphone")
            janeDevice = (jane.int("device_id")!, jane.string("device_token")!)
            bobDevice = (bob.int("device_id")!, bob.string("device_token")!)
        }

        func stop() { _ = server.stop() }
    }

    static func basic(_ user: String, _ password: String) -> (name: String, value: String) {
        ("Authorization", "Basic " + Data("\(user):\(password)".utf8).base64EncodedString())
    }

    /// POSTs `body` the way the Android app does (Basic auth, JSON content type, X-Limit headers).
    static func publish(
        _ connection: HTTPConnection, _ body: [UInt8], auth: (name: String, value: String)?,
        query: String = ""
    ) throws -> HTTPClientResponse {
        var headers: [(name: String, value: String)] = [
            ("Content-Type", "application/json; charset=utf-8"), ("X-Limit-U", "jane"),
            ("X-Limit-D", "pixel"),
        ]
        if let auth { headers.append(auth) }
        return try connection.send("POST", "/api/find-my/owntracks" + query, headers: headers, body: body)
    }

    static func metric(_ text: String, _ line: String) -> Int? {
        text.split(separator: "\n").first { $0.hasPrefix(line + " ") }.flatMap {
            Int($0.split(separator: " ").last!)
        }
    }

    @Test func theAppsBodiesBecomeHistoryWithUnitsConvertedBothClocksAndDuplicatesFolded() throws {
        let setup = try Setup()
        defer { setup.stop() }
        let auth = Self.basic("jane", setup.janeDevice.token)
        let startedMicros = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let cases = try JSONParser.parse(
            Array(try Data(contentsOf: Self.fixtures.appendingPathComponent("expected.json")))
        ).arrayValue
        var appended = 0
        for entry in cases {
            let file = try entry["file"]!.stringValue
            let body = Array(try Data(contentsOf: Self.fixtures.appendingPathComponent(file)))
            let response = try Self.publish(setup.connection, body, auth: auth)
            #expect(response.status == 200, "\(file): \(response.bodyText)")
            #expect(try JSONParser.parse(response.body) == .array([]), "\(file): \(response.bodyText)")
            #expect(
                response.headers.contains {
                    $0.name.lowercased() == "content-type" && $0.value.hasPrefix("application/json")
                })
            let fixes = try entry["fixes"]!.arrayValue
            // A request of places only (a transition, waypoints) appends them and no fix batch:
            // it is no arrival.
            if !fixes.isEmpty { appended += 1 }
        }
        // An app resending after a timeout: byte-identical bodies are answered without appending.
        for file in ["android-location.json", "gpslogger-owntracks-template.json", "android-transition.json"]
        {
            let body = Array(try Data(contentsOf: Self.fixtures.appendingPathComponent(file)))
            let response = try Self.publish(setup.connection, body, auth: auth)
            #expect(response.status == 200)
            #expect(try JSONParser.parse(response.body) == .array([]))
        }
        try waitForProjector(setup.data.path)

        let id = setup.janeDevice.id
        let history = try get(
            setup.connection,
            "/api/find-my/devices/\(id)/locations?from=2025-12-01T00:00:00Z&to=2025-12-31T00:00:00Z&limit=100",
            token: setup.janeToken)
        #expect(history.status == 200, "\(history.body)")
        let locations = try history.body["locations"]!.arrayValue
        let expectedFixes = try cases.flatMap { try $0["fixes"]!.arrayValue }.sorted {
            (try $0["recorded_at"]!.stringValue) < (try $1["recorded_at"]!.stringValue)
        }
        #expect(locations.count == expectedFixes.count, "duplicates fold: \(locations.count) locations")
        for (location, expected) in zip(locations, expectedFixes) {
            for key in ["latitude", "longitude", "accuracy_m", "altitude_m", "speed_mps", "heading_deg"] {
                let wanted = expected[key] ?? .null
                if wanted == .null {
                    #expect(location[key] == .null, "\(key) of \(expected)")
                } else {
                    let actual = try location[key]!.doubleValue
                    #expect(
                        abs(actual - (try wanted.doubleValue)) < 1e-9, "\(key): \(actual) for \(expected)")
                }
            }
            #expect(location["battery_pct"] == expected["battery_pct"])
            #expect(location["is_charging"] == expected["is_charging"] ?? .null)
            #expect(location["source"] == expected["source"])
            // Both clocks: the device's from `tst`, the server's when it arrived.
            #expect(
                try RFC3339.parseMicros(location["recorded_at"]!.stringValue)
                    == RFC3339.parseMicros(expected["recorded_at"]!.stringValue))
            #expect(
                try RFC3339.parseMicros(location["received_at"]!.stringValue) >= startedMicros - 1_000_000)
        }

        let arrivals = try get(
            setup.connection, "/api/find-my/devices/\(id)/arrivals?limit=100", token: setup.janeToken)
        let rows = try arrivals.body["arrivals"]!.arrayValue
        #expect(rows.count == appended, "one arrival per stored request, none for a resend: \(rows)")
        #expect(rows.allSatisfy { $0["protocol"] == .string("owntracks-http") })

        let metrics = try setup.connection.send("GET", "/metrics").bodyText
        #expect(Self.metric(metrics, "findmy_batches_total{protocol=\"owntracks-http\"}") == appended)
        #expect(Self.metric(metrics, "findmy_duplicate_batches_total") == 3)
        #expect(
            Self.metric(metrics, "findmy_client_messages_total{protocol=\"owntracks-http\",type=\"lwt\"}")
                == 1)
        #expect(
            Self.metric(metrics, "findmy_client_messages_total{protocol=\"owntracks-http\",type=\"status\"}")
                == 1)

        let log = try dumpLog(setup.data.path)
        #expect(log.records.filter { $0["type"] == .string("region_transition") }.count == 1)
        #expect(log.records.filter { $0["type"] == .string("waypoints_reported") }.count == 1)
    }

    @Test func onlyTheOwnersNameWithTheDeviceTokenGetsIn() throws {
        let setup = try Setup(projector: false)
        defer { setup.stop() }
        let body = Array(try Data(contentsOf: Self.fixtures.appendingPathComponent("android-location.json")))
        let refused: [(String, (name: String, value: String)?)] = [
            ("no credentials", nil),
            ("a wrong password", Self.basic("jane", "not-a-token")),
            ("another user's device token", Self.basic("jane", setup.bobDevice.token)),
            ("the device token under another user's name", Self.basic("bob", setup.janeDevice.token)),
            ("jane's user token instead of a device token", Self.basic("jane", setup.janeToken)),
            ("an unknown user", Self.basic("nobody", setup.janeDevice.token)),
            ("not base64", ("Authorization", "Basic %%%")),
        ]
        for (label, auth) in refused {
            let response = try Self.publish(setup.connection, body, auth: auth)
            #expect(response.status == 401, "\(label): \(response.status)")
            #expect(
                response.headers.contains {
                    $0.name.lowercased() == "www-authenticate" && $0.value.hasPrefix("Basic")
                }, "\(label)")
            #expect(try JSONParser.parse(response.body)["error"]?["code"] != nil, "\(label)")
        }
        let own = try Self.publish(setup.connection, body, auth: Self.basic("bob", setup.bobDevice.token))
        #expect(own.status == 200)
        // Whatever the content type (GPSLogger sends what its settings say, or none).
        let plainText = try setup.connection.send(
            "POST", "/api/find-my/owntracks",
            headers: [("Content-Type", "text/plain"), Self.basic("bob", setup.bobDevice.token)],
            body: Array(try Data(contentsOf: Self.fixtures.appendingPathComponent("ios-location.json"))))
        #expect(plainText.status == 200)
        // The Bearer form works as well (a proxy or a script).
        let bearer = try Self.publish(
            setup.connection, body, auth: ("Authorization", "Bearer \(setup.janeDevice.token)"))
        #expect(bearer.status == 200)
        let log = try dumpLog(setup.data.path)
        #expect(
            log.batches.map(\.device).sorted()
                == [setup.janeDevice.id, setup.bobDevice.id, setup.bobDevice.id].sorted())
    }
}

/// What each bad body gets back from the OwnTracks endpoint, and that nothing valid beside it is
/// lost: every row is answered 200 [] (a 4xx would block an Android queue or make iOS drop the
/// message), and recorded in the arrivals audit with its rejections.
@Suite(.serialized) struct OwnTracksBadInputTests {
    struct Row {
        var label: String
        var body: String
        /// Fixes stored from the body, and items rejected.
        var accepted: Int
        var rejected: Int
        /// A reason code the log keeps for the first rejection.
        var reason: String? = nil
    }

    static let good = #"{"_type":"location","lat":52.5,"lon":13.4,"acc":10,"tst":1764756000,"tid":"jp"}"#

    static let rows: [Row] = [
        Row(label: "not JSON", body: "lat=52.5&lon=13.4", accepted: 0, rejected: 1, reason: "malformed"),
        Row(
            label: "truncated JSON", body: #"{"_type":"location","lat":52.5"#, accepted: 0, rejected: 1,
            reason: "malformed"),
        Row(
            label: "no _type", body: #"{"lat":52.5,"lon":13.4,"tst":1764756000}"#, accepted: 0, rejected: 1,
            reason: "missing_field"),
        Row(
            label: "an unknown _type", body: #"{"_type":"bogus"}"#, accepted: 0, rejected: 1,
            reason: "malformed"),
        Row(
            label: "no lat", body: #"{"_type":"location","lon":13.4,"tst":1764756000}"#, accepted: 0,
            rejected: 1, reason: "missing_field"),
        Row(
            label: "lat 91", body: #"{"_type":"location","lat":91,"lon":13.4,"tst":1764756000}"#, accepted: 0,
            rejected: 1, reason: "out_of_range"),
        Row(
            label: "tst 0", body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":0}"#, accepted: 0,
            rejected: 1, reason: "bad_timestamp"),
        Row(
            label: "tst in milliseconds",
            body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756000000}"#, accepted: 0,
            rejected: 1, reason: "bad_timestamp"),
        Row(
            label: "tst not a number", body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":"yesterday"}"#,
            accepted: 0, rejected: 1, reason: "wrong_type"),
        Row(
            label: "lat 'nan' as a string",
            body: #"{"_type":"location","lat":"nan","lon":13.4,"tst":1764756000}"#, accepted: 0, rejected: 1,
            reason: "wrong_type"),
        Row(
            label: "batt 140",
            body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756000,"batt":140}"#, accepted: 0,
            rejected: 1, reason: "out_of_range"),
        Row(
            label: "bs 7", body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756000,"bs":7}"#,
            accepted: 0, rejected: 1, reason: "out_of_range"),
        Row(
            label: "vel 9000 km/h",
            body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756000,"vel":9000}"#, accepted: 0,
            rejected: 1, reason: "out_of_range"),
        Row(
            label: "a transition without event",
            body: #"{"_type":"transition","tst":1764756000,"desc":"Home"}"#, accepted: 0, rejected: 1,
            reason: "missing_field"),
        Row(label: "an array of numbers", body: "[1, 2]", accepted: 0, rejected: 2, reason: "not_an_object"),
        Row(
            label: "a good fix beside a bad one",
            body: "[\(good), {\"_type\":\"location\",\"lat\":\"x\",\"lon\":13.4,\"tst\":1764756001}]",
            accepted: 1, rejected: 1, reason: "wrong_type"),
        // Kept: values an app uses for "unknown" are read as unknown, not refused.
        Row(
            label: "acc -1 (unknown)",
            body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756002,"acc":-1}"#, accepted: 1,
            rejected: 0),
        Row(
            label: "vel and cog -1 (unknown)",
            body: #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756003,"vel":-1,"cog":-1}"#,
            accepted: 1, rejected: 0),
        Row(
            label: "unknown members",
            body:
                #"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756004,"future":{"x":1},"poi":"Cafe"}"#,
            accepted: 1, rejected: 0),
    ]

    @Test func everyBadBodyIsAnswered200AndKeptAsARejectionWithoutLosingTheGoodOnes() throws {
        let setup = try OwnTracksHTTPTests.Setup(projector: false)
        defer { setup.stop() }
        let auth = OwnTracksHTTPTests.basic("jane", setup.janeDevice.token)
        for row in Self.rows {
            let response = try OwnTracksHTTPTests.publish(setup.connection, Array(row.body.utf8), auth: auth)
            #expect(response.status == 200, "\(row.label): \(response.status) \(response.bodyText)")
            #expect(try JSONParser.parse(response.body) == .array([]), "\(row.label)")
        }
        let batches = try dumpLog(setup.data.path).records.filter { $0["type"] == .string("fix_batch") }
        #expect(batches.count == Self.rows.count, "one record per request")
        for (row, batch) in zip(Self.rows, batches) {
            let fixes = try batch["fixes"]!.arrayValue
            let rejected = try batch["rejected"]!.arrayValue
            #expect(fixes.count == row.accepted, "\(row.label): \(batch)")
            #expect(rejected.count == row.rejected, "\(row.label): \(batch)")
            #expect(batch["protocol"] == .string("owntracks-http"))
            if let reason = row.reason {
                #expect(
                    (try rejected.first?["reason"]?.stringValue)?.hasPrefix(reason + ":") == true,
                    "\(row.label): \(rejected)")
            }
        }
        let metrics = try setup.connection.send("GET", "/metrics").bodyText
        #expect(
            OwnTracksHTTPTests.metric(
                metrics, "findmy_protocol_fixes_rejected_total{protocol=\"owntracks-http\"}")
                == Self.rows.map(\.rejected).reduce(0, +))
        #expect(
            OwnTracksHTTPTests.metric(
                metrics, "findmy_protocol_fixes_accepted_total{protocol=\"owntracks-http\"}")
                == Self.rows.map(\.accepted).reduce(0, +))
    }

    /// A paused device: the app's queue drains (200 []), and nothing is kept, as the pause promises.
    @Test func aPausedDeviceIsAnsweredAndNothingIsKept() throws {
        let setup = try OwnTracksHTTPTests.Setup(projector: false)
        defer { setup.stop() }
        let paused = try post(
            setup.connection, "/api/find-my/reporting", token: setup.janeDevice.token,
            body: #"{"paused": true}"#)
        #expect(paused.status == 200)
        let response = try OwnTracksHTTPTests.publish(
            setup.connection, Array(Self.good.utf8),
            auth: OwnTracksHTTPTests.basic("jane", setup.janeDevice.token))
        #expect(response.status == 200)
        #expect(try dumpLog(setup.data.path).batches.isEmpty)
    }
}

/// OwnTracks' payload encryption with the device token as the key, as a person sets it up in the
/// app (docs/clients.md): the body is `{"_type":"encrypted","data":...}`, the answer is encrypted too.
@Suite(.serialized) struct OwnTracksEncryptionTests {
    /// The app's key: the UTF-8 bytes of what was typed, cut or zero-padded to 32 bytes.
    static func key(_ typed: String) -> [UInt8] {
        let bytes = Array(typed.utf8.prefix(32))
        return bytes + [UInt8](repeating: 0, count: 32 - bytes.count)
    }

    static func encrypted(_ plaintext: String, key: [UInt8]) -> [UInt8] {
        let data = Base64.encode(SecretBox.seal(Array(plaintext.utf8), key: key))
        return Array(#"{"_type":"encrypted","data":"\#(data)"}"#.utf8)
    }

    @Test func anEncryptedLocationIsStoredAndAnsweredEncrypted() throws {
        let setup = try OwnTracksHTTPTests.Setup(projector: false)
        defer { setup.stop() }
        let token = setup.janeDevice.token
        let auth = OwnTracksHTTPTests.basic("jane", token)
        let location = #"{"_type":"location","lat":52.5,"lon":13.4,"acc":10,"tst":1764756000,"tid":"jp"}"#
        let first = try OwnTracksHTTPTests.publish(
            setup.connection, Self.encrypted(location, key: Self.key(token)), auth: auth)
        #expect(first.status == 200)
        let answer = try JSONParser.parse(first.body)
        #expect(answer["_type"] == .string("encrypted"), "\(first.bodyText)")
        let box = Base64.decode(try answer["data"]!.stringValue) ?? []
        let opened = SecretBox.open(box, key: Self.key(token)).map { String(decoding: $0, as: UTF8.self) }
        #expect(opened == "[]")
        // The app resends with a fresh nonce: the same message inside, answered as a duplicate.
        let resend = try OwnTracksHTTPTests.publish(
            setup.connection, Self.encrypted(location, key: Self.key(token)), auth: auth)
        #expect(resend.status == 200)
        // A key that is not the device token: acknowledged, kept as a rejection, nothing decrypted.
        let wrong = try OwnTracksHTTPTests.publish(
            setup.connection, Self.encrypted(location, key: Self.key("my own passphrase")), auth: auth)
        #expect(wrong.status == 200)
        let batches = try dumpLog(setup.data.path).records.filter { $0["type"] == .string("fix_batch") }
        #expect(batches.count == 2, "the resend is folded: \(batches)")
        #expect(try batches[0]["fixes"]!.arrayValue.count == 1)
        #expect(try batches[0]["fixes"]![0]!["latitude"]!.doubleValue == 52.5)
        #expect(try batches[1]["fixes"]!.arrayValue.isEmpty)
        #expect((try batches[1]["rejected"]![0]!["reason"]!.stringValue).hasPrefix("malformed:"))
    }
}

/// The Friends view: with `?friends=1` on the URL, the answer to a publish carries the latest
/// position and a card of every device the owner may see (their own others, and what is shared
/// with them), never another; without it, `[]`.
@Suite(.serialized) struct OwnTracksFriendsTests {
    static func tid(_ id: Int64) -> String {
        let digits = String(id, radix: 36, uppercase: true)
        return digits.count >= 2 ? digits : "0" + digits
    }

    @Test func theAnswerCarriesExactlyTheDevicesTheOwnerMaySee() throws {
        let setup = try OwnTracksHTTPTests.Setup()
        defer { setup.stop() }
        let connection = setup.connection
        let tablet = try enrol(
            connection, userToken: setup.janeToken, uuid: UUID().uuidString, name: "tablet")
        let watch = try enrol(connection, userToken: setup.bobToken, uuid: UUID().uuidString, name: "watch")
        var lastOffset: Int64 = 0
        for (token, latitude) in [
            (tablet.string("device_token")!, 48.1), (setup.bobDevice.token, 50.9),
            (watch.string("device_token")!, 40.4),
        ] {
            let report = try post(
                connection, "/api/find-my/report", token: token,
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude)]))
            #expect(report.status == 200)
            lastOffset = max(lastOffset, report.int("offset") ?? 0)
        }
        let shared = try post(
            connection, "/api/find-my/devices/\(setup.bobDevice.id)/shares", token: setup.bobToken,
            body: #"{"user": "jane"}"#)
        #expect(shared.status == 201, "\(shared.body)")
        try waitForProjector(setup.data.path)

        let auth = OwnTracksHTTPTests.basic("jane", setup.janeDevice.token)
        let body = Array(
            #"{"_type":"location","lat":52.5,"lon":13.4,"acc":10,"tst":1764756000,"tid":"jp"}"#.utf8)
        let plain = try OwnTracksHTTPTests.publish(connection, body, auth: auth)
        #expect(try JSONParser.parse(plain.body) == .array([]))

        let answer = try JSONParser.parse(
            try OwnTracksHTTPTests.publish(connection, body, auth: auth, query: "?friends=1").body
        ).arrayValue
        let tabletTid = Self.tid(tablet.int("device_id")!)
        let bobTid = Self.tid(setup.bobDevice.id)
        let locations = answer.filter { $0["_type"] == .string("location") }
        let cards = answer.filter { $0["_type"] == .string("card") }
        #expect(Set(locations.map { try! $0["tid"]!.stringValue }) == [tabletTid, bobTid], "\(answer)")
        #expect(Set(cards.map { try! $0["tid"]!.stringValue }) == [tabletTid, bobTid], "\(answer)")
        let bob = try #require(locations.first { $0["tid"] == .string(bobTid) })
        #expect(try bob["lat"]!.doubleValue == 50.9)
        #expect(bob["acc"] == .integer(12) && bob["batt"] == .integer(81))
        #expect(cards.contains { $0["tid"] == .string(bobTid) && $0["name"] == .string("bob: iphone") })
        // Never the watch nobody shared, never the posting device itself.
        #expect(!answer.contains { $0["tid"] == .string(Self.tid(watch.int("device_id")!)) })
        #expect(!answer.contains { $0["tid"] == .string(Self.tid(setup.janeDevice.id)) })

        let revoked = try connection.send(
            "DELETE", "/api/find-my/devices/\(setup.bobDevice.id)/shares/jane",
            headers: [("Authorization", "Bearer \(setup.bobToken)")])
        #expect(revoked.status == 200)
        let after = try JSONParser.parse(
            try OwnTracksHTTPTests.publish(connection, body, auth: auth, query: "?friends=1").body
        ).arrayValue
        #expect(
            !after.contains { $0["tid"] == .string(bobTid) }, "a revoked share is gone at once: \(after)")
        #expect(after.contains { $0["tid"] == .string(tabletTid) })
    }
}
