import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// PostgreSQL is stopped from outside under a running server, and findmy starts it again:
/// reports keep being site.acknowledged, the projector reconnects and catches up, nothing is lost or
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
        let site = try Site(server: server, data: data.path)
        let cluster = site.cluster
        let connection = site.connection
        func projectedFixes() -> Int64? {
            guard let connection = try? PostgresConnection(cluster.conninfo) else { return nil }
            defer { connection.close() }
            return try? connection.execute("SELECT count(*) FROM findmy.device_locations").int64(0, 0)
        }
        func waitUntilProjected(_ expected: Int) -> Bool {
            waitUntil(timeoutSeconds: 120) { projectedFixes() == Int64(expected) }
        }

        try site.report(20)
        #expect(waitUntilProjected(site.acknowledged))

        try cluster.stop()
        try site.report(50)  // PostgreSQL is down or restarting: the report path does not care
        let health = try connection.send("GET", "/healthz")
        #expect(health.status == 200)
        // findmy's supervisor starts it again (docs/postgres.md, "Supervision").
        #expect(
            try waitUntil {
                let postgres = try site.postgresHealth()
                return postgres?["restarts"] == .integer(1) && postgres?["state"] == .string("running")
            }, "findmy did not start the stopped PostgreSQL again")

        try site.report(20)
        #expect(
            waitUntilProjected(site.acknowledged), "the projector did not catch up after PostgreSQL came back"
        )
        let pg = try PostgresConnection(cluster.conninfo)
        defer { pg.close() }
        #expect(
            try pg.execute("SELECT count(DISTINCT (log_offset, fix_index)) FROM findmy.device_locations")
                .int64(0, 0) == Int64(site.acknowledged))
        var healthy = JSONValue.null
        let settled = try waitUntil {
            healthy = try site.health()
            return healthy["status"] == .string("ok") && healthy["projector"]?["lag_offsets"] == .integer(0)
        }
        #expect(settled, "\(healthy)")
    }
}
