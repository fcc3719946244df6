import Foundation
import NATSLog
import Postgres
import Threads

// The other processes a test (or a bench) of the JetStream deployment runs beside the cluster: a
// private PostgreSQL and `findmy projector`. Each is released (killed, reaped, destroyed) when
// its object is, whether the test passed or not.

/// A private PostgreSQL cluster in a scratch directory, destroyed (and its directory removed) when
/// released, whether the test passed or not.
public final class ScratchPostgres: @unchecked Sendable {
    public let directory = NSTemporaryDirectory() + "findmy-partproj-\(UUID().uuidString.prefix(8))"
    public let cluster: EmbeddedPostgres

    public init() throws {
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

    public var conninfo: String { cluster.conninfo }

    deinit {
        try? cluster.destroy()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A real `findmy projector` under `setpriv --pdeathsig KILL`: it dies with the test process, and
/// releasing it kills (SIGKILL) and reaps it if it still runs.
public final class ProjectorProcess: @unchecked Sendable {
    public let outputPath: String
    public private(set) var pid: pid_t?

    /// `executable` nil: `FINDMY_BIN`; `command`: the findmy command it runs.
    public init(
        _ arguments: [String], outputPath: String, executable: String? = nil,
        command: [String] = ["projector"]
    ) throws {
        guard let binary = executable ?? ProcessInfo.processInfo.environment["FINDMY_BIN"] else {
            throw NATSClusterError("set FINDMY_BIN to the built findmy (swift build --show-bin-path)/findmy")
        }
        self.outputPath = outputPath
        pid = try spawnChild(
            [setprivPath, "--pdeathsig", "KILL", "--", binary] + command + arguments, outputPath: outputPath)
    }

    /// Runs `findmy COMMAND ARGUMENTS` to its end: its exit status (nil when it still ran after
    /// `seconds`, then it is killed) and its output (standard output and error).
    public static func run(
        _ command: [String], _ arguments: [String], outputPath: String, seconds: Double = 600
    )
        throws -> (status: Int32?, output: String)
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

    public var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    /// The `application_name` its PostgreSQL session carries (`findmy projector PID`): setpriv
    /// execs findmy in place, so the pid is findmy's.
    public var sessionName: String { "findmy projector \(pid ?? -1)" }

    /// Whether it still runs; an ended process is reaped (then `kill9` and `stop` do nothing).
    public var isRunning: Bool {
        guard let running = pid else { return false }
        guard !childEnded(running) else {
            pid = nil
            return false
        }
        return true
    }

    public func kill9() {
        guard let running = pid else { return }
        pid = nil
        kill(running, SIGKILL)
        reapChild(running)
    }

    /// SIGTERM, then waits for it to exit (SIGKILL after the deadline); returns whether it exited
    /// by itself.
    @discardableResult
    public func stop(deadlineSeconds: Double = 60) -> Bool {
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

extension NATSCluster {

    /// A configuration of this cluster's log with the patience a shared, loaded machine needs:
    /// after a node is killed a CI machine took more than 10 s to give a consumer, and longer to
    /// elect leaders for an open (see JetStreamLogTests).
    public func patientLogConfiguration(partitions: Int) -> JetStreamLogConfiguration {
        var configuration = JetStreamLogConfiguration(servers: urls, partitionCount: partitions)
        configuration.appendDeadlineMillis = 30_000
        configuration.readWaitMillis = 30_000
        return configuration
    }
}
