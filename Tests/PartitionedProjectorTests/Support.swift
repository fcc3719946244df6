import Events
import Foundation
import NATSLog
import NATSSupport
import Postgres
import Testing
import Threads

/// A private PostgreSQL cluster in a scratch directory, destroyed (and its directory removed) when
/// released, whether the test passed or not.
final class ScratchPostgres: @unchecked Sendable {
    let directory = NSTemporaryDirectory() + "findmy-partproj-\(UUID().uuidString.prefix(8))"
    let cluster: EmbeddedPostgres

    init() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        cluster = try EmbeddedPostgres(dataDirectory: directory)
        do {
            try cluster.start()
        } catch {
            try? cluster.destroy()
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    var conninfo: String { cluster.conninfo }

    deinit {
        try? cluster.destroy()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A real `findmy projector` (FINDMY_BIN), or another findmy command, under `setpriv --pdeathsig
/// KILL`: it dies with the test process, and releasing it kills (SIGKILL) and reaps it if it still
/// runs.
final class ProjectorProcess: @unchecked Sendable {
    let outputPath: String
    private(set) var pid: pid_t?

    init(_ arguments: [String], outputPath: String, command: [String] = ["projector"]) throws {
        let binary = try #require(
            ProcessInfo.processInfo.environment["FINDMY_BIN"],
            "set FINDMY_BIN to the built findmy (swift build --show-bin-path)/findmy")
        self.outputPath = outputPath
        pid = try spawnChild(
            [setprivPath, "--pdeathsig", "KILL", "--", binary] + command + arguments, outputPath: outputPath)
    }

    /// Runs `findmy COMMAND ARGUMENTS` to its end: its exit status (nil when it still ran after
    /// `seconds`, then it is killed) and its output (standard output and error).
    static func run(_ command: [String], _ arguments: [String], outputPath: String, seconds: Double = 600) throws
        -> (status: Int32?, output: String)
    {
        let child = try ProjectorProcess(arguments, outputPath: outputPath, command: command)
        let deadline = Date().addingTimeInterval(seconds)
        while let running = child.pid {
            if let status = childExitStatus(running) {
                child.pid = nil
                return (status, child.output)
            }
            guard Date() < deadline else { break }
            usleep(20_000)
        }
        child.kill9()
        return (nil, child.output)
    }

    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    /// The `application_name` its PostgreSQL session carries (`findmy projector PID`): setpriv
    /// execs findmy in place, so the pid is findmy's.
    var sessionName: String { "findmy projector \(pid ?? -1)" }

    func kill9() {
        guard let running = pid else { return }
        pid = nil
        kill(running, SIGKILL)
        reapChild(running)
    }

    /// SIGTERM, then waits for it to exit (SIGKILL after the deadline); returns whether it exited
    /// by itself.
    @discardableResult
    func stop(deadlineSeconds: Double = 60) -> Bool {
        guard let running = pid else { return false }
        kill(running, SIGTERM)
        let deadline = Date().addingTimeInterval(deadlineSeconds)
        while !childEnded(running) {
            guard Date() < deadline else {
                kill9()
                return false
            }
            usleep(20_000)
        }
        pid = nil
        return true
    }

    deinit { kill9() }
}

/// Polls `condition` until it holds or `seconds` pass; the failure says what was awaited.
func waitUntil(
    _ what: String, seconds: Double = 120, sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () throws -> Bool
) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while try !condition() {
        guard Date() < deadline else {
            Issue.record("waited \(Int(seconds)) s for: \(what)", sourceLocation: sourceLocation)
            throw WaitTimedOut(what: what)
        }
        usleep(50_000)
    }
}

struct WaitTimedOut: Error { var what: String }

func jetStreamConfiguration(_ cluster: NATSCluster, partitions: Int = 4) -> JetStreamLogConfiguration {
    var configuration = JetStreamLogConfiguration(servers: cluster.urls, partitionCount: partitions)
    // A shared, loaded machine (see JetStreamLogTests).
    configuration.appendDeadlineMillis = 30_000
    configuration.readWaitMillis = 30_000
    configuration.openDeadlineMillis = 60_000
    return configuration
}


/// User 1 and devices 1...devices, received at `atMicros`.
func registry(devices: Int, atMicros: Int64) -> [EncodedEvent] {
    var events = [
        EventCodec.encode(
            .userCreated(
                UserCreated(userID: 1, name: "ada", role: .member, tokenHash: Array(repeating: 7, count: 32))),
            receivedAtMicros: atMicros)
    ]
    for device in 1...devices {
        events.append(
            EventCodec.encode(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: UInt64(device), userID: 1, deviceUUID: UUID128.random(),
                        name: "device \(device)",
                        platform: "ios", model: "test")),
                receivedAtMicros: atMicros))
    }
    return events
}

/// A fix batch of `device` with fixes recorded at `recordedAtMicros`, received at `receivedAtMicros`.
func fixBatch(device: UInt64, recordedAtMicros: [Int64], receivedAtMicros: Int64, salt: Int = 0)
    -> EncodedEvent
{
    let fixes = recordedAtMicros.enumerated().map { index, recorded in
        Fix(
            latitude: 52.5 + Double(device) * 0.01 + Double(index) * 0.0001 + Double(salt) * 0.000_001,
            longitude: 13.4 + Double(recorded % 1_000_000_000) * 0.000_000_001, accuracyMeters: 10,
            batteryPercent: 80, source: "significant", recordedAtMicros: recorded)
    }
    return EventCodec.encode(
        .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes)),
        receivedAtMicros: receivedAtMicros)
}

func count(_ connection: PostgresConnection, _ sql: String) throws -> Int {
    Int(try connection.execute(sql).int64(0, 0) ?? -1)
}

/// Batches in the projection's `device_batches` (0 before the projector made its schema).
func folded(_ connection: PostgresConnection) throws -> Int {
    let exists = try connection.execute("SELECT to_regclass('findmy.device_batches') IS NOT NULL")
    guard exists.string(0, 0) == "t" else { return 0 }
    return try count(connection, "SELECT count(*) FROM findmy.device_batches")
}
