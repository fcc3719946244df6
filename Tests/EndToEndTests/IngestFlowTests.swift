import Foundation
import HTTPClient
import JSON
import Testing

/// The ingest API over real HTTP against a started `findmy serve`.
@Suite struct IngestFlowTests {
    @Test func enrolReportAndRetryAcrossARestart() throws {
        let data = ScratchDirectory("findmy-ingest")
        let aliceToken = try addUser("alice", data: data.path)  // no server yet: opens the log itself
        var server = try ServerProcess(data: data.path)
        var connection = HTTPConnection(address: server.address)

        let enrolled = try enrol(
            connection, userToken: aliceToken, uuid: "1b4e28ba-2fa1-11d2-883f-0016d3cca427")
        #expect(enrolled.status == 201)
        let deviceToken = try #require(enrolled.string("device_token"))
        let batch = reportBody(
            batchID: UUID().uuidString, fixes: [fixJSON(latitude: 1), fixJSON(latitude: 2)])
        let first = try post(connection, "/api/find-my/report", token: deviceToken, body: batch)
        #expect(first.status == 200 && first.int("accepted") == 2 && first.body["duplicate"] == .bool(false))
        #expect((try? first.body["rejected"]?.arrayValue.count) == 0)

        let retry = try post(connection, "/api/find-my/report", token: deviceToken, body: batch)
        #expect(retry.status == 200 && retry.body["duplicate"] == .bool(true))
        #expect(retry.int("offset") == first.int("offset") && retry.int("accepted") == 2)

        // A user added while the server runs goes through the admin socket.
        let bobToken = try addUser("bob", data: data.path)
        #expect(
            try enrol(connection, userToken: bobToken, uuid: "2b4e28ba-2fa1-11d2-883f-0016d3cca427").status
                == 201)

        #expect(server.stop() == 0, "SIGTERM must exit 0: \(server.process.standardError)")
        server = try ServerProcess(data: data.path)
        connection = HTTPConnection(address: server.address)
        let afterRestart = try post(connection, "/api/find-my/report", token: deviceToken, body: batch)
        #expect(afterRestart.status == 200 && afterRestart.body["duplicate"] == .bool(true))
        #expect(afterRestart.int("offset") == first.int("offset"))
        #expect(server.stop() == 0)

        let batches = try dumpLog(data.path).batches
        #expect(batches.count == 1 && batches.first?.fixes.count == 2)
        #expect(!server.process.standardError.contains("52.52"), "coordinates must never be logged")
    }

    @Test func reEnrolmentRevokesTheOldTokenAndUUIDsArePerUser() throws {
        let data = ScratchDirectory("findmy-ingest")
        let alice = try addUser("alice", data: data.path)
        let bob = try addUser("bob", data: data.path)
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let uuid = "3b4e28ba-2fa1-11d2-883f-0016d3cca427"
        let first = try enrol(connection, userToken: alice, uuid: uuid)
        let again = try enrol(connection, userToken: alice, uuid: uuid, name: "phone (reinstalled)")
        #expect(first.status == 201 && again.status == 200)
        #expect(first.int("device_id") == again.int("device_id"))
        let oldToken = try #require(first.string("device_token"))
        let newToken = try #require(again.string("device_token"))
        let old = try post(
            connection, "/api/find-my/report", token: oldToken,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(old.status == 401 && old.errorCode == "invalid_token")
        let new = try post(
            connection, "/api/find-my/report", token: newToken,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(new.status == 200 && new.int("accepted") == 1)

        // The same UUID under another user is another device, and does not touch alice's.
        let bobs = try enrol(connection, userToken: bob, uuid: uuid)
        #expect(bobs.status == 201 && bobs.int("device_id") != first.int("device_id"))
        let stillAlice = try post(
            connection, "/api/find-my/report", token: newToken,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(stillAlice.status == 200)
        // A device token cannot enrol, a user token cannot report.
        #expect(try enrol(connection, userToken: newToken, uuid: uuid).status == 401)
        #expect(
            try post(
                connection, "/api/find-my/report", token: alice,
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()])
            ).status == 401)
    }

    @Test func pushTokensRotateAndMoveAndPauseSurvivesARestart() throws {
        let data = ScratchDirectory("findmy-ingest")
        let alice = try addUser("alice", data: data.path)
        var server = try ServerProcess(data: data.path)
        var connection = HTTPConnection(address: server.address)
        let phone = try #require(
            try enrol(connection, userToken: alice, uuid: "4b4e28ba-2fa1-11d2-883f-0016d3cca427").string(
                "device_token"))
        let tablet = try #require(
            try enrol(
                connection, userToken: alice, uuid: "5b4e28ba-2fa1-11d2-883f-0016d3cca427", name: "tablet"
            ).string("device_token"))
        func push(_ token: String, _ pushToken: String) throws -> Int {
            try post(
                connection, "/api/find-my/push-tokens", token: token,
                body:
                    "{\"provider\": \"apns\", \"token\": \"\(pushToken)\", \"topic\": \"org.findmy\", \"environment\": \"production\"}"
            ).status
        }
        #expect(try push(phone, "aaaa") == 200)
        #expect(try push(phone, "bbbb") == 200)  // rotation
        #expect(try push(tablet, "bbbb") == 200)  // moves to the tablet
        let badProvider = try post(
            connection, "/api/find-my/push-tokens", token: phone,
            body: "{\"provider\": \"sms\", \"token\": \"x\"}")
        #expect(badProvider.status == 400 && badProvider.errorCode == "invalid_field")

        let paused = try post(connection, "/api/find-my/reporting", token: phone, body: "{\"paused\": true}")
        #expect(paused.status == 200 && paused.body["paused"] == .bool(true))
        let refused = try post(
            connection, "/api/find-my/report", token: phone,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(refused.status == 409 && refused.errorCode == "reporting_paused")
        #expect(
            try post(
                connection, "/api/find-my/report", token: tablet,
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()])
            ).status == 200)

        #expect(server.stop() == 0)
        server = try ServerProcess(data: data.path)
        connection = HTTPConnection(address: server.address)
        let stillPaused = try post(
            connection, "/api/find-my/report", token: phone,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(stillPaused.status == 409 && stillPaused.errorCode == "reporting_paused")
        #expect(
            try post(connection, "/api/find-my/reporting", token: phone, body: "{\"paused\": false}").status
                == 200)
        #expect(
            try post(
                connection, "/api/find-my/report", token: phone,
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()])
            ).status == 200)
        #expect(server.stop() == 0)

        let records = try dumpLog(data.path).records
        let pushes = records.filter { $0["type"] == .string("push_token_registered") }
        #expect(pushes.count == 3)
        #expect(records.filter { $0["type"] == .string("reporting_changed") }.count == 2)
    }

    @Test func healthzAndMetricsAnswer() throws {
        let data = ScratchDirectory("findmy-ingest")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let health = try connection.send("GET", "/healthz")
        #expect(health.status == 200 && health.bodyText.contains("writable"))
        let metrics = try connection.send("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(
            metrics.bodyText.contains(
                "findmy_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"} 1"))
        #expect(metrics.bodyText.contains("findmy_log_fsyncs_total"))
    }
}
