import Events
import Foundation
import HTTPClient
import Import
import JSON
import Testing

/// An export reads the projection in pages of 10,000 by the history index's own keyset
/// (recorded_at, latitude, longitude). Fixes that share a recorded_at, some of them a latitude
/// too, and a group of them cut by a page's end: every fix comes once, none is skipped, in that
/// order.
@Suite(.serialized) struct ExportPagesTests {
    @Test func fixesOfOneInstantAcrossAPageEndComeOnceInKeysetOrder() throws {
        let read = try ReadServer("findmy-export-ties", users: ["alice"])
        defer { read.stop() }
        let phone = try enrol(
            read.connection, userToken: read.tokens[0], uuid: "9b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))
        // Groups of 7 fixes an instant (10,000 is not a multiple of 7, so a page ends inside a
        // group); in a group, pairs share a latitude and differ in longitude.
        let count = 10_507
        let first = (Int64(Date().timeIntervalSince1970) - 7_200) * 1_000_000
        let fixes = (0..<count).map { index in
            let slot = index % 7
            return Fix(
                latitude: 48 + Double(slot / 2) / 1_000, longitude: 11 - Double(slot % 2) / 1_000,
                accuracyMeters: 8, batteryPercent: 60, source: "gps",
                recordedAtMicros: first + Int64(index / 7) * 1_000_000)
        }
        // The keyset's order, which is not the order of the list above (longitudes fall in a pair).
        let expected = fixes.sorted { a, b in
            (a.recordedAtMicros, a.latitude, a.longitude) < (b.recordedAtMicros, b.latitude, b.longitude)
        }
        #expect(expected != fixes)
        var offset: Int64 = 0
        // The newest first, in an order of their own: the pages follow the index, not the log.
        for part in [fixes[6_000...].reversed(), fixes[..<6_000].reversed()] {
            let answer = try post(
                read.connection, "/api/find-my/report", token: phoneToken,
                body: reportBody(batchID: UUID().uuidString, fixes: part.map(Self.json)))
            #expect(answer.status == 200 && answer.int("accepted") == Int64(part.count), "\(answer.body)")
            offset = max(offset, try #require(answer.int("offset")))
        }
        let response = try read.connection.send(
            "GET", "/api/find-my/devices/\(phoneID)/export?after_offset=\(offset)&format=csv",
            headers: [("Authorization", "Bearer \(read.tokens[0])")])
        #expect(response.status == 200)
        var reader = ImportFormat.csv.reader(source: MemoryByteSource(response.body))
        var back: [Fix] = []
        while let item = try reader.next() {
            if case .fix(let fix) = item { back.append(fix) }
        }
        #expect(back.count == count)
        #expect(back == expected)
    }

    static func json(_ fix: Fix) -> String {
        "{\"latitude\": \(fix.latitude), \"longitude\": \(fix.longitude), \"accuracy_m\": 8, "
            + "\"battery_pct\": 60, \"source\": \"gps\", "
            + "\"recorded_at\": \"\(RFC3339.formatMicros(fix.recordedAtMicros))\"}"
    }
}
