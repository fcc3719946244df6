import Foundation
import HTTPClient
import JSON
import Testing

/// `POST /api/find-my/push-tokens`: `apns-location` beside `apns`, and UnifiedPush registrations
/// with their Web Push keys, kept across a restart (the registry folds them from the log).
@Suite struct PushTokenRegistrationTests {
    @Test func unifiedPushKeysAndLocationTokensAreAccepted() throws {
        let data = ScratchDirectory("findmy-pushreg")
        let alice = try addUser("alice", data: data.path)
        var server = try ServerProcess(data: data.path)
        defer { _ = server.stop() }
        let connection = HTTPConnection(address: server.address)
        let phone = try #require(
            try enrol(connection, userToken: alice, uuid: "6b4e28ba-2fa1-11d2-883f-0016d3cca427").string(
                "device_token"))
        func register(_ body: String) throws -> (status: Int, code: String?) {
            let response = try post(connection, "/api/find-my/push-tokens", token: phone, body: body)
            return (response.status, response.errorCode)
        }
        // RFC 8291 Appendix A's receiver keys: a real P-256 point and a 16-byte secret.
        let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        let auth = "BTBZMqHH6r4Tts7J_aSIgg"
        #expect(
            try register(
                "{\"provider\": \"unifiedpush\", \"token\": \"https://ntfy.example/upAbC?up=1\", \"p256dh\": \"\(p256dh)\", \"auth\": \"\(auth)\"}"
            ).status == 200)
        #expect(
            try register(
                "{\"provider\": \"apns-location\", \"token\": \"abcd\", \"topic\": \"org.findmy.location-query\", \"environment\": \"sandbox\"}"
            ).status == 200)
        #expect(
            try register(
                "{\"provider\": \"apns\", \"token\": \"ef01\", \"topic\": \"org.findmy\", \"environment\": \"sandbox\"}"
            )
            .status == 200)

        let refusals = [
            // keys missing, not base64url, off the curve, wrong length; an http endpoint; keys for apns
            "{\"provider\": \"unifiedpush\", \"token\": \"https://ntfy.example/x\"}",
            "{\"provider\": \"unifiedpush\", \"token\": \"https://ntfy.example/x\", \"p256dh\": \"!!\", \"auth\": \"\(auth)\"}",
            "{\"provider\": \"unifiedpush\", \"token\": \"https://ntfy.example/x\", \"p256dh\": \"\(p256dh.dropLast(2))AA\", \"auth\": \"\(auth)\"}",
            "{\"provider\": \"unifiedpush\", \"token\": \"https://ntfy.example/x\", \"p256dh\": \"\(p256dh)\", \"auth\": \"BTBZ\"}",
            "{\"provider\": \"unifiedpush\", \"token\": \"http://ntfy.example/x\", \"p256dh\": \"\(p256dh)\", \"auth\": \"\(auth)\"}",
            "{\"provider\": \"apns\", \"token\": \"ef01\", \"p256dh\": \"\(p256dh)\", \"auth\": \"\(auth)\"}",
        ]
        for body in refusals {
            let answer = try register(body)
            #expect(answer.status == 400 && answer.code == "invalid_field", "\(body)")
        }
        #expect(server.stop() == 0)

        // The log holds the keys (a version 2 record) and the location token as its own provider.
        let dump = try FindmyProcess.run(
            ["log", "dump", "--json", "--data-dir", data.path], timeoutSeconds: 120)
        #expect(dump.status == 0)
        let registered = dump.output.split(separator: "\n").filter { $0.contains("push_token_registered") }
        #expect(registered.count == 3)
        #expect(registered.filter { $0.contains("\"web_push_keys\":true") }.count == 1)
        #expect(registered.contains { $0.contains("\"provider\":\"apns-location\"") })

        server = try ServerProcess(data: data.path)
        #expect(server.stop() == 0)
    }
}
