import Foundation
import HTTPClient
import JSON
import Testing

/// Every kind of bad input gets its status and error code; afterwards the server still serves and
/// every fix acknowledged before is in the log, unchanged.
@Suite struct IngestBadInputTests {
    struct Case {
        var name: String
        var body: String
        var token: Token = .device
        var status: Int
        /// The error code of a refused request, or the rejection reason code of fix 0 in a 200.
        var code: String
    }

    enum Token { case device, none, wrong, revoked, user, otherUsersDevice }

    @Test func badInputsAreRefusedAndNothingAcknowledgedIsLost() throws {
        let data = ScratchDirectory("findmy-bad")
        let alice = try addUser("alice", data: data.path)
        let bob = try addUser("bob", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: [
                "--body-bytes-max", "65536", "--batch-fixes-max", "100", "--request-timeout-seconds", "1",
            ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let uuid = "6b4e28ba-2fa1-11d2-883f-0016d3cca427"
        let revoked = try #require(try enrol(connection, userToken: alice, uuid: uuid).string("device_token"))
        let device = try #require(try enrol(connection, userToken: alice, uuid: uuid).string("device_token"))
        let bobsDevice = try #require(
            try enrol(connection, userToken: bob, uuid: uuid).string("device_token"))

        // Acknowledged before the bad inputs: must be intact after them.
        var acknowledged: [String: Int] = [:]
        for index in 0..<5 {
            let batchID = UUID().uuidString.lowercased()
            let answer = try post(
                connection, "/api/find-my/report", token: device,
                body: reportBody(batchID: batchID, fixes: (0...index).map { fixJSON(latitude: Double($0)) }))
            #expect(answer.status == 200)
            acknowledged[batchID] = index + 1
        }

        let id = "\"batch_id\": \"\(UUID().uuidString)\""
        let good = fixJSON()
        let cases: [Case] = [
            Case(
                name: "malformed JSON", body: "{\(id), \"fixes\": [\(good)", status: 400,
                code: "malformed_json"),
            Case(
                name: "NaN literal", body: "{\(id), \"fixes\": [{\"latitude\": NaN}]}", status: 400,
                code: "malformed_json"),
            Case(name: "not an object", body: "[\(good)]", status: 400, code: "wrong_type"),
            Case(
                name: "batch_id wrong type", body: "{\"batch_id\": 7, \"fixes\": [\(good)]}", status: 400,
                code: "wrong_type"),
            Case(
                name: "batch_id not a UUID", body: "{\"batch_id\": \"x\", \"fixes\": [\(good)]}", status: 400,
                code: "invalid_batch_id"),
            Case(
                name: "fixes wrong type", body: "{\(id), \"fixes\": \"many\"}", status: 400,
                code: "wrong_type"),
            Case(
                name: "unknown top-level field", body: "{\(id), \"fixes\": [\(good)], \"device_id\": 3}",
                status: 400, code: "unknown_field"),
            Case(name: "empty batch", body: "{\(id), \"fixes\": []}", status: 400, code: "empty_batch"),
            Case(
                name: "too many fixes",
                body: reportBody(batchID: UUID().uuidString, fixes: Array(repeating: good, count: 101)),
                status: 413, code: "too_many_fixes"),
            Case(
                name: "body over the limit",
                body: reportBody(
                    batchID: UUID().uuidString,
                    fixes: [fixJSON(extra: ", \"x\": \"\(String(repeating: "a", count: 70_000))\"")]),
                status: 413, code: "body_too_large"),
            Case(
                name: "missing accuracy",
                body: reportBody(
                    batchID: UUID().uuidString,
                    fixes: [
                        "{\"latitude\": 1, \"longitude\": 2, \"source\": \"manual\", \"recorded_at\": \"2026-01-01T00:00:00Z\"}"
                    ]), status: 200, code: "missing_field"),
            Case(
                name: "wrong type in a fix",
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(extra: ", \"speed_mps\": \"fast\"")]),
                status: 200, code: "wrong_type"),
            Case(
                name: "latitude out of range",
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(latitude: 91)]), status: 200,
                code: "out_of_range"),
            Case(
                name: "unknown field in a fix",
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(extra: ", \"floor\": 3")]),
                status: 200, code: "unknown_field"),
            Case(
                name: "expired fix",
                body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(secondsAgo: 31 * 86_400)]),
                status: 200, code: "expired"),
            Case(
                name: "no token", body: reportBody(batchID: UUID().uuidString, fixes: [good]), token: .none,
                status: 401, code: "missing_token"),
            Case(
                name: "wrong token", body: reportBody(batchID: UUID().uuidString, fixes: [good]),
                token: .wrong, status: 401, code: "invalid_token"),
            Case(
                name: "revoked token", body: reportBody(batchID: UUID().uuidString, fixes: [good]),
                token: .revoked, status: 401, code: "invalid_token"),
            Case(
                name: "a user token", body: reportBody(batchID: UUID().uuidString, fixes: [good]),
                token: .user, status: 401, code: "invalid_token"),
        ]
        for testCase in cases {
            let token: String? =
                switch testCase.token {
                case .device: device
                case .none: nil
                case .wrong: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
                case .revoked: revoked
                case .user: alice
                case .otherUsersDevice: bobsDevice
                }
            let answer = try post(
                HTTPConnection(address: server.address), "/api/find-my/report", token: token,
                body: testCase.body)
            #expect(answer.status == testCase.status, "\(testCase.name): \(answer.body)")
            if testCase.status == 200 {
                let reason = try? answer.body["rejected"]?[0]?["reason"]?.stringValue
                #expect(
                    answer.int("accepted") == 0 && reason?.hasPrefix(testCase.code + ":") == true,
                    "\(testCase.name): \(answer.body)")
            } else {
                #expect(answer.errorCode == testCase.code, "\(testCase.name): \(answer.body)")
                let message = try? answer.body["error"]?["message"]?.stringValue
                #expect(!(message ?? "").isEmpty, "\(testCase.name): an error says how to fix it")
            }
        }

        // Another user's device: bob's device token reports as bob's device, never alice's.
        let bobsBatch = UUID().uuidString.lowercased()
        #expect(
            try post(
                connection, "/api/find-my/report", token: bobsDevice,
                body: reportBody(batchID: bobsBatch, fixes: [good])
            ).status == 200)

        // A slow body (stalls past requestTimeoutSeconds) and a truncated one get no answer: the
        // server closes the stalled connection (the client would wait far longer).
        let slow = try RawClient(address: server.address, timeoutSeconds: 120)
        slow.write(
            "POST /api/find-my/report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(device)\r\nContent-Length: 500\r\n\r\n{\"batch_id\""
        )
        let ending = slow.readToClose()
        #expect(ending.closed && ending.text.isEmpty, "no answer, and the server closed: \(ending.text)")
        let truncated = try RawClient(address: server.address)
        truncated.write(
            "POST /api/find-my/report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(device)\r\nContent-Length: 500\r\n\r\n{\"batch"
        )
        truncated.close()

        // Still serving, with a report that is accepted.
        let after = try post(
            HTTPConnection(address: server.address), "/api/find-my/report", token: device,
            body: reportBody(batchID: UUID().uuidString, fixes: [good]))
        #expect(after.status == 200 && after.int("accepted") == 1)
        #expect(try HTTPConnection(address: server.address).send("GET", "/healthz").status == 200)

        let batches = try dumpLog(data.path).batches
        for (batchID, count) in acknowledged {
            let stored = batches.filter { $0.batchID == batchID }
            #expect(stored.count == 1 && stored.first?.fixes.count == count, "batch \(batchID)")
        }
        #expect(batches.filter { $0.batchID == bobsBatch }.first?.device != batches.first?.device)
        // Refused requests stored nothing: the acknowledged batches, the five 200s with one
        // rejected fix each, bob's batch and the last one.
        #expect(batches.count == acknowledged.count + 5 + 2)
    }
}
