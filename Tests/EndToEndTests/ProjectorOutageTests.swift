import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// PostgreSQL is stopped from outside under a running server, and findmy starts it again:
/// reports keep being acknowledged, the projector reconnects and catches up, nothing is lost or
/// doubled.
@Suite struct ProjectorOutageTests {
    @Test func ingestOutlivesAPostgreSQLRestart() throws {
        let data = ScratchDirectory("findmy-pgoutage")
        // No compaction run during the test: one that met the outage would keep its error, and
        // /healthz its "degraded", until the next run (docs/postgres.md, "Supervision").
        let server = try ServerProcess(
            data: data.path,
            extraArguments: [
                "--projector", "on", "--compact-interval-seconds", "86400", "--compact-first-run-seconds",
                "86400",
            ])
        defer { server.stop() }
        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        let connection = HTTPConnection(address: server.address)
        let userToken = try addUser("ada", data: data.path)
        let device = try enrol(connection, userToken: userToken, uuid: UUID().uuidString)
        let deviceToken = try #require(device.string("device_token"))

        var acknowledged = 0
        // Each report's fixes at a place of their own: two reports within one millisecond would
        // otherwise carry the same fix, which the projection keeps once.
        func report(_ count: Int) throws {
            for _ in 0..<count {
                let latitude = 52.0 + Double(acknowledged) / 10_000
                let answer = try post(
                    connection, "/api/find-my/report", token: deviceToken,
                    body: reportBody(
                        batchID: UUID().uuidString,
                        fixes: [fixJSON(latitude: latitude), fixJSON(latitude: latitude, secondsAgo: 30)]))
                #expect(answer.status == 200, "\(answer.body)")
                if answer.status == 200 { acknowledged += 2 }
            }
        }
        func projectedFixes() -> Int64? {
            guard let connection = try? PostgresConnection(cluster.conninfo) else { return nil }
            defer { connection.close() }
            return try? connection.execute("SELECT count(*) FROM findmy.device_locations").int64(0, 0)
        }
        func waitUntilProjected(_ expected: Int) -> Bool {
            waitUntil(timeoutSeconds: 120) { projectedFixes() == Int64(expected) }
        }

        try report(20)
        #expect(waitUntilProjected(acknowledged))

        try cluster.stop()
        try report(50)  // PostgreSQL is down or restarting: the report path does not care
        let health = try connection.send("GET", "/healthz")
        #expect(health.status == 200)
        // findmy's supervisor starts it again (docs/postgres.md, "Supervision").
        #expect(
            try waitUntil {
                let postgres = try JSONParser.parse(try connection.send("GET", "/healthz").body)["services"]?[
                    "postgres"]
                return postgres?["restarts"] == .integer(1) && postgres?["state"] == .string("running")
            }, "findmy did not start the stopped PostgreSQL again")

        try report(20)
        #expect(waitUntilProjected(acknowledged), "the projector did not catch up after PostgreSQL came back")
        let pg = try PostgresConnection(cluster.conninfo)
        defer { pg.close() }
        #expect(
            try pg.execute("SELECT count(DISTINCT (log_offset, fix_index)) FROM findmy.device_locations")
                .int64(0, 0) == Int64(acknowledged))
        var healthy = JSONValue.null
        let settled = try waitUntil {
            healthy = try JSONParser.parse(try connection.send("GET", "/healthz").body)
            return healthy["status"] == .string("ok") && healthy["projector"]?["lag_offsets"] == .integer(0)
        }
        #expect(settled, "\(healthy)")
    }
}
