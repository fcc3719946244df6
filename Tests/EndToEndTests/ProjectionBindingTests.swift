import Events
import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// A new installation at the same data directory, with the PostgreSQL cluster of
/// the previous one left behind (as it is when the cluster lives in /var/lib/findmy/postgres-<hash>),
/// must not show the previous installation's devices and positions to its users.
@Suite(.serialized) struct ProjectionBindingTests {
    let pages = PanelPageTests()

    @Test func aNewLogOverAnOldClusterShowsNothingOfTheOldProjection() throws {
        let data = ScratchDirectory("findmy-rebind")
        let secretLatitude = "48.858372"
        let secretName = "Alice Secret Phone"

        // The first installation: alice, her phone (device 1), one fix, projected.
        let alice = try addUser("alice", data: data.path)
        let first = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        do {
            defer { first.stop() }
            let connection = HTTPConnection(address: first.address)
            let phone = try enrol(
                connection, userToken: alice, uuid: "7c1f3a52-9d4e-4b61-8a0f-2e5d6c7b8a90", name: secretName)
            #expect(phone.int("device_id") == 1)
            let deviceToken = try #require(phone.string("device_token"))
            let report = try post(
                connection, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: Double(secretLatitude)!)]))
            #expect(report.status == 200, "\(report.body)")
            let offset = try #require(report.int("offset"))
            let seen = try get(connection, "/api/find-my/devices?after_offset=\(offset)", token: alice)
            #expect(seen.status == 200 && "\(seen.body)".contains(secretLatitude), "\(seen.body)")
        }

        let firstLogID = try #require(try logStatsID(data.path))

        // `rm -rf` of everything but the cluster, then a new installation at the same path.
        for entry in try FileManager.default.contentsOfDirectory(atPath: data.path) where entry != "postgres"
        {
            try FileManager.default.removeItem(atPath: data.path + "/" + entry)
        }
        let bob = try addUser("bob", data: data.path)
        try setPassword("bob", "a long passphrase", data: data.path)
        let second = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { second.stop() }
        let connection = HTTPConnection(address: second.address)
        let tablet = try enrol(
            connection, userToken: bob, uuid: "0d9e8f7a-6b5c-4d3e-9f2a-1b0c9d8e7f6a", name: "Bob Tablet")
        #expect(tablet.status == 201 && tablet.int("device_id") == 1, "device ids start again at 1")
        let offset = try #require(tablet.int("offset"))

        func expectOnlyBobs(_ text: String, _ what: String) {
            #expect(!text.contains(secretLatitude) && !text.contains(secretName), "\(what): \(text)")
        }
        let list = try get(connection, "/api/find-my/devices?after_offset=\(offset)", token: bob)
        #expect(list.status == 200, "\(list.body)")
        let devices = try #require(try? list.body["devices"]?.arrayValue)
        #expect(devices.count == 1)
        #expect(devices.first?["name"] == .string("Bob Tablet"))
        #expect(devices.first?["latest"] == .null, "bob's tablet never reported")
        expectOnlyBobs("\(list.body)", "the device list")

        let one = try get(connection, "/api/find-my/devices/1?after_offset=\(offset)", token: bob)
        #expect(one.status == 200 && one.body["name"] == .string("Bob Tablet"), "\(one.body)")
        expectOnlyBobs("\(one.body)", "the device")

        let history = try get(
            connection, "/api/find-my/devices/1/locations?after_offset=\(offset)", token: bob)
        #expect(history.status == 200, "\(history.body)")
        #expect(try history.body["locations"]?.arrayValue.isEmpty == true, "\(history.body)")
        expectOnlyBobs("\(history.body)", "the history")

        let session = try PanelFormTests().logIn(connection, "bob", "a long passphrase")
        let panel = try pages.request(connection, "GET", "/find-my?selected=1", cookies: [session])
        #expect(panel.status == 200)
        #expect(panel.body.contains("Bob Tablet"))
        expectOnlyBobs(panel.body, "the panel")

        let secondLogID = try #require(try logStatsID(data.path))
        #expect(secondLogID != firstLogID)
        #expect(secondLogID == (try LogReader(directory: data.path + "/log").logID())?.description)
        #expect(
            second.process.standardError.contains(
                "projection was folded from log \(firstLogID), this log is \(secondLogID): dropping it and rebuilding"
            ),
            "\(second.process.standardError)")
    }

    /// The same, with PostgreSQL (an external server here) down when the new installation starts:
    /// the server starts without it, and from the moment PostgreSQL is back until the projector has
    /// dropped the old projection, every read answers 503, never the old rows.
    @Test func readsWaitForTheProjectionToBeBoundWhenPostgreSQLIsDownAtStart() throws {
        let database = ScratchDirectory("findmy-rebind-db")
        let cluster = try EmbeddedPostgres(dataDirectory: database.path)
        try cluster.start()
        defer { try? cluster.stop() }
        let external = ["--projector", "on", "--database-url", cluster.conninfo]
        let secretLatitude = "48.858372"
        let secretName = "Alice Secret Phone"

        let first = ScratchDirectory("findmy-rebind-a")
        let alice = try addUser("alice", data: first.path)
        let serverA = try ServerProcess(data: first.path, extraArguments: external)
        do {
            defer { serverA.stop() }
            let connection = HTTPConnection(address: serverA.address)
            let phone = try enrol(
                connection, userToken: alice, uuid: "7c1f3a52-9d4e-4b61-8a0f-2e5d6c7b8a90", name: secretName)
            let deviceToken = try #require(phone.string("device_token"))
            let report = try post(
                connection, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: Double(secretLatitude)!)]))
            let offset = try #require(report.int("offset"))
            let seen = try get(connection, "/api/find-my/devices?after_offset=\(offset)", token: alice)
            #expect(seen.status == 200 && "\(seen.body)".contains(secretLatitude), "\(seen.body)")
        }
        try cluster.stop()

        let second = ScratchDirectory("findmy-rebind-b")
        let bob = try addUser("bob", data: second.path)
        let serverB = try ServerProcess(data: second.path, extraArguments: external)
        defer { serverB.stop() }
        let connection = HTTPConnection(address: serverB.address)
        let tablet = try enrol(
            connection, userToken: bob, uuid: "0d9e8f7a-6b5c-4d3e-9f2a-1b0c9d8e7f6a", name: "Bob Tablet")
        #expect(tablet.status == 201 && tablet.int("device_id") == 1, "ingest needs no database")
        #expect(try get(connection, "/api/find-my/devices", token: bob).status == 503)

        try cluster.start()
        var answers: [Int: Int] = [:]
        var shown = false
        let deadline = Date().addingTimeInterval(60)
        while !shown && Date() < deadline {
            let list = try get(connection, "/api/find-my/devices/1", token: bob)
            answers[list.status, default: 0] += 1
            let text = "\(list.body)"
            #expect(!text.contains(secretLatitude) && !text.contains(secretName), "\(list.status) \(text)")
            #expect(list.status == 503 || list.status == 200 || list.status == 404, "\(list.status) \(text)")
            shown = list.status == 200 && list.body["name"] == .string("Bob Tablet")
            if !shown { usleep(20_000) }
        }
        #expect(shown, "bob's device never showed: \(answers)")
        #expect(
            serverB.process.standardError.contains("dropping it and rebuilding"),
            "\(serverB.process.standardError)")
    }

    /// The log id `findmy log stats --json` shows.
    func logStatsID(_ data: String) throws -> String? {
        let stats = try FindmyProcess.run(["log", "stats", "--json", "--data-dir", data])
        guard stats.status == 0 else { throw TestFailure("log stats failed: \(stats.error)") }
        return try? JSONParser.parse(stats.output)["log_id"]?.stringValue
    }
}
