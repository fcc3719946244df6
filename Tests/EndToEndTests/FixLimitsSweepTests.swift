import Events
import Foundation
import HTTPClient
import JSON
import Testing

/// One report must never take the server down (docs/architecture.md, "Failure
/// containment"). Fixes at every field's limits, fixes beyond them, and outsized values that an
/// older version let into the log are reported or replayed, and then every read API answer and
/// every panel page that shows a fix is asked for: each answers 200, and a report is still
/// accepted afterwards.
@Suite(.serialized) struct FixLimitsSweepTests {
    let pages = PanelPageTests()

    /// `findmy user add NAME --admin --json`; returns the token.
    func addAdmin(_ name: String, data: String) throws -> String {
        let result = try FindmyProcess.run(["user", "add", name, "--admin", "--json", "--data-dir", data])
        guard result.status == 0 else { throw TestFailure("user add --admin failed: \(result.error)") }
        return try JSONParser.parse(result.output)["token"]!.stringValue
    }

    /// A fix as JSON, recorded `secondsAgo` before now, with `members` (JSON number text, by name)
    /// replacing or adding to a plain fix's.
    func fix(secondsAgo: Int = 60, _ members: [(String, String)]) -> String {
        let recordedAt = RFC3339.formatMillis(
            Int64(Date().timeIntervalSince1970 * 1_000_000) - Int64(secondsAgo) * 1_000_000)
        var fields: [(String, String)] = [
            ("latitude", "52.52"), ("longitude", "13.405"), ("accuracy_m", "12"),
            ("source", "\"significant\""), ("recorded_at", "\"\(recordedAt)\""),
        ]
        for (key, value) in members {
            if let index = fields.firstIndex(where: { $0.0 == key }) {
                fields[index].1 = value
            } else {
                fields.append((key, value))
            }
        }
        return "{" + fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}"
    }

    /// Every read API answer and panel page that shows `deviceIDs`' fixes answers 200, and the
    /// server still accepts a report from `reporter` afterwards: the offset of that report.
    @discardableResult
    func sweep(
        _ connection: HTTPConnection, server: ServerProcess, userToken: String, deviceIDs: [Int64],
        reporter: String, afterOffset: Int64
    ) throws -> Int64 {
        func expectOK(_ status: @autoclosure () throws -> Int, _ target: String) throws {
            let answered = Result { try status() }
            // A request that failed may have killed the server: give it time to finish exiting.
            if case .failure = answered { _ = server.process.wait(timeoutSeconds: 10) }
            guard server.process.process.isRunning else {
                throw TestFailure(
                    "the server died answering \(target): \(server.process.standardError.suffix(2_000))")
            }
            #expect(try answered.get() == 200, "\(target)")
        }
        let list = "/api/find-my/devices?after_offset=\(afterOffset)"
        try expectOK(try get(connection, list, token: userToken).status, list)
        let now = Int64(Date().timeIntervalSince1970) * 1_000_000
        let from = RFC3339.formatMillis(now - 7 * 86_400_000_000)
        let to = RFC3339.formatMillis(now + 3_600_000_000)
        for id in deviceIDs {
            for target in [
                "/api/find-my/devices/\(id)", "/api/find-my/devices/\(id)/locations",
                "/api/find-my/devices/\(id)/locations?from=\(from)&to=\(to)&limit=2",
                "/api/find-my/devices/\(id)/arrivals",
            ] {
                try expectOK(try get(connection, target, token: userToken).status, target)
            }
            for target in [
                "/find-my", "/find-my?selected=\(id)", "/find-my?selected=\(id)&from=\(from)&to=\(to)",
                "/find-my/devices/\(id)/settings", "/find-my/devices/\(id)/erase", "/find-my/account",
                "/find-my/admin",
            ] {
                try expectOK(try pages.request(connection, "GET", target, token: userToken).status, target)
            }
        }
        for target in ["/api/find-my/admin/devices", "/api/find-my/admin/users"] {
            try expectOK(try get(connection, target, token: userToken).status, target)
        }
        let after = try post(
            connection, "/api/find-my/report", token: reporter,
            body: reportBody(batchID: UUID().uuidString, fixes: [fix([])]))
        #expect(after.status == 200 && after.int("accepted") == 1, "\(after.body)")
        #expect(server.process.process.isRunning)
        return after.int("offset") ?? 0
    }

    /// Fixes at each field's smallest and largest accepted value are accepted and shown; fixes just
    /// beyond each limit (and far beyond: 1e308) are rejected one by one; nothing traps.
    @Test func fixesAtAndBeyondEveryLimitAreShownOrRejectedAndNothingTraps() throws {
        let data = ScratchDirectory("findmy-limits")
        let alice = try addAdmin("alice", data: data.path)
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)

        // One device per edge, so that each edge is some device's latest fix as well as history.
        let edges: [(String, [(String, String)])] = [
            (
                "minimum",
                [
                    ("latitude", "-90"), ("longitude", "-180"), ("accuracy_m", "0.01"),
                    ("altitude_m", "-12000"), ("speed_mps", "0"), ("heading_deg", "0"), ("battery_pct", "0"),
                ]
            ),
            (
                "maximum",
                [
                    ("latitude", "90"), ("longitude", "180"), ("accuracy_m", "1000000"),
                    ("altitude_m", "100000"), ("speed_mps", "2000"), ("heading_deg", "359.99999999999994"),
                    ("battery_pct", "100"),
                ]
            ),
        ]
        var ids: [Int64] = []
        var offset: Int64 = 0
        for (index, (name, members)) in edges.enumerated() {
            let device = try enrol(
                connection, userToken: alice, uuid: "0b4e28ba-2fa1-11d2-883f-00000000000\(index)", name: name)
            ids.append(try #require(device.int("device_id")))
            let reporter = try #require(device.string("device_token"))
            let answer = try post(
                connection, "/api/find-my/report", token: reporter,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fix(secondsAgo: 120, []), fix(members)]))
            #expect(answer.status == 200 && answer.int("accepted") == 2, "\(name): \(answer.body)")
            offset = try #require(answer.int("offset"))
        }

        // A third device reports the fixes beyond the limits, so that the edges stay the latest.
        let other = try enrol(connection, userToken: alice, uuid: "0b4e28ba-2fa1-11d2-883f-000000000009")
        ids.append(try #require(other.int("device_id")))
        let reporter = try #require(other.string("device_token"))

        // Beyond: each fix breaks one limit, and only that fix is rejected, naming the field.
        let beyond: [(String, String)] = [
            ("latitude", "-90.000001"), ("latitude", "90.000001"), ("longitude", "-180.000001"),
            ("longitude", "180.000001"), ("accuracy_m", "0"), ("accuracy_m", "-1"), ("accuracy_m", "0.0099"),
            ("accuracy_m", "1e-320"), ("accuracy_m", "5e-324"),
            ("accuracy_m", "1000000.001"), ("accuracy_m", "1e21"), ("accuracy_m", "1e308"),
            ("altitude_m", "-12000.001"), ("altitude_m", "100000.001"), ("altitude_m", "-1e308"),
            ("speed_mps", "-0.001"), ("speed_mps", "2000.001"), ("speed_mps", "1e308"),
            ("heading_deg", "-0.001"), ("heading_deg", "360"), ("heading_deg", "1e308"),
            ("battery_pct", "-1"), ("battery_pct", "101"), ("battery_pct", "1e308"),
        ]
        let outside = try post(
            connection, "/api/find-my/report", token: reporter,
            body: reportBody(batchID: UUID().uuidString, fixes: beyond.map { fix([$0]) } + [fix([])]))
        #expect(outside.status == 200 && outside.int("accepted") == 1, "\(outside.body)")
        let rejected = (try? outside.body["rejected"]?.arrayValue) ?? []
        #expect(rejected.count == beyond.count)
        for (index, (key, value)) in beyond.enumerated() {
            let reason =
                (try? rejected.first { (try? $0["index"]?.int64Value) == Int64(index) }?["reason"]?
                    .stringValue) ?? nil
            #expect(
                reason?.hasPrefix("out_of_range: \(key)") == true,
                "\(key) \(value): \(String(describing: reason))")
        }
        offset = try #require(outside.int("offset"))

        try sweep(
            connection, server: server, userToken: alice, deviceIDs: ids, reporter: reporter,
            afterOffset: offset)

        // The accepted edges come back as they were sent, and are drawn.
        for (id, edge) in zip(ids, edges) {
            let latest = try #require(
                try get(connection, "/api/find-my/devices/\(id)", token: alice).body["latest"])
            for (key, value) in edge.1 {
                let sent = try JSONParser.parse(value).doubleValue
                #expect(
                    (try? latest[key]?.doubleValue) == sent,
                    "\(edge.0) \(key): \(String(describing: latest[key]))")
            }
        }
        let smallest = try pages.request(connection, "GET", "/find-my?selected=\(ids[0])", token: alice)
        #expect(smallest.body.contains("± 0 m") && smallest.body.contains("battery 0 %"))
        let largest = try pages.request(connection, "GET", "/find-my?selected=\(ids[1])", token: alice)
        #expect(largest.body.contains("± 1000.0 km") && largest.body.contains("battery 100 %"))
    }

    /// A log written before the limits existed may hold outsized values (an accuracy of 1e308 was
    /// accepted), and one written by hand anything a double can hold. The server replays it and
    /// shows every page without trapping.
    @Test func outsizedValuesInAnOlderLogAreShownWithoutTrapping() throws {
        let data = ScratchDirectory("findmy-limits-legacy")
        let alice = try addAdmin("alice", data: data.path)
        var deviceID: Int64 = 0
        var reporter = ""
        do {
            let server = try ServerProcess(data: data.path)
            defer { server.stop() }
            let connection = HTTPConnection(address: server.address)
            let device = try enrol(
                connection, userToken: alice, uuid: "0b4e28ba-2fa1-11d2-883f-0016d3cca427", name: "legacy")
            deviceID = try #require(device.int("device_id"))
            reporter = try #require(device.string("device_token"))
        }

        // What an older version let through, appended the way it appended it; then values no
        // version accepted (negative, infinite, NaN), as a damaged or hand-written log could hold.
        let nowMicros = Int64(Date().timeIntervalSince1970) * 1_000_000
        let outsized: [Double] = [
            1e21, 1e300, 1e308, .greatestFiniteMagnitude, -1e21, -1e308, -.greatestFiniteMagnitude,
            .infinity, -.infinity, .nan, 0, -0.0, .leastNonzeroMagnitude,
        ]
        let fixes = outsized.enumerated().map { index, value in
            Fix(
                latitude: index < 10 ? 52.5 : value, longitude: index < 10 ? 13.4 : value,
                accuracyMeters: value,
                altitudeMeters: value, speedMetersPerSecond: value, headingDegrees: value,
                batteryPercent: UInt8(truncatingIfNeeded: 250 + index), isCharging: true, source: "legacy",
                recordedAtMicros: nowMicros - Int64(outsized.count - index) * 60_000_000)
        }
        let log = try LogWriter(directory: data.path + "/log")
        for (index, fix) in fixes.enumerated() {
            // One batch per fix, so that each becomes the latest in turn and the last is outsized.
            try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(deviceID), batchID: UUID128(high: 7, low: UInt64(index)),
                        fixes: [fix])))
        }
        // Times PostgreSQL keeps but RFC 3339 text cannot say (500 BC, the year 20000), then 1e308
        // again as the latest fix.
        let yearMicros: Int64 = 31_556_952_000_000
        var times = fixes[0]
        times.recordedAtMicros = -2_470 * yearMicros
        var future = fixes[2]
        future.recordedAtMicros = 18_030 * yearMicros
        // A microsecond later than fixes[2]: the same fix again would be kept once (one fix, one row).
        var again = fixes[2]
        again.recordedAtMicros += 1
        for (index, batch) in [[times], [future], [again]].enumerated() {
            try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(deviceID), batchID: UUID128(high: 8, low: UInt64(index)),
                        fixes: batch)))
        }
        log.close()

        // The log's own tools read it whole: doubles bit for bit, a time RFC 3339 cannot say as its
        // microseconds.
        let batches = try dumpLog(data.path).batches
        #expect(batches.count == fixes.count + 3)
        let dumped = batches.flatMap(\.fixes)
        #expect(dumped.contains { $0["accuracy_m"] == .double(1e308) })
        #expect(dumped.contains { $0["accuracy_m"] == .string("nan") })
        #expect(dumped.contains { $0["recorded_at"] == .string("\(future.recordedAtMicros) µs since 1970") })
        for format in [[], ["--json"]] {
            let stats = try FindmyProcess.run(["log", "stats", "--data-dir", data.path] + format)
            #expect(stats.status == 0, "\(stats.error)")
        }

        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        try waitForProjector(data.path)
        let end = Int64(LogReader(directory: data.path + "/log").durableEnd()) - 1
        let last = try sweep(
            connection, server: server, userToken: alice, deviceIDs: [deviceID], reporter: reporter,
            afterOffset: end)

        // The outsized accuracy is shown as a number that says what it is, not as a trap.
        let from = RFC3339.formatMillis(nowMicros - 3_600_000_000)
        let to = RFC3339.formatMillis(nowMicros + 3_600_000_000)
        let page = try pages.request(
            connection, "GET", "/find-my?selected=\(deviceID)&from=\(from)&to=\(to)", token: alice)
        #expect(page.status == 200)
        // A zero or negative one says "accuracy unknown", never a precise-looking radius.
        #expect(page.body.contains("± more than 1000.0 km") && page.body.contains("accuracy unknown"))
        // The year 20000 is the latest fix, shown as the last time RFC 3339 can say.
        let selected = try pages.request(connection, "GET", "/find-my?selected=\(deviceID)", token: alice)
        #expect(selected.body.contains("9999-12-31 23:59 UTC"))
        let history = try get(
            connection, "/api/find-my/devices/\(deviceID)/locations?after_offset=\(last)", token: alice)
        let accuracies = ((try? history.body["locations"]?.arrayValue) ?? []).map { $0["accuracy_m"] }
        #expect(accuracies.count == outsized.count + 4)
        // Outsized values as stored; what JSON cannot say (NaN, infinities) as null, and a stored
        // +0.0, which means "accuracy unknown" (docs/log-format.md), as null too.
        #expect(accuracies.contains(.double(1e308)) && accuracies.contains(.double(-1e308)))
        #expect(accuracies.filter { $0 == .null }.count == 4, "\(accuracies)")
    }
}
