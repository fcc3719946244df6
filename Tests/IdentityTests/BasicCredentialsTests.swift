import Foundation
import HTTP
import Testing

@testable import Identity

/// Apps' HTTP Basic credentials (OwnTracks: the user name and the device token). The gate keeps
/// each header it decoded (`BasicCredentialsMemo`), but whether the token still opens the door is
/// asked of the registry on every request: a header seen before is refused as soon as its token is
/// revoked, and one that never worked does not start working.
@Suite struct BasicCredentialsTests {
    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    static func request(_ authorization: String) -> HTTPRequest {
        var headers = HTTPHeaders()
        headers.add("Authorization", authorization)
        return HTTPRequest(method: "POST", target: "/api/find-my/owntracks", headers: headers, body: [])
    }

    /// Enrols (or re-enrols, which revokes the earlier token) the device `uuid` of the user with `token`.
    static func enrol(_ door: Door, _ token: String, uuid: String) throws -> (id: UInt64, token: String) {
        let answer = door.send(
            "POST", "/api/find-my/devices", headers: [("Authorization", "Bearer \(token)")],
            body: "{\"device_uuid\": \"\(uuid)\", \"name\": \"phone\", \"platform\": \"android\"}")
        guard let id = try? answer.body["device_id"]?.int64Value,
            let deviceToken = try? answer.body["device_token"]?.stringValue
        else { throw DoorFailure("enrolment: \(answer.status) \(answer.body)") }
        return (UInt64(id), deviceToken)
    }

    func device(_ door: Door, _ authorization: String) -> Result<UInt64, APIError> {
        Result { () throws(APIError) in try door.service.appDeviceID(Self.request(authorization)) }
    }

    @Test func aRevokedTokenIsRefusedFromTheNextRequestThoughItsHeaderWasSeen() throws {
        let door = try Door()
        let jane = try door.service.createUser(name: "jane", role: .member)
        let uuid = UUID().uuidString
        let first = try Self.enrol(door, jane.token, uuid: uuid)
        let header = Self.basic("jane", first.token)
        for _ in 0..<3 { #expect(try device(door, header).get() == first.id) }
        #expect(door.service.basicCredentials.count == 1)

        // Re-enrolling the device revokes its earlier token.
        let second = try Self.enrol(door, jane.token, uuid: uuid)
        #expect(device(door, header) == .failure(.unknownToken))
        #expect(try device(door, Self.basic("jane", second.token)).get() == second.id)

        // A removed device's token opens nothing.
        let removed = door.send(
            "DELETE", "/api/find-my/devices/\(second.id)",
            headers: [("Authorization", "Bearer \(jane.token)")])
        #expect(removed.status == 200, "\(removed.body)")
        #expect(device(door, Self.basic("jane", second.token)) == .failure(.unknownToken))
    }

    @Test func aHeaderThatFailedKeepsFailingAndTheNameStillCounts() throws {
        let door = try Door()
        let jane = try door.service.createUser(name: "jane", role: .member)
        _ = try door.service.createUser(name: "bob", role: .member)
        let phone = try Self.enrol(door, jane.token, uuid: UUID().uuidString)
        let wrongName = Self.basic("bob", phone.token)
        for _ in 0..<2 { #expect(device(door, wrongName) == .failure(.unknownToken)) }
        for _ in 0..<2 { #expect(device(door, Self.basic("jane", "not-a-token")) == .failure(.unknownToken)) }
        #expect(try device(door, Self.basic("jane", phone.token)).get() == phone.id)
        // Spaces around the token, and the scheme's name in any case, as before the memo.
        #expect(
            try device(door, "bASIC " + Data("jane: \(phone.token) ".utf8).base64EncodedString()).get()
                == phone.id)
        #expect(throws: APIError.self) { try door.service.appDeviceID(Self.request("Basic %%%")) }
    }

    @Test func everyRequestCountsOneLookupWhetherTheHeaderWasSeenOrNot() throws {
        let door = try Door()
        let jane = try door.service.createUser(name: "jane", role: .member)
        let phone = try Self.enrol(door, jane.token, uuid: UUID().uuidString)
        let header = Self.basic("jane", phone.token)
        for _ in 0..<3 {
            let before = door.service.sessions.lookups.count
            _ = device(door, header)
            #expect(door.service.sessions.lookups.count - before == 1)
        }
    }
}
