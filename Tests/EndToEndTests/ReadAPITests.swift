import Foundation
import HTTPClient
import JSON
import Testing

func get(_ connection: HTTPConnection, _ target: String, token: String?) throws -> Answer {
    var headers: [(name: String, value: String)] = []
    if let token { headers.append(("Authorization", "Bearer \(token)")) }
    let response = try connection.send("GET", target, headers: headers)
    return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
}

/// `findmy serve` on a fresh data directory (with the projector unless `projector: false`), with
/// `users` added before it starts: their tokens in order.
struct ReadServer {
    let data: ScratchDirectory
    let tokens: [String]
    let server: ServerProcess
    let connection: HTTPConnection

    init(_ label: String, users: [String], projector: Bool = true) throws {
        let data = ScratchDirectory(label)
        self.data = data
        tokens = try users.map { try addUser($0, data: data.path) }
        server = try ServerProcess(data: data.path, extraArguments: projector ? ["--projector", "on"] : [])
        connection = HTTPConnection(address: server.address)
    }

    func stop() { _ = server.stop() }
}

/// The read API over real HTTP against `findmy serve --projector on` (embedded PostgreSQL).
@Suite(.serialized) struct ReadAPITests {
    let nowMicros = Int64(Date().timeIntervalSince1970) * 1_000_000
    /// An hour ago, on a whole second.
    var baseMicros: Int64 { nowMicros - 3_600_000_000 }

    func fix(minute: Int, latitude: Double) -> String {
        let recordedAt = RFC3339.formatMillis(baseMicros + Int64(minute) * 60_000_000)
        return
            "{\"latitude\": \(latitude), \"longitude\": 13.405, \"accuracy_m\": 12, \"battery_pct\": 81, \"is_charging\": true, \"source\": \"significant\", \"recorded_at\": \"\(recordedAt)\"}"
    }

