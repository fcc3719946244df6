import CLI
import Events
import Foundation
import HTTPClient
import JSON
import NATSSupport
import Threads
import Workload

/// `findmy-bench ingest-nodes`: reports over HTTP through two `findmy serve --log nats://` ingest
/// nodes on a three-node loopback cluster, against one `findmy serve` on its local log, the same
/// load alternating between them, for each partition count (docs/scale.md, "Through ingest nodes").
enum IngestNodesBench {
    static let command = Command(
        name: "ingest-nodes",
        summary:
            "reports through two ingest nodes on JetStream vs one server on the local log, per partition count"
    ) { try run($0) }

    static let help = """
        usage: findmy-bench ingest-nodes [--seconds S] [--rounds R] [--connections C] [--fixes F,...]
                                         [--partitions P,...] [--nats-sync-interval I] [--dir DIR]

        Defaults: S 3, R 3, C 64, F 1,100, P 1,2,4,8, I the server's own (two minutes in 2.10).

        DIR (default a new directory in $TMPDIR) is a scratch directory, removed at the end. Starts
        one `findmy serve` on a local log (DIR/local) and, for each partition count P, a
        three-node nats-server cluster on loopback with two `findmy serve --log nats://...
        --log-partitions P` ingest nodes (the findmy beside findmy-bench, or $FINDMY_BIN). Both targets
        get the same load: C keep-alive connections (one Swift thread and one enrolled device each;
        through the nodes, half the connections to each, as a load balancer would spread them) posting
        native reports of F fixes back to back for S seconds, each request waiting for its answer. For
        each P and F, R rounds measure both targets, alternating which goes first. Prints per P and F
        the medians over rounds of reports/s, fixes/s, p50 and p99 latency, the median of each round's
        ratio of the nodes' fixes/s to the local log's, and the 1-minute load average before and after.
        The local server acknowledges after fdatasync on one machine, the nodes after a quorum of 2 of
        3 NATS nodes (docs/scale.md). Build with -c release to measure; everything shares the
        machine's cores, and the client takes CPU from both targets alike.

        I is nats-server's sync_interval on every node: `always` makes each node fsync a message
        before it takes part in the acknowledgement, the promise the local log makes; a duration
        (`2m`, `10s`) syncs on that interval instead.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: ["seconds", "rounds", "connections", "fixes", "partitions", "nats-sync-interval", "dir"],
            flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let seconds = Double(try options.integer("seconds", default: 3))
        let rounds = try options.integer("rounds", default: 3)
        let connections = try options.integer("connections", default: 64)
        let batchSizes = try IngestBench.list(options.value("fixes") ?? "1,100")
        let partitionCounts = try IngestBench.list(options.value("partitions") ?? "1,2,4,8")
        guard seconds > 0, rounds > 0, connections > 0 else {
            throw UsageError("--seconds, --rounds and --connections must be positive")
        }
        let syncInterval = options.value("nats-sync-interval")
        if let syncInterval, syncInterval != "always",
            syncInterval.wholeMatch(of: /[0-9]+(ms|s|m|h)/) == nil
        {
            throw UsageError("--nats-sync-interval takes `always` or a duration such as 2m, 10s or 500ms")
        }
        let root =
            options.value("dir") ?? NSTemporaryDirectory()
            + "findmy-nodes-bench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }

        let localUser = try addUser(root + "/local", name: "bench")
        let local = try ChildServer(dataDirectory: root + "/local", logPath: root + "/local.log")
        defer { local.stop() }
        let localTokens = try enrolDevices(connections, address: local.address, userToken: localUser.token)
        printLine(
            "ingest-nodes: \(connections) connections, \(Int(seconds)) s per measurement, \(rounds) rounds, "
                + "nats sync_interval \(syncInterval ?? "default"), load average \(APIDriver.loadAverage())")

        var rows: [Row] = []
        for partitions in partitionCounts {
            let cluster = try NATSCluster(directory: root + "/nats-\(partitions)", syncInterval: syncInterval)
            defer { cluster.stopAll() }
            var nodes: [ChildServer] = []
            defer { for node in nodes { node.stop() } }
            for index in 1...2 {
                nodes.append(
                    try ChildServer(
                        dataDirectory: root + "/node-\(partitions)-\(index)",
                        logPath: root + "/node-\(partitions)-\(index).log",
                        arguments: ["--log", cluster.logArgument, "--log-partitions", "\(partitions)"]))
            }
            // The user through node 1's admin socket; the devices through node 1's API (each token
            // works through both nodes).
            let nodeUser = try addUser(root + "/node-\(partitions)-1", name: "bench")
            let nodeTokens = try enrolDevices(
                connections, address: nodes[0].address, userToken: nodeUser.token)
            let addresses = nodes.map(\.address)
            for fixes in batchSizes {
                rows.append(
                    compare(
                        partitions: partitions, fixes: fixes, rounds: rounds, seconds: seconds, local: local,
                        localTokens: localTokens, nodeTokens: nodeTokens, addresses: addresses))
                printLine(rows.last!.line)
            }
        }
        printLine("medians of \(rounds) rounds (nodes = two ingest nodes on a 3-node JetStream cluster):")
        for row in rows { printLine(row.line) }
        return 0
    }

    /// Rounds of the local log against the two nodes with batches of `fixes` fixes, alternating
    /// which goes first.
    private static func compare(
        partitions: Int, fixes: Int, rounds: Int, seconds: Double, local: ChildServer, localTokens: [String],
        nodeTokens: [String], addresses: [String]
    ) -> Row {
        var track = TrackGenerator(seed: 1, startMicros: wallClockMicros() - 600_000_000)
        let sample = track.next(fixes)
        var localRuns: [LoadTarget.Result] = []
        var nodeRuns: [LoadTarget.Result] = []
        let loadBefore = APIDriver.loadAverage()
        for round in 0..<rounds {
            let measureLocal = {
                localRuns.append(
                    IngestBench.nativeTarget(localTokens, sample).drive(
                        local.address, seconds: seconds))
            }
            let measureNodes = {
                nodeRuns.append(
                    IngestBench.nativeTarget(nodeTokens, sample).drive(
                        spreadOver: addresses, seconds: seconds))
            }
            if round % 2 == 0 {
                measureLocal()
                measureNodes()
            } else {
                measureNodes()
                measureLocal()
            }
            printLine(
                "  P=\(partitions) F=\(fixes) round \(round + 1): local \(Int(localRuns.last!.requestsPerSecond)) "
                    + "reports/s, nodes \(Int(nodeRuns.last!.requestsPerSecond)) reports/s")
        }
        // Each round's two measurements are neighbours in time: their ratio is less
        // affected by the machine's changing load than a ratio of medians.
        let ratios = zip(nodeRuns, localRuns).map { $0.fixesPerSecond / max(1, $1.fixesPerSecond) }
        return Row(
            partitions: partitions, fixes: fixes, local: .figureMedian(localRuns),
            nodes: .figureMedian(nodeRuns),
            ratio: ratios.sorted()[ratios.count / 2], loadBefore: loadBefore,
            loadAfter: APIDriver.loadAverage())
    }

    struct Row {
        var partitions: Int
        var fixes: Int
        var local: LoadTarget.Result
        var nodes: LoadTarget.Result
        /// The median over rounds of the nodes' fixes/s over the local log's in the same round.
        var ratio: Double
        var loadBefore: Double
        var loadAfter: Double

        var line: String {
            func describe(_ median: LoadTarget.Result) -> String {
                "\(Int(median.requestsPerSecond)) reports/s, \(Int(median.fixesPerSecond)) fixes/s, p50 "
                    + String(format: "%.2f", Double(median.p50Micros) / 1000) + " ms, p99 "
                    + String(format: "%.2f", Double(median.p99Micros) / 1000)
                    + " ms, \(median.failures) failed"
            }
            return
                "P=\(partitions) F=\(fixes): local \(describe(local)); nodes \(describe(nodes)); nodes/local "
                + String(format: "%.3f", ratio) + "; load \(loadBefore) -> \(loadAfter)"
        }
    }
}
