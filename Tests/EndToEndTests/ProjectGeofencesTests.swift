import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// `findmy project` and `findmy replay` run the geofence projection too (docs/geofences.md,
/// "How it works"): a log written by a server without a projector is folded into the fence's
/// transitions by `findmy project`, and `findmy replay` folds them again from offset 0.
@Suite(.serialized) struct ProjectGeofencesTests {
    func transitions(_ connection: PostgresConnection) throws -> [String] {
        let result = try connection.execute(
            "SELECT event FROM findmy_geofences.geofence_transitions ORDER BY recorded_at, id")
        return (0..<result.rowCount).compactMap { result.string($0, 0) }
    }

    @Test func projectAndReplayFoldTheGeofenceProjection() throws {
        let data = ScratchDirectory("findmy-project-fences")
        let anna = try addUser("anna", data: data.path)
        // No projector: only the log is written.
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "off"])
        defer { stopIfRunning(server) }
        let connection = HTTPConnection(address: server.address)
        let phone = try enrol(connection, userToken: anna, uuid: UUID().uuidString)
        let deviceID = try #require(phone.int("device_id"))
        let created = try post(
            connection, "/api/find-my/geofences", token: anna,
            body:
                "{\"name\": \"home\", \"latitude\": 52.52, \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(deviceID)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        let fixes = [
            fixJSON(latitude: 52.52, secondsAgo: 300), fixJSON(latitude: 52.53, secondsAgo: 200),
            fixJSON(latitude: 52.52, secondsAgo: 100),
        ]
        let reported = try post(
            connection, "/api/find-my/report", token: phone.string("device_token")!,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(reported.status == 200, "\(reported.body)")
        _ = server.stop()

        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        defer { try? cluster.stop() }
        try cluster.start()
        let end = try #require(reported.int("offset")) + 1
        let projector = try FindmyProcess(["project", "--data-dir", data.path])
        defer {
            if projector.process.isRunning {
                projector.kill(SIGTERM)
                projector.wait()
            }
        }
        var folded: [String] = []
        let reached = waitUntil(timeoutSeconds: 120) {
            guard let pg = try? PostgresConnection(cluster.conninfo) else { return false }
            defer { pg.close() }
            guard
                let result = try? pg.execute(
                    "SELECT next_offset FROM findmy_geofences.projector_checkpoints WHERE projection = 'geofences'"
                ),
                result.rowCount == 1, (try? result.int64(0, 0)) == end
            else { return false }
            folded = (try? transitions(pg)) ?? []
            return true
        }
        #expect(reached, "findmy project did not fold the geofence projection: \(projector.standardError)")
        #expect(folded == ["leave", "enter"])

        // Replay: the projection is dropped and folded again, to the same transitions.
        let pg = try PostgresConnection(cluster.conninfo)
        defer { pg.close() }
        _ = try pg.execute("UPDATE findmy_geofences.geofence_transitions SET event = 'enter'")
        let replay = try FindmyProcess.run(["replay", "--data-dir", data.path], timeoutSeconds: 300)
        #expect(replay.status == 0, "\(replay.error)")
        #expect(replay.output.contains("geofences: rebuilt"))
        #expect(try transitions(pg) == ["leave", "enter"])
    }
}
