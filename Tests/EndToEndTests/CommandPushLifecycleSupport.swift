import Foundation
import HTTPClient
import JSON
import PushFakeSupport
import Testing

/// A command's whole life through `findmy serve` and one fake provider (ops/tests/fake_push.py):
/// a server with the provider configured against the fake, one owner, and helpers to enrol a
/// device with one push token, ask for a command and read it back as the owner sees it
/// (`GET .../commands/{id}`). The fake and the server are stopped by `stop()`, which the tests
/// call in a `defer`, so a failing test leaves no process behind.
final class PushLifecycle {
    let fake: FakeProvider
    let data = ScratchDirectory("findmy-push-lifecycle")
    let owner: String
    var server: ServerProcess
    var connection: HTTPConnection
    let serverArguments: [String]

    /// `providerArguments`: the fake's mode and arguments; `serverArguments(fake)`: the server's
    /// provider options pointing at it (besides `--projector on`).
    init(_ mode: String, _ providerArguments: [String], serverArguments: (FakeProvider) -> [String]) throws {
        fake = try FakeProvider(mode, providerArguments)
        do {
            owner = try addUser("olga", data: data.path)
            self.serverArguments =
                ["--projector", "on", "--push-ca-file", fake.caFile] + serverArguments(fake)
            server = try ServerProcess(data: data.path, extraArguments: self.serverArguments)
            connection = HTTPConnection(address: server.address)
        } catch {
            fake.stop()
            throw error
        }
    }

    func stop() {
        stopIfRunning(server)
        fake.stop()
    }

    /// Stops the server (its exit status) and starts it again on the same data directory.
    func restart() throws -> Int32? {
        let status = server.stop()
        server = try ServerProcess(data: data.path, extraArguments: serverArguments)
        connection = HTTPConnection(address: server.address)
        return status
    }

    /// Enrols a device of the owner and registers `registration` (a push-tokens body) for it.
    func device(_ name: String, registration: String) throws -> (id: Int64, token: String) {
        let enrolled = try enrol(connection, userToken: owner, uuid: UUID().uuidString, name: name)
        let device = (
            id: try #require(enrolled.int("device_id")), token: try #require(enrolled.string("device_token"))
        )
        let registered = try post(
            connection, "/api/find-my/push-tokens", token: device.token, body: registration)
        #expect(registered.status == 200 || registered.status == 201, "\(registered.body)")
        return device
    }

    /// Asks for a command as the owner; its id.
    func command(_ device: Int64, _ kind: String) throws -> String {
        let asked = try commandRequest(
            connection, "POST", "/api/find-my/devices/\(device)/commands", token: owner,
            body: "{\"kind\": \"\(kind)\"}"
        ).answer
        #expect(asked.status == 202, "\(asked.body)")
        return try #require(asked.string("command_id"))
    }

    /// The command as the owner reads it, once `done` holds (or the last answer at the deadline).
    func wait(_ device: Int64, _ command: String, until done: (Answer) -> Bool) throws -> Answer {
        try waitForCommand(connection, device: device, command: command, token: owner, done)
    }

    /// The accepted requests the fake printed for `command`, once at least `count` are in.
    func pushes(_ command: String, count: Int = 1) -> [JSONObject] {
        fake.requests(atLeast: count) { pushCommandID($0) == command }
    }

    /// The server's log as `findmy log dump --json` lines, once the server is stopped.
    func logLines() throws -> [Substring] {
        let dump = try FindmyProcess.run(
            ["log", "dump", "--json", "--data-dir", data.path], timeoutSeconds: 120)
        #expect(dump.status == 0, "\(dump.error)")
        return dump.output.split(separator: "\n")
    }
}

/// A delivery as `GET .../commands/{id}` shows it.
struct ShownDelivery: Equatable {
    var channel: String
    var state: String
    var detail: String
    var retryAt: String?
    var addressDead: Bool
}

func shownDeliveries(_ answer: Answer) -> [ShownDelivery] {
    guard case .array(let items)? = answer.body["deliveries"] else { return [] }
    return items.map { item in
        var retryAt: String?
        if case .string(let text)? = item["retry_at"] { retryAt = text }
        return ShownDelivery(
            channel: (try? item["channel"]?.stringValue) ?? "",
            state: (try? item["state"]?.stringValue) ?? "",
            detail: (try? item["detail"]?.stringValue) ?? "", retryAt: retryAt,
            addressDead: item["address_dead"] == .bool(true))
    }
}

/// The command id a fake's request carried: APNs and Web Push in the payload, FCM in its data.
func pushCommandID(_ request: JSONObject) -> String? {
    if case .string(let id)? = request["payload"]?["command_id"] { return id }
    if case .string(let id)? = request["data"]?["command_id"] { return id }
    return nil
}

/// A report from the device answering `command` with one fix at `latitude`.
func answerCommand(_ connection: HTTPConnection, deviceToken: String, command: String, latitude: Double)
    throws
{
    let reply = try post(
        connection, "/api/find-my/report", token: deviceToken,
        body: "{\"batch_id\": \"\(UUID().uuidString)\", \"in_reply_to\": \"\(command)\", \"fixes\": ["
            + fixJSON(latitude: latitude, secondsAgo: 1) + "]}")
    #expect(reply.status == 200, "\(reply.body)")
}
