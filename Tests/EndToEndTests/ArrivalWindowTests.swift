import Foundation
import HTTPClient
import JSON
import Testing

/// Ingest's arrival check uses each device's effective window (its override, else its user's, else
/// `--retention-days`), the same rule the compactor deletes by.
@Suite struct ArrivalWindowTests {
    func accepted(_ connection: HTTPConnection, token: String, daysOld: Int) throws -> Int64? {
        let answer = try post(
            connection, "/api/find-my/report", token: token,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(secondsAgo: daysOld * 86_400)]))
        #expect(answer.status == 200, "\(answer.body)")
        return answer.int("accepted")
    }

    @Test func olderFixesAreAcceptedOnlyWithinTheDevicesOwnWindow() throws {
        let data = ScratchDirectory("findmy-arrival")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let alice = try addUser("alice", data: data.path)
        let bob = try addUser("bob", data: data.path)
        var tokens: [String: String] = [:]
        var ids: [String: Int64] = [:]
        for (name, owner) in [("long", alice), ("short", alice), ("plain", alice), ("bobs", bob)] {
            let answer = try enrol(connection, userToken: owner, uuid: UUID().uuidString, name: name)
            tokens[name] = answer.string("device_token")!
            ids[name] = answer.int("device_id")!
        }
        for (name, days) in [("long", 60), ("short", 5)] {
            let response = try connection.send(
                "PUT", "/api/find-my/devices/\(ids[name]!)/retention",
                headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(alice)")],
                body: Array("{\"days\": \(days)}".utf8))
            #expect(response.status == 200)
        }
        let user = try FindmyProcess.run([
            "retention", "set", "--user", "bob", "--days", "90", "--data-dir", data.path,
        ])
        #expect(user.status == 0, "\(user.error)")

        #expect(
            try accepted(connection, token: tokens["long"]!, daysOld: 40) == 1,
            "a 60-day device takes a 40-day-old fix")
        #expect(
            try accepted(connection, token: tokens["plain"]!, daysOld: 40) == 0,
            "the default 30 days refuses it")
        #expect(
            try accepted(connection, token: tokens["bobs"]!, daysOld: 80) == 1, "the user's 90 days apply")
        #expect(
            try accepted(connection, token: tokens["short"]!, daysOld: 10) == 0,
            "a 5-day device refuses a 10-day-old fix")
        #expect(try accepted(connection, token: tokens["plain"]!, daysOld: 10) == 1)

        // Cleared: back to the default; and the rule survives a restart (folded from the log).
        let clear = try connection.send(
            "PUT", "/api/find-my/devices/\(ids["long"]!)/retention",
            headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(alice)")],
            body: Array("{\"days\": null}".utf8))
        #expect(clear.status == 200)
        #expect(try accepted(connection, token: tokens["long"]!, daysOld: 40) == 0)
        server.stop()
        let again = try ServerProcess(data: data.path)
        defer { again.stop() }
        #expect(
            try accepted(HTTPConnection(address: again.address), token: tokens["bobs"]!, daysOld: 80) == 1)
    }
}
