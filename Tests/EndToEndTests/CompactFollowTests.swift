import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// `findmy compact` against a running server follows the run to its end, however long it takes:
/// one admin call starts it, later ones (each shorter than an admin call may take) ask where it
/// is, and the operator sees progress lines, then the report and exit status 0. Before, the one
/// call that waited for the whole run gave up after its timeout (30 s) while the run went on in
/// the server, and the operator was told it had failed (docs/retention.md, "Running it by hand").
@Suite struct CompactFollowTests {
    /// The seconds a progress line says the run has been followed for, if it is one.
    static func followedSeconds(_ line: Substring, step: String) -> Int? {
        guard line.contains(step), let open = line.lastIndex(of: "("), line.hasSuffix(" s)") else {
            return nil
        }
        return Int(line[line.index(after: open)...].dropLast(3))
    }

    @Test func compactFollowsARunLongerThanOneAdminCallToItsEnd() throws {
        let data = ScratchDirectory("findmy-compact-follow")
        defer { withExtendedLifetime(data) {} }
        let server = try ServerProcess(
            data: data.path,
            extraArguments: [
                "--projector", "on", "--compact-interval-seconds", "86400", "--compact-first-run-seconds",
                "86400",
            ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let token = try addUser("alice", data: data.path)
        let device = try enrol(connection, userToken: token, uuid: UUID().uuidString)
        let fixes = (0..<20).map { fixJSON(secondsAgo: 60 + $0) }
        let answer = try post(
            connection, "/api/find-my/report", token: device.string("device_token")!,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(answer.status == 200, "\(answer.body)")
        try waitForProjector(data.path)
        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        let sql = try PostgresConnection(cluster.conninfo)
        defer { sql.close() }
        let rows = "SELECT count(*) FROM findmy.device_locations"
        #expect(try sql.execute(rows).int64(0, 0) == 20)

        // A reader holding the history table: the run's database step waits for it, for as long as
        // the test keeps it, far longer than one admin call may take here (1 s).
        try sql.executeScript("BEGIN; LOCK TABLE findmy.device_locations IN SHARE MODE")
        var committed = false
        defer { if !committed { try? sql.executeScript("ROLLBACK") } }
        let asOf = RFC3339.formatMillis(Int64(Date().timeIntervalSince1970 * 1_000_000) + 60 * 86_400_000_000)
        let compact = try FindmyProcess(
            ["compact", "--data-dir", data.path, "--as-of", asOf],
            environment: ["FINDMY_ADMIN_CALL_TIMEOUT_SECONDS": "1"])
        defer {
            compact.kill()
            compact.wait()
        }
        // Followed for 3 s, three admin-call timeouts, while the run waits on the table.
        let followed = waitUntil(timeoutSeconds: 120) {
            compact.standardError.split(separator: "\n").contains {
                (Self.followedSeconds($0, step: "deleting rows from PostgreSQL") ?? 0) >= 3
            } || !compact.process.isRunning
        }
        #expect(followed && compact.process.isRunning, "\(compact.standardError)")
        try sql.executeScript("COMMIT")
        committed = true

        let status = compact.wait(timeoutSeconds: 120)
        #expect(status == 0, "\(compact.standardError)")
        let output = compact.outputLines.joined(separator: "\n")
        #expect(output.contains("log: removed 20 fixes"), "\(output)")
        #expect(output.contains("database: removed"), "\(output)")
        #expect(try sql.execute(rows).int64(0, 0) == 0)
    }
}
