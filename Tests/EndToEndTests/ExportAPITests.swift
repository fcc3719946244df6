import Events
import Foundation
import HTTPClient
import Import
import JSON
import Testing

/// `GET /api/find-my/devices/{id}/export` over real HTTP against `findmy serve --projector on`:
/// each format read back by Import's reader of that format is the history the device reported, the
/// range bounds `recorded_at` as the history's does, and only a viewer gets it.
@Suite(.serialized) struct ExportAPITests {
    let baseMicros = (Int64(Date().timeIntervalSince1970) - 3_600) * 1_000_000

    func recordedAt(minute: Int) -> Int64 { baseMicros + Int64(minute) * 60_000_000 }

    /// A fix at `minute` with every field a report may carry; the odd minutes lack the optional ones.
    func fix(minute: Int) -> Fix {
        let full = minute % 2 == 0
        return Fix(
            latitude: 52.5 + Double(minute) / 1000, longitude: 13.405, accuracyMeters: 12.5 + Double(minute),
            altitudeMeters: full ? 34.25 : nil, speedMetersPerSecond: full ? 1.5 : nil,
            headingDegrees: full ? 270 : nil, batteryPercent: UInt8(80 - minute),
            isCharging: full ? true : nil,
            source: full ? "significant" : "visit", recordedAtMicros: recordedAt(minute: minute))
    }

    func json(_ fix: Fix) -> String {
        var fields = [
            "\"latitude\": \(fix.latitude)", "\"longitude\": \(fix.longitude)",
            "\"accuracy_m\": \(fix.accuracyMeters!)", "\"battery_pct\": \(fix.batteryPercent!)",
            "\"source\": \"\(fix.source)\"",
            "\"recorded_at\": \"\(RFC3339.formatMillis(fix.recordedAtMicros))\"",
        ]
        if let altitude = fix.altitudeMeters { fields.append("\"altitude_m\": \(altitude)") }
        if let speed = fix.speedMetersPerSecond { fields.append("\"speed_mps\": \(speed)") }
        if let heading = fix.headingDegrees { fields.append("\"heading_deg\": \(heading)") }
        if let charging = fix.isCharging { fields.append("\"is_charging\": \(charging)") }
        return "{" + fields.joined(separator: ", ") + "}"
    }

    func export(_ read: ReadServer, _ target: String, token: String) throws -> HTTPClientResponse {
        try read.connection.send("GET", target, headers: [("Authorization", "Bearer \(token)")])
    }

    func fixesRead(_ body: [UInt8], _ format: ImportFormat) throws -> [Fix] {
        var reader = format.reader(source: MemoryByteSource(body))
        var fixes: [Fix] = []
        while let item = try reader.next() {
            if case .fix(let fix) = item { fixes.append(fix) }
        }
        return fixes
    }

    @Test func eachFormatReadBackIsTheHistoryWithinTheRangeForViewersOnly() throws {
        let read = try ReadServer("findmy-export", users: ["alice", "bob", "carol"])
        defer { read.stop() }
        let (alice, bob, carol, connection) = (
            read.tokens[0], read.tokens[1], read.tokens[2], read.connection
        )
        let phone = try enrol(connection, userToken: alice, uuid: "7b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))
        // Two batches, out of order: the export is by recorded_at, as the history is.
        var offset: Int64 = 0
        for minutes in [[6, 1, 4], [0, 3, 2, 5]] {
            let answer = try post(
                connection, "/api/find-my/report", token: phoneToken,
                body: reportBody(batchID: UUID().uuidString, fixes: minutes.map { json(fix(minute: $0)) }))
            #expect(answer.status == 200 && answer.int("accepted") == Int64(minutes.count), "\(answer.body)")
            offset = try #require(answer.int("offset"))
        }
        let path = "/api/find-my/devices/\(phoneID)/export"
        let expected = (0...6).map { fix(minute: $0) }

        for (name, format) in [("gpx", ImportFormat.gpx), ("geojson", .geojson), ("csv", .csv)] {
            let response = try export(read, "\(path)?format=\(name)&after_offset=\(offset)", token: alice)
            #expect(response.status == 200, "\(name): \(response.bodyText)")
            #expect(
                response.header("Content-Disposition") == "attachment; filename=\"phone-start-end.\(name)\"")
            #expect(response.header("Transfer-Encoding")?.lowercased() == "chunked")
            #expect(try fixesRead(response.body, format) == expected, "\(name)")
        }
        #expect(
            try export(read, "\(path)?format=gpx", token: alice).header("Content-Type")
                == "application/gpx+xml")

        // from inclusive, to exclusive, on recorded_at.
        let from = RFC3339.formatMillis(recordedAt(minute: 2))
        let to = RFC3339.formatMillis(recordedAt(minute: 5))
        let ranged = try export(read, "\(path)?format=csv&from=\(from)&to=\(to)", token: alice)
        #expect(ranged.status == 200)
        #expect(try fixesRead(ranged.body, .csv) == Array(expected[2..<5]))
        let compact = { (micros: Int64) in
            String(RFC3339.formatMicros(micros).prefix(19).filter { $0 != "-" && $0 != ":" }) + "Z"
        }
        #expect(
            ranged.header("Content-Disposition")
                == "attachment; filename=\"phone-\(compact(recordedAt(minute: 2)))-\(compact(recordedAt(minute: 5))).csv\""
        )

        // An unknown format is a 400 that lists the formats; so is none.
        for target in ["\(path)?format=kml", path] {
            let refused = try get(connection, target, token: alice)
            #expect(refused.status == 400)
            #expect(refused.body["error"]?["code"] == .string("unknown_format"))
            let message = try #require(try refused.body["error"]?["message"]?.stringValue)
            #expect(message.contains("gpx, geojson, csv"), "\(message)")
        }

        // Nobody else: bob until alice shares the phone with him, carol never.
        #expect(try get(connection, "\(path)?format=csv", token: bob).status == 404)
        let shared = try post(
            connection, "/api/find-my/devices/\(phoneID)/shares", token: alice, body: "{\"user\": \"bob\"}")
        #expect(shared.status == 200 || shared.status == 201, "\(shared.body)")
        let bobs = try export(read, "\(path)?format=geojson", token: bob)
        #expect(bobs.status == 200)
        #expect(try fixesRead(bobs.body, .geojson) == expected)
        let carols = try get(connection, "\(path)?format=csv", token: carol)
        #expect(carols.status == 404 && carols.body["error"]?["code"] == .string("device_not_found"))
        let revoked = try send(
            connection, "DELETE", "/api/find-my/devices/\(phoneID)/shares/bob", token: alice)
        #expect(revoked.status == 200 || revoked.status == 204)
        #expect(try get(connection, "\(path)?format=csv", token: bob).status == 404)
    }
}