    /// Every location of the history, walking `next_cursor` with pages of `limit`.
    func walk(_ connection: HTTPConnection, _ path: String, token: String, limit: Int, query: String = "")
        throws -> (locations: [JSONValue], pages: Int)
    {
        var all: [JSONValue] = []
        var cursor: String?
        var pages = 0
        repeat {
            var target = "\(path)?limit=\(limit)\(query)"
            if let cursor { target += "&cursor=\(cursor)" }
            let page = try get(connection, target, token: token)
            guard page.status == 200 else { throw TestFailure("page \(pages): \(page.status) \(page.body)") }
            let locations = try page.body["locations"]!.arrayValue
            #expect(locations.count <= limit)
            all += locations
            pages += 1
            cursor = page.string("next_cursor")
            if cursor != nil { #expect(locations.count == limit, "only a full page has a next page") }
        } while cursor != nil && pages < 100
        return (all, pages)
    }

    @Test func devicesHistoryPaginationRangesArrivalsAndAccess() throws {
        let read = try ReadServer("findmy-read", users: ["alice", "bob"])
        defer { read.stop() }
        let (alice, bob, connection) = (read.tokens[0], read.tokens[1], read.connection)
        let phone = try enrol(connection, userToken: alice, uuid: "4b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let tablet = try enrol(
            connection, userToken: alice, uuid: "5b4e28ba-2fa1-11d2-883f-0016d3cca427", name: "tablet")
        let bobs = try enrol(connection, userToken: bob, uuid: "6b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        let tabletID = try #require(tablet.int("device_id"))
        let bobsID = try #require(bobs.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))

        // Three batches, out of order within and across batches, two fixes at the same minute: the
        // history must come back by recorded_at, then by latitude and longitude.
        let batches = [
            [fix(minute: 10, latitude: 10), fix(minute: 2, latitude: 2), fix(minute: 5, latitude: 5)],
            [fix(minute: 1, latitude: 1), fix(minute: 7, latitude: 7.2), fix(minute: 7, latitude: 7.1)],
            [fix(minute: 3, latitude: 3), fix(minute: 12, latitude: 12), fix(minute: 9, latitude: 9)],
        ]
        var offsets: [Int64] = []
        for fixes in batches {
            let answer = try post(
                connection, "/api/find-my/report", token: phoneToken,
                body: reportBody(batchID: UUID().uuidString, fixes: fixes))
            #expect(answer.status == 200 && answer.int("accepted") == 3)
            offsets.append(try #require(answer.int("offset")))
        }
        let last = offsets.last!

        // The list: alice's two devices, not bob's, with the latest fix and staleness.
        let list = try get(connection, "/api/find-my/devices?after_offset=\(last)", token: alice)
        #expect(list.status == 200, "\(list.body)")
        let devices = try #require(try? list.body["devices"]?.arrayValue)
        #expect(devices.compactMap { try? $0["id"]?.int64Value } == [phoneID, tabletID])
        let listed = devices[0]
        #expect(listed["name"] == .string("phone") && listed["platform"] == .string("ios"))
        #expect(listed["model"] == .string("iPhone 15") && listed["paused"] == .bool(false))
        let latest = try #require(listed["latest"])
        #expect(latest["latitude"] == .double(12) || latest["latitude"] == .integer(12))
        #expect(latest["accuracy_m"] != nil && latest["battery_pct"] == .integer(81))
        #expect(latest["is_charging"] == .bool(true) && latest["source"] == .string("significant"))
        #expect(latest["altitude_m"] == .null && latest["clock_suspect"] == .bool(false))
        #expect(
            try RFC3339.parseMicros(latest["recorded_at"]!.stringValue) == baseMicros + 12 * 60_000_000)
        _ = try RFC3339.parseMicros(latest["received_at"]!.stringValue)
        // The newest fix was taken 48 minutes ago; the last report arrived just now.
        let age = try #require(try? listed["fix_age_seconds"]?.int64Value)
        #expect(age >= 48 * 60 && age < 48 * 60 + 120)
        let sinceReport = try #require(try? listed["since_last_report_seconds"]?.int64Value)
        #expect(sinceReport >= 0 && sinceReport < 60)
        _ = try RFC3339.parseMicros(listed["last_seen_at"]!.stringValue)
        // A device that never reported: no fix, no staleness.
        let quiet = devices[1]
        #expect(quiet["latest"] == .null && quiet["fix_age_seconds"] == .null)
        #expect(quiet["last_seen_at"] == .null && quiet["since_last_report_seconds"] == .null)

        // One device: the same fields, and for its owner the ntfy topic (none here) and whether
        // "notify when found" is armed.
        let one = try get(connection, "/api/find-my/devices/\(phoneID)", token: alice)
        #expect(one.status == 200)
        #expect(one.body["latest"] == listed["latest"] && one.body["name"] == listed["name"])
        #expect(one.body.objectKeys == listed.objectKeys + ["ntfy_topic_url", "notify_when_found"])
        #expect(one.body["ntfy_topic_url"] == .null)
        #expect(one.body["notify_when_found"]?["armed"] == .bool(false))

        // The whole history in one page, ordered.
        let path = "/api/find-my/devices/\(phoneID)/locations"
        let full = try get(connection, path, token: alice)
        #expect(full.status == 200 && full.body["next_cursor"] == .null)
        let history = try full.body["locations"]!.arrayValue
        let latitudes = history.compactMap { try? $0["latitude"]!.doubleValue }
        #expect(latitudes == [1, 2, 3, 5, 7.1, 7.2, 9, 10, 12])
        let recorded = try history.map { try RFC3339.parseMicros($0["recorded_at"]!.stringValue) }
        #expect(recorded == recorded.sorted())

        // Pages of every size walk the same history: no duplicate, no gap.
        for limit in [1, 2, 4, 9, 10] {
            let (walked, pages) = try walk(connection, path, token: alice, limit: limit)
            #expect(walked == history, "limit \(limit)")
            // One row more than a page is fetched, so a last full page has no next_cursor.
            #expect(pages == (history.count + limit - 1) / limit, "limit \(limit)")
        }

        // Ranges: from inclusive, to exclusive, with and without pagination.
        let from = RFC3339.formatMillis(baseMicros + 3 * 60_000_000)
        let to = RFC3339.formatMillis(baseMicros + 9 * 60_000_000)
        let ranged = try get(connection, "\(path)?from=\(from)&to=\(to)", token: alice)
        #expect(
            (try? ranged.body["locations"]?.arrayValue.compactMap { try? $0["latitude"]!.doubleValue })
                == [3, 5, 7.1, 7.2])
        let rangedWalk = try walk(connection, path, token: alice, limit: 3, query: "&from=\(from)&to=\(to)")
        #expect(rangedWalk.locations == (try? ranged.body["locations"]?.arrayValue))
        let sinceOnly = try get(connection, "\(path)?from=\(to)", token: alice)
        #expect((try? sinceOnly.body["locations"]?.arrayValue.count) == 3)
        let empty = try get(connection, "\(path)?from=\(from)&to=\(from)", token: alice)
        #expect(empty.status == 200 && (try? empty.body["locations"]?.arrayValue.count) == 0)

        // Arrivals: one per batch, by received_at, with its offset and recorded_at range.
        let arrivals = try get(connection, "/api/find-my/devices/\(phoneID)/arrivals", token: alice)
        #expect(arrivals.status == 200 && arrivals.body["next_cursor"] == .null)
        let rows = try #require(try? arrivals.body["arrivals"]?.arrayValue)
        #expect(rows.compactMap { try? $0["offset"]?.int64Value } == offsets)
        #expect(rows.allSatisfy { $0["fix_count"] == .integer(3) && $0["rejected_count"] == .integer(0) })
        #expect(
            try RFC3339.parseMicros(rows[0]["recorded_min"]!.stringValue) == baseMicros + 2 * 60_000_000)
        #expect(
            try RFC3339.parseMicros(rows[0]["recorded_max"]!.stringValue) == baseMicros + 10 * 60_000_000)
        let received = try rows.map { try RFC3339.parseMicros($0["received_at"]!.stringValue) }
        #expect(received == received.sorted())
        let arrivalPage = try get(
            connection, "/api/find-my/devices/\(phoneID)/arrivals?limit=2", token: alice)
        let arrivalCursor = try #require(arrivalPage.string("next_cursor"))
        let arrivalRest = try get(
            connection, "/api/find-my/devices/\(phoneID)/arrivals?limit=2&cursor=\(arrivalCursor)",
            token: alice)
        #expect(
            (try? arrivalRest.body["arrivals"]?.arrayValue.compactMap { try? $0["offset"]?.int64Value })
                == [offsets[2]])

        // Another user's device answers exactly like a missing one, on every route.
        for suffix in ["", "/locations", "/arrivals"] {
            let others = try get(connection, "/api/find-my/devices/\(bobsID)\(suffix)", token: alice)
            let missing = try get(connection, "/api/find-my/devices/987654\(suffix)", token: alice)
            let garbage = try get(connection, "/api/find-my/devices/not-an-id\(suffix)", token: alice)
            #expect(others.status == 404 && others.errorCode == "device_not_found")
            #expect(others.body == missing.body && missing.body == garbage.body && missing.status == 404)
            #expect(
                try get(connection, "/api/find-my/devices/\(phoneID)\(suffix)", token: bob).body
                    == missing.body)
        }
        #expect(
            (try? get(connection, "/api/find-my/devices", token: bob).body["devices"]?.arrayValue.count) == 1)

        // Clear 400s.
        let cursor = try #require(try get(connection, "\(path)?limit=2", token: alice).string("next_cursor"))
        for (target, code) in [
            ("\(path)?from=yesterday", "invalid_range"),
            ("\(path)?from=\(to)&to=\(from)", "invalid_range"),
            ("\(path)?to=2026-13-01T00:00:00Z", "invalid_range"),
            ("\(path)?limit=0", "invalid_limit"), ("\(path)?limit=10001", "invalid_limit"),
            ("\(path)?limit=many", "invalid_limit"),
            ("\(path)?cursor=garbage", "invalid_cursor"),
            ("/api/find-my/devices/\(tabletID)/locations?cursor=\(cursor)", "invalid_cursor"),
            ("/api/find-my/devices/\(phoneID)/arrivals?cursor=\(cursor)", "invalid_cursor"),
            ("\(path)?after_offset=-1", "invalid_after_offset"),
            ("\(path)?after_offset=99999999", "invalid_after_offset"),
            ("/api/find-my/devices?limit=5", "unknown_parameter"),
            ("\(path)?form=\(from)", "unknown_parameter"),
        ] {
            let answer = try get(connection, target, token: alice)
            #expect(answer.status == 400 && answer.errorCode == code, "\(target): \(answer.body)")
            #expect((try? answer.body["error"]?["message"]?.stringValue.isEmpty) == false)
        }
        // Reading takes a user token.
        #expect(try get(connection, "/api/find-my/devices", token: phoneToken).status == 401)
        #expect(try get(connection, "/api/find-my/devices", token: nil).errorCode == "missing_token")
    }

    /// A large page (one binary COPY, `PostgresConnection.copyOutBinary`; pieces of 1,024 rows
    /// before it): one large page, and walks with page sizes that end inside, at and after 1,024
    /// rows, give every fix once, in order, with the cursor of the last fix of each page.
    @Test func largePagesReadInPiecesGiveTheWholeHistory() throws {
        let read = try ReadServer("findmy-read-pieces", users: ["alice"])
        defer { read.stop() }
        let (alice, connection) = (read.tokens[0], read.connection)
        let phone = try enrol(connection, userToken: alice, uuid: "7b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))
        // 4,096 fixes (four whole pieces), in two batches whose times interleave, three at each
        // time: the order is recorded_at, then latitude (the history index's order), not arrival.
        let count = 4_096
        let fixes = (0..<count).map { index in
            let recordedAt = RFC3339.formatMillis(baseMicros + Int64(index / 3 * 3) * 700_000)
            return
                "{\"latitude\": \(Double(index) / 1000), \"longitude\": 13.405, \"accuracy_m\": 12, \"source\": \"gps\", \"recorded_at\": \"\(recordedAt)\"}"
        }
        var last: Int64 = 0
        for half in [stride(from: 0, to: count, by: 2), stride(from: 1, to: count, by: 2)] {
            let answer = try post(
                connection, "/api/find-my/report", token: phoneToken,
                body: reportBody(batchID: UUID().uuidString, fixes: half.map { fixes[$0] }))
            #expect(answer.status == 200 && answer.int("accepted") == Int64(count / 2))
            last = try #require(answer.int("offset"))
        }
        let path = "/api/find-my/devices/\(phoneID)/locations"
        let whole = try get(connection, "\(path)?limit=10000&after_offset=\(last)", token: alice)
        #expect(whole.status == 200 && whole.body["next_cursor"] == .null)
        let history = try whole.body["locations"]!.arrayValue
        #expect(history.count == count)
        let keys = history.map { ($0["recorded_at"].flatMap { try? $0.stringValue } ?? "") }
        #expect(keys == keys.sorted())
        // Within each group of three equal times by latitude, though the even indexes arrived first.
        let latitudes = history.map { (try? $0["latitude"]?.doubleValue) ?? -1 }
        #expect(latitudes == (0..<count).map { Double($0) / 1000 })
        // Pages that end inside a piece, at its end (3,072: the extra row alone in the next
        // piece), one short of the whole, and the whole (the last FETCH comes back empty).
        for limit in [1_024, 2_049, 2_500, 3_072, 4_095, 4_096] {
            let walked = try walk(connection, path, token: alice, limit: limit)
            #expect(walked.locations == history, "limit \(limit)")
            #expect(walked.pages == (count + limit - 1) / limit, "limit \(limit)")
        }
    }

    /// A list of 256 devices or more is written in two halves at once (`ReadService.devices`): the
    /// answer is every device once, by id, each exactly as `GET /api/find-my/devices/{id}` gives it,
    /// another user's device left out.
    @Test func aLongDevicesListIsWholeAndInOrder() throws {
        let read = try ReadServer("findmy-read-long-list", users: ["alice", "bob"])
        defer { read.stop() }
        let (alice, bob, connection) = (read.tokens[0], read.tokens[1], read.connection)
        var ids: [Int64] = []
        var last: Int64 = 0
        for index in 0..<301 {
            let uuid = String(format: "%08x-2fa1-11d2-883f-0016d3cca427", index)
            let enrolled = try enrol(
                connection, userToken: index == 150 ? bob : alice, uuid: uuid, name: "device \(index)")
            let id = try #require(enrolled.int("device_id"))
            last = try #require(enrolled.int("offset"))
            if index != 150 { ids.append(id) }
            if index % 7 == 0, let token = enrolled.string("device_token") {
                let answer = try post(
                    connection, "/api/find-my/report", token: token,
                    body: reportBody(
                        batchID: UUID().uuidString, fixes: [fixJSON(latitude: 52 + Double(index) / 1000)]))
                last = try #require(answer.int("offset"))
            }
        }
        let list = try get(connection, "/api/find-my/devices?after_offset=\(last)", token: alice)
        #expect(list.status == 200)
        let devices = try list.body["devices"]!.arrayValue
        #expect(devices.compactMap { try? $0["id"]?.int64Value } == ids)
        for device in devices where (try? device["id"]?.int64Value).map({ $0 % 37 == 1 }) == true {
            let id = try #require(try device["id"]?.int64Value)
            let one = try get(connection, "/api/find-my/devices/\(id)", token: alice)
            #expect(one.status == 200 && one.body["latest"] == device["latest"])
            #expect(one.body["name"] == device["name"] && one.body.objectKeys == singleDeviceKeys(device))
        }
        #expect(devices.filter { $0["latest"] != .null }.count == ids.filter { ($0 - 1) % 7 == 0 }.count)
    }

    /// The devices list reuses devices it wrote before (`DeviceCardCache`) only while PostgreSQL has
    /// the same version of them: after every kind of change, read with the change's offset, the
    /// list shows the change, and each device in it is what the single-device route answers.
    @Test func keptDevicesFollowEveryChange() throws {
        let read = try ReadServer("findmy-read-kept", users: ["alice", "bob"])
        defer { read.stop() }
        let (alice, bob, connection) = (read.tokens[0], read.tokens[1], read.connection)
        let phoneUUID = "8b4e28ba-2fa1-11d2-883f-0016d3cca427"
        let tabletUUID = "9b4e28ba-2fa1-11d2-883f-0016d3cca427"
        let phone = try enrol(connection, userToken: alice, uuid: phoneUUID)
        let tablet = try enrol(connection, userToken: alice, uuid: tabletUUID, name: "tablet")
        let phoneID = try #require(phone.int("device_id"))
        let tabletID = try #require(tablet.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))
        var tabletToken = try #require(tablet.string("device_token"))
        let staleness: Set<String> = ["since_last_report_seconds", "fix_age_seconds"]

        /// The list after `offset`, as id -> device, each checked against its single-device answer.
        func list(_ offset: Int64?, token: String = alice) throws -> [Int64: JSONValue] {
            let answer = try get(
                connection, "/api/find-my/devices?after_offset=\(try #require(offset))", token: token)
            guard answer.status == 200 else { throw TestFailure("list: \(answer.status) \(answer.body)") }
            var devices: [Int64: JSONValue] = [:]
            for device in try answer.body["devices"]!.arrayValue {
                let id = try #require(try device["id"]?.int64Value)
                devices[id] = device
                let one = try get(connection, "/api/find-my/devices/\(id)", token: token)
                #expect(one.body.objectKeys == singleDeviceKeys(device))
                for key in device.objectKeys where !staleness.contains(key) {
                    #expect(one.body[key] == device[key], "device \(id), \(key)")
                }
            }
            return devices
        }
        func latitude(_ device: JSONValue?) -> Double? { try? device?["latest"]?["latitude"]?.doubleValue }
        func report(_ latitude: Double, secondsAgo: Int) throws -> Int64? {
            try post(
                connection, "/api/find-my/report", token: phoneToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: latitude, secondsAgo: secondsAgo)])
            ).int("offset")
        }

        // A first read writes every device; the second reuses them, with the same answer.
        var offset = try report(1, secondsAgo: 600)
        var first = try list(offset)
        #expect(latitude(first[phoneID]) == 1 && first[tabletID]?["latest"] == .null)
        for _ in 0..<3 {
            let again = try list(offset)
            for (id, device) in again {
                for key in device.objectKeys where !staleness.contains(key) {
                    #expect(first[id]?[key] == device[key])
                }
            }
            first = again
        }
        // Two devices kept; the three lists after the first reused them.
        let health = try JSONParser.parse(try connection.send("GET", "/healthz").body)
        #expect(try health["reads"]?["device_cards"]?.int64Value == 2)
        let metrics = try connection.send("GET", "/metrics").bodyText
        #expect(metrics.contains("findmy_read_device_cards_reused_total 6\n"))
        #expect(metrics.contains("findmy_read_device_cards_written_total 2\n"))

        // A new latest fix.
        offset = try report(2, secondsAgo: 300)
        #expect(latitude(try list(offset)[phoneID]) == 2)
        // An older fix does not displace it, but last_seen_at moves.
        let seenBefore = try list(offset)[phoneID]?["last_seen_at"]
        // The next report's received_at must fall in a later millisecond than the last one's.
        let seenMicros = try RFC3339.parseMicros(try #require(try? seenBefore?.stringValue))
        #expect(
            waitUntil(timeoutSeconds: 120) {
                Int64(Date().timeIntervalSince1970 * 1_000_000) > seenMicros + 1_000
            })
        offset = try report(3, secondsAgo: 900)
        var devices = try list(offset)
        #expect(latitude(devices[phoneID]) == 2 && devices[phoneID]?["last_seen_at"] != seenBefore)
        // Paused.
        offset = try post(
            connection, "/api/find-my/reporting", token: tabletToken, body: "{\"paused\": true}"
        )
        .int("offset")
        #expect(try list(offset)[tabletID]?["paused"] == .bool(true))
        // Renamed by enrolling again.
        let renamed = try enrol(connection, userToken: alice, uuid: tabletUUID, name: "tablet 2")
        tabletToken = try #require(renamed.string("device_token"))
        #expect(try list(renamed.int("offset"))[tabletID]?["name"] == .string("tablet 2"))
        // Erasing the newest fixes brings back an older latest fix (a version seen before).
        let recent = RFC3339.formatMillis(Int64(Date().timeIntervalSince1970 * 1_000_000) - 420_000_000)
        offset = try post(
            connection, "/api/find-my/devices/\(phoneID)/erase", token: alice,
            body: "{\"from\": \"\(recent)\"}"
        ).int("offset")
        #expect(latitude(try list(offset)[phoneID]) == 1)
        // Erasing everything leaves no latest fix.
        offset = try post(connection, "/api/find-my/devices/\(phoneID)/erase", token: alice, body: "{}").int(
            "offset")
        #expect(try list(offset)[phoneID]?["latest"] == .null)
        // Shared: the owner's name for bob, null for alice, from the same kept device.
        offset = try post(
            connection, "/api/find-my/devices/\(phoneID)/shares", token: alice, body: "{\"user\": \"bob\"}"
        ).int("offset")
        #expect(try list(offset, token: bob)[phoneID]?["shared_by"] == .string("alice"))
        #expect(try list(offset)[phoneID]?["shared_by"] == .null)
        // Removed: gone from the list.
        let removed = try connection.send(
            "DELETE", "/api/find-my/devices/\(tabletID)", headers: [("Authorization", "Bearer \(alice)")])
        let removedOffset = try JSONParser.parse(removed.body)["offset"]?.int64Value
        devices = try list(removedOffset)
        #expect(devices[tabletID] == nil && devices[phoneID] != nil)
    }

    @Test func aReadWithTheOffsetOfAWriteSeesTheWrite() throws {
        let read = try ReadServer("findmy-read", users: ["alice"])
        defer { read.stop() }
        let (alice, connection) = (read.tokens[0], read.connection)
        let phone = try enrol(connection, userToken: alice, uuid: "7b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        let phoneToken = try #require(phone.string("device_token"))
        // The enrolment's offset: the device is in the list at once.
        let enrolled = try get(
            connection, "/api/find-my/devices?after_offset=\(try #require(phone.int("offset")))", token: alice
        )
        #expect((try? enrolled.body["devices"]?.arrayValue.count) == 1)
        for round in 1...20 {
            let answer = try post(
                connection, "/api/find-my/report", token: phoneToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fix(minute: round, latitude: Double(round))]))
            let offset = try #require(answer.int("offset"))
            let history = try get(
                connection, "/api/find-my/devices/\(phoneID)/locations?after_offset=\(offset)", token: alice)
            #expect(history.status == 200)
            #expect((try? history.body["locations"]?.arrayValue.count) == round, "round \(round)")
            let one = try get(
                connection, "/api/find-my/devices/\(phoneID)?after_offset=\(offset)", token: alice)
            #expect(one.body["latest"]?["latitude"].flatMap { try? $0.doubleValue } == Double(round))
            let arrivals = try get(
                connection, "/api/find-my/devices/\(phoneID)/arrivals?after_offset=\(offset)", token: alice)
            #expect((try? arrivals.body["arrivals"]?.arrayValue.last?["offset"]?.int64Value) == offset)
        }
    }

    @Test func withoutTheProjectorReadsAnswer503() throws {
        let read = try ReadServer("findmy-read", users: ["alice"], projector: false)
        defer { read.stop() }
        let (alice, connection) = (read.tokens[0], read.connection)
        // The permission gate runs first: a device the caller may not see is a 404 even here, so
        // ask about one of alice's own.
        let phone = try enrol(connection, userToken: alice, uuid: "7b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let phoneID = try #require(phone.int("device_id"))
        for target in ["/api/find-my/devices", "/api/find-my/devices/\(phoneID)/locations"] {
            let answer = try get(connection, target, token: alice)
            #expect(answer.status == 503 && answer.errorCode == "reads_unavailable")
        }
    }
}

extension JSONValue {
    var objectKeys: [String] {
        if case .object(let object) = self { return object.keys }
        return []
    }
}

/// The members `GET /api/find-my/devices/{id}` answers for a device of the list: the list's, and
/// for the reader's own device (`shared_by` null) its ntfy topic and "notify when found"
/// (docs/found-notices.md).
func singleDeviceKeys(_ listed: JSONValue) -> [String] {
    listed.objectKeys + (listed["shared_by"] == .null ? ["ntfy_topic_url", "notify_when_found"] : [])
}
