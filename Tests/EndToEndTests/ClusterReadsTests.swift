import Foundation
import HTTPClient
import JSON
import NATSSupport
import Testing

/// Reads in a cluster (docs/scale.md, "Reads in a cluster"): ingest nodes given `--database-url`
/// serve the read API and the panel from the projection `findmy projector` writes there. Real
/// processes: three nats-server, two `findmy serve --log nats://`, a `findmy projector`, a private
/// PostgreSQL; every one stopped whatever the outcome (defers, pdeathsig).
@Suite(.serialized) struct ClusterReadsTests {
    /// A phone reports through node 1; its owner reads the fix through node 2, asking to wait for
    /// the report's offset, and sees it on the panel's device list. Before any projector has run,
    /// node 2 refuses reads with a reason instead of showing an empty list.
    @Test func aReportThroughOneNodeIsReadThroughTheOther() throws {
        let postgres = try ScratchPostgres()
        try IngestNodesTests.withNodes(extraArguments: ["--database-url", postgres.conninfo]) { ingest in
            defer {
                for index in 0..<2 where !ingest.nodes[index].process.process.isRunning {
                    Issue.record(
                        "node \(index + 1) ended: \(ingest.nodes[index].process.standardError.suffix(4000))")
                }
            }
            let userToken = try addUser("ana", data: ingest.dataDirectory(0))
            let node1 = HTTPConnection(address: ingest.address(0))
            let node2 = HTTPConnection(address: ingest.address(1))

            let early = try get(node2, "/api/find-my/devices", token: userToken)
            #expect(early.status == 503, "\(early.body)")
            let why = (try? early.body["error"]?["message"]?.stringValue) ?? ""
            #expect(why.contains("no projection in this database"), "\(early.body)")

            let projector = try ProjectorProcess(
                ["--log", ingest.cluster.logArgument, "--database-url", postgres.conninfo],
                outputPath: postgres.directory + "/projector.out")
            defer { projector.kill9() }

            let enrolled = try enrol(node1, userToken: userToken, uuid: UUID().uuidString, name: "ana-phone")
            let deviceID = try #require(enrolled.int("device_id"), "\(enrolled.body)")
            let deviceToken = try #require(enrolled.string("device_token"), "\(enrolled.body)")
            let report = try post(
                node1, "/api/find-my/report", token: deviceToken,
                body: reportBody(
                    batchID: UUID().uuidString, fixes: [fixJSON(latitude: 48.8566, secondsAgo: 120)]))
            #expect(report.status == 200, "\(report.body)")
            let offset = try #require(report.int("offset"), "\(report.body)")

            // The projector starts, binds the projection to the stream and folds the report; the
            // read waits for the offset (up to the server's bound, then 503 projection_behind).
            var locations = Answer(status: 0, body: .null)
            let answered = try waitUntil(timeoutSeconds: 120) {
                locations = try get(
                    node2, "/api/find-my/devices/\(deviceID)/locations?after_offset=\(offset)",
                    token: userToken)
                return locations.status == 200
            }
            #expect(answered, "\(locations.status) \(locations.body)\nprojector: \(projector.output)")
            let fixes = try locations.body["locations"]?.arrayValue ?? []
            #expect(fixes.count == 1)
            #expect(try fixes.first?["latitude"]?.doubleValue == 48.8566)

            let list = try get(node2, "/api/find-my/devices", token: userToken)
            #expect(list.status == 200, "\(list.body)")
            let devices = try list.body["devices"]?.arrayValue ?? []
            #expect(devices.count == 1)
            #expect(try devices.first?["name"]?.stringValue == "ana-phone")

            // The panel through node 2: log in (the password was set through node 1's admin
            // socket), and the device's page shows it.
            try setPassword("ana", "a long passphrase", data: ingest.dataDirectory(0))
            let panel = PanelPageTests()
            let login = try panel.request(node2, "GET", "/login")
            let csrf = try #require(login.cookie("findmy_login_csrf"))
            var session: String?
            let loggedIn = waitUntil(timeoutSeconds: 60) {
                let answer = try? panel.request(
                    node2, "POST", "/login", cookies: ["findmy_login_csrf=\(csrf)"],
                    form: "name=ana&password=a+long+passphrase&csrf=\(csrf)")
                session = answer?.cookie("findmy_session")
                return session != nil
            }
            #expect(loggedIn)
            let page = try panel.request(
                node2, "GET", "/find-my?selected=\(deviceID)", cookies: ["findmy_session=\(session ?? "")"])
            #expect(page.status == 200)
            #expect(
                page.body.contains("ana-phone") && page.body.contains("48.8566"), "\(page.body.prefix(3000))")

            // Another user sees nothing of ana's, through either node: the same 404 as on one machine.
            let otherToken = try addUser("ben", data: ingest.dataDirectory(1))
            #expect(
                waitUntil(timeoutSeconds: 60) {
                    (try? get(node1, "/api/find-my/devices/\(deviceID)", token: otherToken).status) == 404
                })

            let health = try get(node2, "/healthz", token: nil)
            #expect(try health.body["projection"]?["checkpoint"]?.int64Value ?? 0 > offset, "\(health.body)")
        }
    }

    /// A database holding another log's projection (here a single-machine server's) is never
    /// served as the cluster's: the node answers 503 and says which log it holds.
    @Test func aProjectionOfAnotherLogIsNotServed() throws {
        let postgres = try ScratchPostgres()
        let single = ScratchDirectory("findmy-single")
        let singleToken = try addUser("solo", data: single.path)
        let server = try ServerProcess(
            data: single.path, extraArguments: ["--projector", "on", "--database-url", postgres.conninfo])
        // The single machine's projector binds the database's projection to its own log.
        let bound = waitUntil(timeoutSeconds: 120) {
            (try? get(HTTPConnection(address: server.address), "/api/find-my/devices", token: singleToken)
                .status)
                == 200
        }
        server.stop()
        #expect(bound)

        try IngestNodesTests.withNodes(extraArguments: ["--database-url", postgres.conninfo]) { ingest in
            let userToken = try addUser("ana", data: ingest.dataDirectory(0))
            let answer = try get(
                HTTPConnection(address: ingest.address(0)), "/api/find-my/devices", token: userToken)
            #expect(answer.status == 503, "\(answer.body)")
            let why = (try? answer.body["error"]?["message"]?.stringValue) ?? ""
            #expect(why.contains("not from this node's stream"), "\(answer.body)")
            let health = try get(HTTPConnection(address: ingest.address(0)), "/healthz", token: nil)
            #expect(try health.body["projection"]?["reads_refused"]?.stringValue != nil, "\(health.body)")
        }
    }
}
