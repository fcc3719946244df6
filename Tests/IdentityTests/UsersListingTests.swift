import JSON
import Testing

@testable import Identity

/// The admin listing of users (`GET /api/find-my/admin/users`): each user with their device count.
@Suite struct UsersListingTests {
    @Test func eachUserIsListedWithTheirOwnDeviceCount() throws {
        let door = try Door()
        let ada = try door.loggedInUser("ada", role: .admin)
        let bo = try door.loggedInUser("bo")
        _ = try door.loggedInUser("cy")
        for _ in 0..<3 { _ = try door.enrol(ada.token) }
        _ = try door.enrol(bo.token)
        let listing = try JSONParser.parse(door.service.usersJSON())
        var counts: [String: Int64] = [:]
        for user in try listing["users"]?.arrayValue ?? [] {
            counts[try user["name"]?.stringValue ?? ""] = try user["devices"]?.int64Value
        }
        #expect(counts == ["ada": 3, "bo": 1, "cy": 0])
    }
}
