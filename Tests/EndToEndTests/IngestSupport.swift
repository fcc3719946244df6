import Events
import Foundation
import HTTPClient
import JSON
import Postgres

/// A started `findmy serve` on a free loopback port; its first stdout line is its URL.
final class ServerProcess: @unchecked Sendable {
    static let allowPrivateTargets = "FINDMY_ALLOW_PRIVATE_TARGETS"
    let process: FindmyProcess
    let address: String
    let dataDirectory: String

    /// Without `--projector` in `extraArguments` the server runs ingest only (`--projector off`), so
    /// that tests of the report path neither need nor wait for PostgreSQL. The tests' receivers
    /// (webhooks, ntfy, push services) listen on loopback, which the server refuses to send to
    /// unless allowed: allowed here unless `environment` says otherwise (`""`: nothing allowed).
    /// `listen`: a free port unless given (a restart on the port of the first start, for a client
    /// that keeps the server's URL).
    init(
        data: String, extraArguments: [String] = [], environment: [String: String] = [:],
        listen: String = "127.0.0.1:0"
    ) throws {
        dataDirectory = data
        let projector = extraArguments.contains("--projector") ? [] : ["--projector", "off"]
        var environment = environment
        if environment[Self.allowPrivateTargets] == nil {
            environment[Self.allowPrivateTargets] = "127.0.0.0/8,::1/128"
        }
        process = try FindmyProcess(
            ["serve", "--data-dir", data, "--listen", listen] + projector + extraArguments,
            environment: environment)
        let deadline = Date().addingTimeInterval(300)
        while process.outputLines.isEmpty {
            guard Date() < deadline, process.process.isRunning else {
                throw TestFailure("findmy serve did not print its URL: \(process.standardError)")
            }
            usleep(10_000)
        }
        let url = process.outputLines[0]
        guard url.hasPrefix("http://") else { throw TestFailure("unexpected first line '\(url)'") }
        address = String(url.dropFirst("http://".count))
    }

    /// SIGTERM, and the exit status.
    @discardableResult
    func stop() -> Int32? {
        process.kill(SIGTERM)
        return process.wait(timeoutSeconds: 30)
    }

    func kill9() {
        process.kill(SIGKILL)
        process.wait(timeoutSeconds: 30)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A JSON answer: status and parsed body (null when the body is not JSON).
struct Answer {
    var status: Int
    var body: JSONValue
    var errorCode: String? { try? body["error"]?["code"]?.stringValue }
    func int(_ key: String) -> Int64? { try? body[key]?.int64Value }
    func string(_ key: String) -> String? { try? body[key]?.stringValue }
}

/// A JSON request with the bearer token, when there is one; the answer's body parsed (null when it
/// is not JSON).
func send(_ connection: HTTPConnection, _ method: String, _ path: String, token: String?, body: String = "")
    throws -> Answer
{
    var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
    if let token { headers.append(("Authorization", "Bearer \(token)")) }
    let response = try connection.send(method, path, headers: headers, body: Array(body.utf8))
    return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
}

func post(_ connection: HTTPConnection, _ path: String, token: String?, body: String) throws -> Answer {
    try send(connection, "POST", path, token: token, body: body)
}

/// `findmy user add NAME --json`; returns the token.
func addUser(_ name: String, data: String) throws -> String {
    let result = try FindmyProcess.run(["user", "add", name, "--json", "--data-dir", data])
    guard result.status == 0 else { throw TestFailure("user add failed: \(result.error)") }
    return try JSONParser.parse(result.output)["token"]!.stringValue
}

func enrol(_ connection: HTTPConnection, userToken: String, uuid: String, name: String = "phone") throws
    -> Answer
{
    try post(
        connection, "/api/find-my/devices", token: userToken,
        body:
            "{\"device_uuid\": \"\(uuid)\", \"name\": \"\(name)\", \"platform\": \"ios\", \"model\": \"iPhone 15\"}"
    )
}

/// A fix recorded `secondsAgo` before now (or at `recordedAtMicros`, whole milliseconds), JSON.
func fixJSON(
    latitude: Double = 52.52, secondsAgo: Int = 60, recordedAtMicros: Int64? = nil, extra: String = ""
) -> String {
    let recordedAt = RFC3339.formatMillis(
        recordedAtMicros ?? Int64(Date().timeIntervalSince1970 * 1_000_000) - Int64(secondsAgo) * 1_000_000)
    return
        "{\"latitude\": \(latitude), \"longitude\": 13.405, \"accuracy_m\": 12, \"battery_pct\": 81, \"source\": \"significant\", \"recorded_at\": \"\(recordedAt)\"\(extra)}"
}

func reportBody(batchID: String, fixes: [String]) -> String {
    "{\"batch_id\": \"\(batchID)\", \"fixes\": [\(fixes.joined(separator: ", "))]}"
}

/// A stored fix batch as `findmy log dump --json` shows it.
struct DumpedBatch {
    var offset: Int64
    var device: Int64
    var batchID: String
    var fixes: [JSONValue]
}

/// Every record of the log, as JSON objects, and the fix batches among them.
func dumpLog(_ data: String) throws -> (records: [JSONValue], batches: [DumpedBatch]) {
    let dump = try FindmyProcess.run(["log", "dump", "--json", "--data-dir", data], timeoutSeconds: 300)
    guard dump.status == 0 else { throw TestFailure("log dump failed: \(dump.error)") }
    var records: [JSONValue] = []
    var batches: [DumpedBatch] = []
    for line in dump.output.split(separator: "\n") {
        let record = try JSONParser.parse(String(line))
        records.append(record)
        // An envelope (a batch whose fixes a compaction removed) has a header only: no device, no fixes.
        if record["type"] == .string("fix_batch"), record["fixes"] != nil {
            batches.append(
                DumpedBatch(
                    offset: try record["offset"]!.int64Value, device: try record["device"]!.int64Value,
                    batchID: try record["batch_id"]!.stringValue, fixes: try record["fixes"]!.arrayValue))
        }
    }
    return (records, batches)
}

/// `findmy user passwd NAME` with the password on standard input (not a terminal).
func setPassword(_ name: String, _ password: String, data: String) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = [
        "-c", "printf '%s\\n' \"$PW\" | \"$BIN\" user passwd \"$NAME\" --data-dir \"$DATA\"",
    ]
    var environment = ProcessInfo.processInfo.environment
    environment["PW"] = password
    environment["BIN"] = findmyExecutable()
    environment["NAME"] = name
    environment["DATA"] = data
    process.environment = environment
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw TestFailure("user passwd \(name) failed") }
}

/// Waits until the projection's checkpoint has reached the log's durable end (the embedded
/// cluster of `data` unless `conninfo` names another).
func waitForProjector(_ data: String, _ conninfo: String? = nil) throws {
    let end = LogReader(directory: data + "/log").durableEnd()
    let conninfo = try conninfo ?? EmbeddedPostgres(dataDirectory: data).conninfo
    let deadline = Date().addingTimeInterval(120)
    while Date() < deadline {
        if let connection = try? PostgresConnection(conninfo) {
            defer { connection.close() }
            // No row yet (a fresh database, before the projector's first commit) means not yet;
            // reading row 0 of an empty result would trap.
            if let result = try? connection.execute("SELECT next_offset FROM findmy.projector_checkpoints"),
                result.rowCount > 0, let next = try? result.int64(0, 0), UInt64(next) >= end
            {
                return
            }
        }
        usleep(100_000)
    }
    throw TestFailure("the projector did not reach offset \(end)")
}
