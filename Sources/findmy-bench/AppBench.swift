import CLI
import Crypto
import Events
import JSON
import Workload

/// The apps' part of `findmy-bench ingest` (each app's path at least 0.8 of native):
/// each app's protocol against the native report endpoint carrying the same fixes, driven the same
/// way, one after the other, in the same run, on the same server and devices:
/// - Overland: 1,000-point batches as Overland posts them (`POST /api/find-my/overland`, GeoJSON
///   features), 16 connections;
/// - OwnTracks: single `location` messages as the app posts them in HTTP mode
///   (`POST /api/find-my/owntracks`, Basic auth with the user name and the device token), 64
///   connections.
enum AppBench {
    struct Pair {
        var app: String
        var connections: Int
        var fixesPerRequest: Int
        /// Native and the app, in each round.
        var rounds: [(native: LoadTarget.Result, measured: LoadTarget.Result)]
        var native: LoadTarget.Result { .combined(rounds.map(\.native)) }
        var measured: LoadTarget.Result { .combined(rounds.map(\.measured)) }
    }

    static let shapes: [(app: String, connections: Int, fixesPerRequest: Int)] = [
        ("overland", 16, 1_000), ("owntracks", 64, 1),
    ]

    /// Native, then the app, `rounds` times, for every shape whose app is in `apps`: on a machine
    /// whose load changes by the second, alternating in short rounds keeps both sides of the ratio
    /// under the same conditions. `duplicates` reads the server's count of requests answered as a
    /// resend: an app's request counted there was not appended, and a figure made of such requests
    /// would measure the wrong path, so the run stops.
    static func measure(
        apps: Set<String>, user: String, tokens: [String], rounds: Int,
        duplicates: () throws -> Double, drive: (LoadTarget) throws -> LoadTarget.Result
    ) throws -> [Pair] {
        try shapes.filter { apps.contains($0.app) }.map { shape in
            let tokens = Array(tokens.prefix(shape.connections))
            var generator = TrackGenerator(seed: 1_000, startMicros: wallClockMicros() - 3_600_000_000)
            var fixes = generator.next(shape.fixesPerRequest)
            // Overland's last location carries the request's unique number in its battery level
            // (`overland`), stored as 80 %: the native side gets the same fix.
            fixes[fixes.count - 1].batteryPercent = 80
            let app = shape.app == "overland" ? overland(tokens, fixes) : owntracks(user, tokens, fixes[0])
            let native = IngestBench.nativeTarget(tokens, fixes)
            return Pair(
                app: shape.app, connections: shape.connections, fixesPerRequest: shape.fixesPerRequest,
                rounds: try (0..<rounds).map { _ in
                    let nativeResult = try drive(native)
                    let before = try duplicates()
                    let appResult = try drive(app)
                    let resends = try duplicates() - before
                    guard resends == 0 else {
                        throw UsageError(
                            "\(Int(resends)) \(shape.app) requests were answered as resends without appending: each request's content must differ (AppBench)"
                        )
                    }
                    return (nativeResult, appResult)
                })
        }
    }

