import CLI
import Events
import Foundation
import JSON
import NATSSupport
import Threads
import Workload

/// `findmy-bench node-start`: how long an ingest node of a JetStream log takes to start, with and
/// without a registry snapshot in its data directory, on the same stream (docs/scale.md, "Registry
/// snapshots on ingest nodes").
enum NodeStartBench {
    static let command = Command(
        name: "node-start",
        summary: "an ingest node's start-up on a stream, with and without a registry snapshot"
    ) { try run($0) }

    static let help = """
        usage: findmy-bench node-start [--fill-seconds S] [--connections C] [--rounds R] [--partitions P]
                                       [--dir DIR]

        Defaults: S 40, C 64, R 3, P 4.

        Starts a three-node nats-server cluster on loopback and one `findmy serve --log nats://...
        --log-partitions P` ingest node (the findmy beside findmy-bench, or $FINDMY_BIN), enrols C
        devices and fills the stream for S seconds with single-fix reports through the node (C
        connections back to back). Then R rounds, alternating which goes first, each starting the
        node twice on the same stream: once with the registry snapshot its last stop wrote, once
        with its snapshots moved aside (a start that folds the whole stream, as every start did
        before ingest nodes had snapshots). For each start: the wall time from spawning the process
        to its first line (the URL, printed once the listeners accept), and what its
        `registry_rebuilt` line says (records replayed, its own millis). Prints the medians and the
        ratio with / without. DIR (default a new directory in $TMPDIR) is removed at the end. Build
        with -c release to measure; the page cache is warm (the stream was just written or read).
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["fill-seconds", "connections", "rounds", "partitions", "dir"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let fillSeconds = Double(try options.integer("fill-seconds", default: 40))
        let connections = try options.integer("connections", default: 64)
        let rounds = try options.integer("rounds", default: 3)
        let partitions = try options.integer("partitions", default: 4)
        guard fillSeconds > 0, connections > 0, rounds > 0, partitions > 0 else {
            throw UsageError("--fill-seconds, --connections, --rounds and --partitions must be positive")
        }
        let root =
            options.value("dir") ?? NSTemporaryDirectory()
            + "findmy-node-start-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let cluster = try NATSCluster(directory: root + "/nats")
        defer { cluster.stopAll() }
        let data = root + "/node"
        let nodeArguments = ["--log", cluster.logArgument, "--log-partitions", "\(partitions)"]
        let starter = NodeStarter(root: root, data: data, arguments: nodeArguments)

        let node = try starter.start().server
        let user = try addUser(data, name: "bench")
        let tokens = try enrolDevices(connections, address: node.address, userToken: user.token)
        var track = TrackGenerator(seed: 1, startMicros: wallClockMicros() - 600_000_000)
        let fill = IngestBench.nativeTarget(tokens, track.next(1)).drive(node.address, seconds: fillSeconds)
        node.stop()
        printLine(
            "node-start: filled the stream with \(fill.requests) single-fix reports "
                + "(\(Int(fill.requestsPerSecond))/s), \(partitions) partitions, load average \(APIDriver.loadAverage())"
        )

        let (with, without) = try compareStarts(rounds: rounds, starter, data: data)
        let withMedian = (median(with.map(\.millis)) ?? 0)
        let withoutMedian = (median(without.map(\.millis)) ?? 0)
        printLine(
            "medians of \(rounds): with a snapshot " + String(format: "%.0f", withMedian) + " ms, without "
                + String(format: "%.0f", withoutMedian) + " ms, with / without "
                + String(format: "%.3f", withMedian / max(1, withoutMedian))
                + "; load average \(APIDriver.loadAverage())")
        return 0
    }

    typealias Start = (millis: Double, rebuilt: JSONValue?)

    /// Starts the node on the same data and stream, each start with a log file of its own.
    final class NodeStarter {
        let root: String
        let data: String
        let arguments: [String]
        var starts = 0

        init(root: String, data: String, arguments: [String]) {
            self.root = root
            self.data = data
            self.arguments = arguments
        }

        /// The node, the wall time until it accepted connections, and its `registry_rebuilt` line.
        func start() throws -> (server: ChildServer, wallMillis: Double, rebuilt: JSONValue?) {
            starts += 1
            let logPath = root + "/node-\(starts).log"
            let began = monotonicMicros()
            let server = try ChildServer(dataDirectory: data, logPath: logPath, arguments: arguments)
            let wallMillis = Double(monotonicMicros() - began) / 1000
            return (server, wallMillis, NodeStartBench.rebuiltLine(logPath))
        }
    }

    /// `rounds` starts with the snapshot the last stop wrote and as many without one, alternating
    /// which comes first.
    private static func compareStarts(rounds: Int, _ starter: NodeStarter, data: String) throws -> (
        with: [Start], without: [Start]
    ) {
        let snapshots = data + "/snapshots"
        let aside = data + "/snapshots-aside"
        var with: [Start] = []
        var without: [Start] = []
        for round in 0..<rounds {
            let measureWith = {
                let started = try starter.start()
                started.server.stop()
                with.append((started.wallMillis, started.rebuilt))
            }
            let measureWithout = {
                // The snapshot the last stop wrote is kept aside for the next start with one; what
                // this start writes at its stop is thrown away.
                try? FileManager.default.removeItem(atPath: aside)
                try FileManager.default.moveItem(atPath: snapshots, toPath: aside)
                let started = try starter.start()
                started.server.stop()
                try? FileManager.default.removeItem(atPath: snapshots)
                try FileManager.default.moveItem(atPath: aside, toPath: snapshots)
                without.append((started.wallMillis, started.rebuilt))
            }
            if round % 2 == 0 {
                try measureWith()
                try measureWithout()
            } else {
                try measureWithout()
                try measureWith()
            }
            printLine(
                "  round \(round + 1): with a snapshot \(describe(with.last!)); without \(describe(without.last!))"
            )
        }
        return (with, without)
    }

    static func describe(_ start: (millis: Double, rebuilt: JSONValue?)) -> String {
        let replayed = (try? start.rebuilt?["records_replayed"]?.int64Value).map { "\($0)" } ?? "?"
        let own = (try? start.rebuilt?["millis"]?.int64Value).map { "\($0)" } ?? "?"
        return String(format: "%.0f", start.millis)
            + " ms to listening (registry \(own) ms, \(replayed) records replayed)"
    }

    /// The node's `registry_rebuilt` line from its log, parsed.
    static func rebuiltLine(_ logPath: String) -> JSONValue? {
        guard let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.contains("\"registry_rebuilt\"") {
            return try? JSONParser.parse(Array(line.utf8))
        }
        return nil
    }

}
