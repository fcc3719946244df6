import Foundation
import HTTPClient
import JSON
import Testing

/// `GET /api/find-my/devices/{id}/stays` over real HTTP against `findmy serve --projector on`: a
/// morning at home, a walk, an hour at the office, reported as an app would, read back as two stays
/// and the move between them, by the owner and by a user the device is shared with, nobody else.
@Suite(.serialized) struct StaysAPITests {
    let startMicros = (Int64(Date().timeIntervalSince1970) - 4 * 3_600) * 1_000_000

    /// A fix `minute` minutes after the start at `latitude` (longitude 13.405, ±10 m).
    func fix(minute: Int, latitude: Double) -> String {
        fixJSON(latitude: latitude, recordedAtMicros: startMicros + Int64(minute) * 60_000_000)
    }

    @Test func aMorningIsTwoStaysAndTheWalkBetweenForViewersOnly() throws {
        let read = try ReadServer("findmy-stays", users: ["alice", "bob", "carol"])
        defer { read.stop() }
        let (alice, bob, carol, connection) = (
            read.tokens[0], read.tokens[1], read.tokens[2], read.connection
        )
        let phone = try enrol(connection, userToken: alice, uuid: "2c4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))
        // 40 minutes at home, a 20-minute walk 2 km north, 60 minutes at the office: a fix a minute.
        var fixes: [String] = []
        for minute in 0..<40 {
            fixes.append(fix(minute: minute, latitude: 52.5200 + Double(minute % 3) * 0.00005))
        }
        for step in 1..<20 {
            fixes.append(fix(minute: 40 + step, latitude: 52.5200 + 0.018 * Double(step) / 20))
        }
        for minute in 60..<120 {
            fixes.append(fix(minute: minute, latitude: 52.5380 + Double(minute % 2) * 0.00005))
        }
        let answer = try post(
            connection, "/api/find-my/report", token: phoneToken,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(answer.status == 200 && answer.int("accepted") == Int64(fixes.count), "\(answer.body)")
        let offset = try #require(answer.int("offset"))

        let from = RFC3339.formatMillis(startMicros)
        let to = RFC3339.formatMillis(startMicros + 3 * 3_600_000_000)
        let path = "/api/find-my/devices/\(phoneID)/stays?from=\(from)&to=\(to)"
        let summary = try get(connection, path + "&after_offset=\(offset)", token: alice)
        #expect(summary.status == 200, "\(summary.body)")
        #expect(summary.int("fix_count") == Int64(fixes.count))
        #expect(summary.body["truncated"] == .bool(false))
        guard case .array(let segments)? = summary.body["segments"] else {
            Issue.record("no segments: \(summary.body)")
            return
        }
        #expect(segments.compactMap { try? $0["type"]?.stringValue } == ["stay", "move", "stay"])
        let home = try #require(segments.first)
        #expect(try home["start"]?.stringValue == RFC3339.formatMicros(startMicros))
        #expect(abs(try #require(try home["latitude"]?.doubleValue) - 52.52) < 0.0005)
        let office = try #require(segments.last)
        #expect(abs(try #require(try office["latitude"]?.doubleValue) - 52.538) < 0.0005)
        #expect(try office["end"]?.stringValue == RFC3339.formatMicros(startMicros + 119 * 60_000_000))
        let walk = segments[1]
        #expect(try #require(try walk["distance_m"]?.doubleValue) > 1_500)
        #expect(walk["gap"] == .bool(false))

        // The summary is the history's: bob sees it once shared, carol never; pages are refused.
        #expect(try get(connection, path, token: bob).status == 404)
        let shared = try post(
            connection, "/api/find-my/devices/\(phoneID)/shares", token: alice, body: "{\"user\": \"bob\"}")
        #expect(shared.status == 200 || shared.status == 201, "\(shared.body)")
        #expect(try get(connection, path, token: bob).body == summary.body)
        #expect(try get(connection, path, token: carol).errorCode == "device_not_found")
        #expect(try get(connection, path + "&limit=10", token: alice).errorCode == "unknown_parameter")
        #expect(
            try get(connection, "/api/find-my/devices/\(phoneID)/stays?from=\(to)&to=\(from)", token: alice)
                .errorCode == "invalid_range")
    }
}