    /// Overland's body: `{"locations": [...]}`. Overland has no batch id; its id is derived from
    /// the decoded fixes (docs/clients.md), so each request must differ in a fix, or it is a
    /// resend (a duplicate), as each real batch does. Here the last location's `battery_level` is
    /// `0.800` followed by the request's unique number (11 digits): a different value in each
    /// request, which findmy stores as 80 % (a whole percentage), so every request stores the same
    /// fixes as the native side's.
    static func overland(_ tokens: [String], _ fixes: [Fix]) -> LoadTarget {
        let marker = "unique-number-of-the-request"
        let features = fixes.indices.map {
            feature(fixes[$0], batteryLevel: $0 == fixes.count - 1 ? "0.800" + marker : nil)
        }
        let text = "{\"locations\":[" + features.joined(separator: ",") + "]}"
        let unique = text.firstRange(of: marker)!
        return LoadTarget(
            path: "/api/find-my/overland", authorizations: tokens.map { "Bearer \($0)" },
            headers: [("Content-Type", "application/json")],
            bodyPrefix: Array(text[..<unique.lowerBound].utf8),
            bodySuffix: Array(text[unique.upperBound...].utf8),
            fixesPerRequest: fixes.count, expectedBody: Array(#"{"result":"ok"}"#.utf8), uniqueForm: .digits)
    }

    /// A fix as Overland's GLManager.m writes a location; `batteryLevel`, when given, is the text of
    /// its `battery_level`.
    static func feature(_ fix: Fix, batteryLevel: String? = nil) -> String {
        var writer = JSONWriter(capacity: 512)
        writer.beginObject()
        writer.key("type")
        writer.string("Feature")
        writer.key("geometry")
        writer.beginObject()
        writer.key("type")
        writer.string("Point")
        writer.key("coordinates")
        writer.beginArray()
        writer.double(fix.longitude)
        writer.double(fix.latitude)
        writer.endArray()
        writer.endObject()
        writer.key("properties")
        writer.beginObject()
        writer.key("timestamp")
        writer.string(RFC3339.formatMillis(fix.recordedAtMicros))
        writer.key("altitude")
        writer.double(fix.altitudeMeters ?? 34)
        writer.key("speed")
        writer.double(max(0, fix.speedMetersPerSecond ?? 0))
        writer.key("course")
        writer.double(min(359.9, max(0, fix.headingDegrees ?? 0)))
        writer.key("horizontal_accuracy")
        writer.double(fix.accuracyMeters ?? 10)
        writer.key("vertical_accuracy")
        writer.int64(4)
        writer.key("speed_accuracy")
        writer.double(0.5)
        writer.key("course_accuracy")
        writer.double(12.5)
        writer.key("motion")
        writer.beginArray()
        writer.string("walking")
        writer.endArray()
        writer.key("device_id")
        writer.string("bench")
        writer.key("wifi")
        writer.string("")
        writer.key("battery_state")
        writer.string(fix.isCharging == true ? "charging" : "unplugged")
        writer.key("battery_level")
        if let batteryLevel {
            writer.rawValue(batteryLevel.utf8)
        } else {
            writer.double(Double(fix.batteryPercent ?? 80) / 100)
        }
        writer.endObject()
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// OwnTracks' HTTP mode as the Android app posts a location (Basic auth, its `X-Limit-U` and
    /// `X-Limit-D` headers; docs/clients.md). Each message carries its own `_id`, the request's
    /// unique id here, so none is a resend.
    static func owntracks(_ user: String, _ tokens: [String], _ fix: Fix) -> LoadTarget {
        let seconds = fix.recordedAtMicros / 1_000_000
        let members =
            "\",\"topic\":\"owntracks/\(user)/phone\",\"created_at\":\(seconds + 2),\"batt\":\(fix.batteryPercent ?? 80),"
            + "\"bs\":\(fix.isCharging == true ? 2 : 1),\"acc\":\(Int(fix.accuracyMeters ?? 10)),\"vac\":3,"
            + "\"lat\":\(fix.latitude),\"lon\":\(fix.longitude),\"alt\":\(Int(fix.altitudeMeters ?? 34)),"
            + "\"vel\":\(Int((fix.speedMetersPerSecond ?? 0) * 3.6)),\"cog\":\(Int(fix.headingDegrees ?? 0)),"
            + "\"tst\":\(seconds),\"m\":1,\"conn\":\"w\",\"tid\":\"ph\",\"t\":\"p\"}"
        return LoadTarget(
            path: "/api/find-my/owntracks",
            authorizations: tokens.map { "Basic " + Base64.encode(Array("\(user):\($0)".utf8)) },
            headers: [
                ("Content-Type", "application/json; charset=utf-8"), ("X-Limit-U", user),
                ("X-Limit-D", "phone"),
            ],
            bodyPrefix: Array("{\"_type\":\"location\",\"_id\":\"".utf8), bodySuffix: Array(members.utf8),
            fixesPerRequest: 1, expectedBody: Array("[]".utf8))
    }

    static func ratio(_ app: LoadTarget.Result, _ native: LoadTarget.Result) -> Double {
        IngestBench.rounded(app.fixesPerSecond / max(1, native.fixesPerSecond))
    }

    /// The `apps` member of the bench's JSON: per side, rates over all rounds, p50 and p99 the
    /// median of the rounds'.
    static func write(_ pairs: [Pair], to writer: inout JSONWriter) {
        writer.key("apps")
        writer.beginArray()
        for pair in pairs {
            writer.beginObject()
            writer.key("app")
            writer.string(pair.app)
            writer.key("fixes_per_request")
            writer.int64(Int64(pair.fixesPerRequest))
            writer.key("connections")
            writer.int64(Int64(pair.connections))
            for (name, run) in [("native", pair.native), (pair.app, pair.measured)] {
                writer.key(name)
                writer.beginObject()
                writer.key("requests_per_s")
                writer.double(run.requestsPerSecond.rounded())
                writer.key("acknowledged_fixes_per_s")
                writer.double(run.fixesPerSecond.rounded())
                writer.key("p50_ms")
                writer.double(IngestBench.rounded(Double(run.p50Micros) / 1000))
                writer.key("p99_ms")
                writer.double(IngestBench.rounded(Double(run.p99Micros) / 1000))
                writer.key("failed_requests")
                writer.int64(Int64(run.failures))
                writer.endObject()
            }
            writer.key("app_over_native_ratio")
            writer.double(ratio(pair.measured, pair.native))
            writer.key("round_ratios")
            writer.beginArray()
            for round in pair.rounds { writer.double(ratio(round.measured, round.native)) }
            writer.endArray()
            writer.endObject()
        }
        writer.endArray()
    }
}
