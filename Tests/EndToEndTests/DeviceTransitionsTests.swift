import Foundation
import HTTPClient
import JSON
import Testing

/// A device's transitions through `findmy serve` (docs/geofences.md, "A device's transitions"):
/// the server's decisions from native reports and the phone's own OwnTracks `transition` messages,
/// side by side, newest first, paged; only for whoever may see the device.
@Suite(.serialized) struct DeviceTransitionsTests {
    func transitionMessage(_ event: String, minutesAgo: Int, rid: String?, desc: String, acc: Int?) -> [UInt8]
    {
        let tst = Int(Date().timeIntervalSince1970) - minutesAgo * 60
        var json =
            "{\"_type\":\"transition\",\"event\":\"\(event)\",\"tst\":\(tst),\"wtst\":1,\"desc\":\"\(desc)\",\"t\":\"c\",\"lat\":52.52,\"lon\":13.405,\"tid\":\"px\""
        if let rid { json += ",\"rid\":\"\(rid)\"" }
        if let acc { json += ",\"acc\":\(acc)" }
        return Array((json + "}").utf8)
    }

    /// (source, event, geofence_id, region) of each row.
    func summary(_ answer: Answer) throws -> [String] {
        try (answer.body["transitions"]?.arrayValue ?? []).map { row in
            let fence = (try? row["geofence_id"]?.int64Value).map { String($0) } ?? "-"
            let region = (try? row["region"]?.stringValue) ?? "-"
            return
                "\(try row["source"]?.stringValue ?? "") \(try row["event"]?.stringValue ?? "") \(fence) \(region)"
        }
    }

    @Test func theServersDecisionsAndThePhonesOwnReportsSideBySide() throws {
        let setup = try OwnTracksHTTPTests.Setup()
        defer { setup.stop() }
        let device = setup.janeDevice
        let created = try post(
            setup.connection, "/api/find-my/geofences", token: setup.janeToken,
            body:
                "{\"name\": \"Home\", \"latitude\": 52.52, \"longitude\": 13.405, \"radius_m\": 100, \"device_ids\": [\(device.id)]}"
        )
        #expect(created.status == 201, "\(created.body)")
        let fenceID = try #require(created.int("geofence_id"))
        // Native reports: home, away (leave 240 min ago), home again (enter 120 min ago).
        let fixes = [
            fixJSON(latitude: 52.52, secondsAgo: 300 * 60), fixJSON(latitude: 52.53, secondsAgo: 240 * 60),
            fixJSON(latitude: 52.52, secondsAgo: 120 * 60),
        ]
        let reported = try post(
            setup.connection, "/api/find-my/report", token: device.token,
            body: reportBody(batchID: UUID().uuidString, fixes: fixes))
        #expect(reported.status == 200, "\(reported.body)")
        // The phone's own view: it noticed leaving its findmy region 238 min ago, and entering a
        // region of its own (no rid, no accuracy) an hour ago.
        let auth = OwnTracksHTTPTests.basic("jane", device.token)
        for message in [
            transitionMessage("leave", minutesAgo: 238, rid: "findmy-\(fenceID)", desc: "Home", acc: 25),
            transitionMessage("enter", minutesAgo: 60, rid: nil, desc: "Gym", acc: nil),
        ] {
            #expect(try OwnTracksHTTPTests.publish(setup.connection, message, auth: auth).status == 200)
        }
        // A later report: its offset is after both messages in the log.
        let after = try post(
            setup.connection, "/api/find-my/report", token: device.token,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON(latitude: 52.52, secondsAgo: 30)]))
        let offset = try #require(after.int("offset"))
        let path = "/api/find-my/devices/\(device.id)/transitions"
        let answer = try get(setup.connection, path + "?after_offset=\(offset)", token: setup.janeToken)
        #expect(answer.status == 200, "\(answer.body)")
        #expect(
            try summary(answer) == [
                "device enter - Gym", "server enter \(fenceID) -", "device leave \(fenceID) Home",
                "server leave \(fenceID) -",
            ])
        let rows = try answer.body["transitions"]?.arrayValue ?? []
        #expect(rows.first?["fix_accuracy_m"] == .null && rows.first?["geofence_name"] == .null)
        #expect(
            try rows[1]["geofence_name"]?.stringValue == "Home"
                && rows[1]["fix_accuracy_m"]?.doubleValue == 12)
        #expect(
            try rows[2]["geofence_name"]?.stringValue == "Home"
                && rows[2]["fix_accuracy_m"]?.doubleValue == 25)
        for row in rows {
            let recorded = try RFC3339.parseMicros(try row["recorded_at"]?.stringValue ?? "")
            let received = try RFC3339.parseMicros(try row["received_at"]?.stringValue ?? "")
            #expect(received > recorded)
        }

        // Paged one at a time: the same four, in the same order.
        var paged: [String] = []
        var cursor: String?
        repeat {
            let page = try get(
                setup.connection, path + "?limit=1" + (cursor.map { "&cursor=\($0)" } ?? ""),
                token: setup.janeToken)
            #expect(page.status == 200, "\(page.body)")
            paged += try summary(page)
            cursor = page.string("next_cursor")
        } while cursor != nil && paged.count < 10
        #expect(paged == (try summary(answer)))
        // from/to bound recorded_at.
        let from = RFC3339.formatMillis(Int64(Date().timeIntervalSince1970 - 180 * 60) * 1_000_000)
        let bounded = try get(
            setup.connection, path + "?from=\(from.replacingOccurrences(of: "+", with: "%2B"))",
            token: setup.janeToken)
        #expect(try summary(bounded) == ["device enter - Gym", "server enter \(fenceID) -"])

        // Bob may not see Jane's phone: the same 404 as a device that does not exist.
        let stranger = try get(setup.connection, path, token: setup.bobToken)
        let missing = try get(
            setup.connection, "/api/find-my/devices/999999/transitions", token: setup.bobToken)
        #expect(stranger.status == 404 && stranger.body == missing.body)
        // Bob's own phone has no transitions.
        let own = try get(
            setup.connection, "/api/find-my/devices/\(setup.bobDevice.id)/transitions", token: setup.bobToken)
        let ownRows = try summary(own)
        #expect(own.status == 200 && ownRows.isEmpty)
    }
}
