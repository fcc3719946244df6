import Foundation
import HTTPClient
import JSON
import Testing

/// What a compaction removed from the geofence projection is reported like everything else
/// (docs/retention.md, "Geofences"): `findmy compact` says how many rows (dry run and real run, text
/// and JSON), and `/metrics` counts them, beside the presence changes removed from the log.
@Suite struct CompactGeofenceCountsTests {
    @Test func compactAndMetricsCountTheGeofenceRowsDeleted() throws {
        let server = try ReadServer("findmy-compact-geofence", users: ["anna"])
        defer { server.stop() }
        let anna = server.tokens[0]
        let phone = try enrol(server.connection, userToken: anna, uuid: UUID().uuidString)
        // Home, away (1.1 km north), home: three fixes with accuracy, two transitions once a fence
        // is drawn around home.
        let fixes = [(52.52, 300), (52.53, 240), (52.52, 120)].map {
            fixJSON(latitude: $0.0, secondsAgo: $0.1 * 60)
        }
        let stored = try post(
            server.connection, "/api/find-my/report", token: phone.string("device_token")!,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(stored.status == 200, "\(stored.body)")
        let fence = try post(
            server.connection, "/api/find-my/geofences", token: anna,
            body:
                "{\"name\": \"home\", \"latitude\": 52.52, \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(phone.int("device_id")!)]}"
        )
        #expect(fence.status == 201, "\(fence.body)")
        // Waits for the geofence projection to hold the fence's evaluation.
        let transitions = try get(
            server.connection,
            "/api/find-my/geofences/\(fence.int("geofence_id")!)/transitions?after_offset=\(fence.int("offset")!)",
            token: anna)
        #expect(try transitions.body["transitions"]?.arrayValue.count == 2, "\(transitions.body)")
        try waitForProjector(server.data.path)

        // Sixty days on, everything is past its window: the 2 transitions in the geofence tables (the
        // fixes are the history's, counted as location rows).
        let asOf = RFC3339.formatMillis(Int64(Date().timeIntervalSince1970 * 1_000_000) + 60 * 86_400_000_000)
        let dry = try FindmyProcess.run([
            "compact", "--data-dir", server.data.path, "--as-of", asOf, "--dry-run",
        ])
        #expect(dry.status == 0, "\(dry.error)")
        #expect(dry.output.contains("0 command rows, 2 geofence rows;"), "\(dry.output)")
        #expect(dry.output.contains("command events, 0 presence events;"), "\(dry.output)")
        let run = try FindmyProcess.run([
            "compact", "--data-dir", server.data.path, "--as-of", asOf, "--json",
        ])
        #expect(run.status == 0, "\(run.error)")
        let report = try JSONParser.parse(run.output)
        #expect(try report["database"]?["geofence_rows_deleted"]?.int64Value == 2, "\(run.output)")
        #expect(try report["log"]?["presence_events_removed"]?.int64Value == 0, "\(run.output)")

        let metrics = String(decoding: try server.connection.send("GET", "/metrics").body, as: UTF8.self)
        let lines = metrics.split(separator: "\n")
        #expect(lines.contains("findmy_compactor_geofence_rows_deleted_total 2"), "\(metrics)")
        #expect(lines.contains("findmy_compactor_presence_events_removed_total 0"), "\(metrics)")
    }
}
