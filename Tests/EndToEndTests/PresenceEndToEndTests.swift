import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// Presence through `findmy serve --headscale-url` against the fake headscale
/// (ops/tests/fake_headscale.py serving Fixtures/headscale): the owner links a laptop to its
/// node, polls record the changes and only the changes (in the log, across a restart), the read
/// API's device JSON and the panel show them, and a refused key shows in /healthz.
@Suite(.serialized) struct PresenceEndToEndTests {
    func send(
        _ connection: HTTPConnection, _ method: String, _ target: String, token: String, body: String? = nil
    )
        throws -> Answer
    {
        var headers = [("Authorization", "Bearer \(token)")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let response = try connection.send(method, target, headers: headers, body: Array((body ?? "").utf8))
        return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
    }

    func text(_ connection: HTTPConnection, _ target: String, token: String) throws -> String {
        let response = try connection.send("GET", target, headers: [("Authorization", "Bearer \(token)")])
        #expect(response.status == 200, "\(target)")
        return String(decoding: response.body, as: UTF8.self)
    }

    /// Waits (generous deadline) until `body` returns a value.
    func eventually<T>(_ what: String, _ body: () throws -> T?) throws -> T {
        var value: T?
        try waitUntil(what, timeoutSeconds: 60, intervalMillis: 50) {
            value = try body()
            return value != nil
        }
        guard let value else { throw WaitTimedOut(what: what) }
        return value
    }

    func presenceEvents(_ data: String) throws -> [String] {
        let dump = try FindmyProcess.run(["log", "dump", "--json", "--data-dir", data], timeoutSeconds: 120)
        return dump.output.split(separator: "\n").map(String.init).filter {
            $0.contains("\"presence_changed\"") || $0.contains("\"device_presence_linked\"")
        }
    }

    @Test func linkPollShowAndOnlyChangesAreLogged() throws {
        let fake = try FakeProvider(
            "serve", ["--key", "e2e-key", "--fixture", "v0.28"], script: "fake_headscale.py")
        defer { fake.stop() }
        let data = ScratchDirectory("findmy-presence")
        let keyFile = fake.directory + "/headscale.key"
        #expect(
            FileManager.default.createFile(
                atPath: keyFile, contents: Data("e2e-key\n".utf8), attributes: [.posixPermissions: 0o600]))
        let alice = try addUser("alice", data: data.path)
        let mallory = try addUser("mallory", data: data.path)
        let arguments = [
            "--projector", "on", "--headscale-url", fake.plainURL, "--headscale-api-key-file", keyFile,
            "--headscale-poll-seconds", "1",
        ]
        var server = try ServerProcess(data: data.path, extraArguments: arguments)
        defer { stopIfRunning(server) }
        var connection = HTTPConnection(address: server.address)
        let enrolled = try enrol(connection, userToken: alice, uuid: UUID().uuidString, name: "laptop")
        let device = try #require(enrolled.int("device_id"))
        let offset = try #require(enrolled.int("offset"))

        // The nodes offered are alice's own: not the tagged one (user null in 0.28).
        let nodes = try eventually("the first poll") { () -> Answer? in
            let answer = try send(connection, "GET", "/api/find-my/presence/nodes", token: alice)
            return answer.status == 200 ? answer : nil
        }
        #expect(nodes.body["headscale_user"] == .string("alice"))
        guard case .array(let offered)? = nodes.body["nodes"] else {
            Issue.record("no nodes: \(nodes.body)")
            return
        }
        #expect(offered.map { $0["name"] } == [.string("alice-laptop")])

        // Nobody links someone else's laptop, nor to a node that is not theirs.
        let foreign = try send(
            connection, "PUT", "/api/find-my/devices/\(device)/presence", token: mallory,
            body: #"{"headscale_node": "alice-laptop"}"#)
        #expect(foreign.status == 404 && foreign.errorCode == "device_not_found")
        let tagged = try send(
            connection, "PUT", "/api/find-my/devices/\(device)/presence", token: alice,
            body: #"{"headscale_node": "ci-runner"}"#)
        #expect(tagged.status == 404 && tagged.errorCode == "presence_node_not_found", "\(tagged.body)")

        let linked = try send(
            connection, "PUT", "/api/find-my/devices/\(device)/presence", token: alice,
            body: #"{"headscale_node": "alice-laptop"}"#)
        #expect(linked.status == 200, "\(linked.body)")
        #expect(linked.body["headscale_node"]?["id"] == .string("1"))
        #expect(linked.body["presence"]?["online"] == .bool(true))

        // The device JSON: online, last_seen now.
        let online = try send(
            connection, "GET", "/api/find-my/devices/\(device)?after_offset=\(offset)", token: alice)
        #expect(online.status == 200, "\(online.body)")
        #expect(online.body["presence"]?["source"] == .string("headscale"))
        #expect(online.body["presence"]?["online"] == .bool(true))
        let page = try text(connection, "/find-my?selected=\(device)", token: alice)
        #expect(page.contains("online on the tailnet"))
        #expect(page.contains("reachable, not where it is"))

        // It goes offline: the JSON says when it was last seen; the panel how long ago.
        try fake.command("set 1 offline 2026-02-01T07:45:00Z")
        let offline = try eventually("offline in the device JSON") { () -> Answer? in
            let answer = try send(connection, "GET", "/api/find-my/devices/\(device)", token: alice)
            return answer.body["presence"]?["online"] == .bool(false) ? answer : nil
        }
        #expect(offline.body["presence"]?["last_seen"] == .string("2026-02-01T07:45:00.000000Z"))
        let listed = try send(connection, "GET", "/api/find-my/devices", token: alice)
        #expect(listed.body["devices"]?[0]?["presence"]?["online"] == .bool(false))
        let offlinePage = try text(connection, "/find-my?selected=\(device)", token: alice)
        #expect(offlinePage.contains("offline, last seen"))
        let settings = try text(connection, "/find-my/devices/\(device)/settings", token: alice)
        #expect(settings.contains("id=\"headscale-node\"") && settings.contains("alice-laptop"))
        #expect(!settings.contains("ci-runner"))

        // Many polls later, still one event per change.
        let seen = fake.requests.count
        _ = fake.requests(atLeast: seen + 4) { _ in true }
        let health = try get(connection, "/healthz", token: nil)
        #expect(health.body["presence"]?["state"] == .string("ok"), "\(health.body)")
        #expect(server.stop() == 0)
        var events = try presenceEvents(data.path)
        #expect(events.count == 3, "\(events)")  // linked, online, offline
        #expect(events.last?.contains("\"online\":false") == true)

        // A restart folds the last state from the log: polls of an unchanged node record nothing.
        server = try ServerProcess(data: data.path, extraArguments: arguments)
        connection = HTTPConnection(address: server.address)
        let before = fake.requests.count
        _ = fake.requests(atLeast: before + 3) { _ in true }
        // A key headscale refuses (500 "Unauthorized", as some versions answer) shows in /healthz.
        try fake.command("auth 500")
        let refused = try eventually("unauthorized in /healthz") { () -> Answer? in
            let answer = try get(connection, "/healthz", token: nil)
            return answer.body["presence"]?["state"] == .string("unauthorized") ? answer : nil
        }
        #expect(refused.body["status"] == .string("degraded"), "\(refused.body)")
        let metrics = try connection.send("GET", "/metrics", headers: [])
        #expect(String(decoding: metrics.body, as: UTF8.self).contains("findmy_presence_up 0"))
        #expect(server.stop() == 0)
        events = try presenceEvents(data.path)
        #expect(events.count == 3, "\(events)")
    }
}
