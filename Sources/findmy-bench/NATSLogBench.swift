import CLI
import Events
import Foundation
import JSON
import NATSLog
import NATSSupport
import Threads
import Workload

/// `findmy-bench nats-log`: appends to the JetStream log against the local log's group commit, in
/// the same run, alternating (docs/scale.md, "First measurement").
enum NATSLogBench {
    static let command = Command(
        name: "nats-log", summary: "the JetStream log against the local log: appends/s and ack latency"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench nats-log [--seconds 3] [--rounds 3] [--partitions 4] [--dir DIR]
                                     [--nats nats://h1:4222,nats://h2:4222,nats://h3:4222]

        Appends single-fix batches, one per append (each waits for its acknowledgement), from 1 and
        from 64 threads, S seconds each: to a JetStream log (a three-node nats-server cluster it starts
        on loopback, or the cluster --nats names) and to the local log in DIR (default a scratch
        directory), alternating local and JetStream for each round. Prints one JSON object: per log and
        thread count the median over rounds of appends/s and of the p50 and p99 acknowledgement
        latency, and the JetStream/local ratios. Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["seconds", "rounds", "partitions", "dir", "nats"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let seconds = Double(try options.integer("seconds", default: 3))
        let rounds = try options.integer("rounds", default: 3)
        let partitions = try options.integer("partitions", default: 4)
        let root =
            options.value("dir") ?? NSTemporaryDirectory()
            + "findmy-nats-bench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        var cluster: NATSCluster?
        let servers: [String]
        if let list = options.value("nats") {
            servers = list.split(separator: ",").map(String.init)
        } else {
            cluster = try NATSCluster(directory: root + "/nats")
            servers = cluster!.urls
        }
        defer { cluster?.stopAll() }
        var configuration = JetStreamLogConfiguration(servers: servers, partitionCount: partitions)
        configuration.streamName = "FINDMY_BENCH_\(UUID().uuidString.prefix(8))"
        configuration.subjectPrefix = "findmy.bench.\(UUID().uuidString.prefix(8).lowercased())"
        let nats = try JetStreamLog(configuration)
        defer { nats.close() }

        var writer = JSONWriter()
        writer.beginObject()
        writer.key("partitions")
        writer.int64(Int64(partitions))
        writer.key("seconds")
        writer.double(seconds)
        writer.key("rounds")
        writer.int64(Int64(rounds))
        writer.key("results")
        writer.beginArray()
        for publishers in [1, 64] {
            var local: [Result] = []
            var jetStream: [Result] = []
            for round in 0..<rounds {
                let directory = root + "/local-\(publishers)-\(round)"
                let log = try LogWriter(directory: directory)
                local.append(measure(log, publishers: publishers, seconds: seconds))
                log.close()
                try? FileManager.default.removeItem(atPath: directory)
                jetStream.append(measure(nats, publishers: publishers, seconds: seconds))
            }
            let localMedian = Result.figureMedian(local)
            let natsMedian = Result.figureMedian(jetStream)
            writeMedians(publishers: publishers, local: localMedian, jetStream: natsMedian, to: &writer)
        }
        writer.endArray()
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    /// Each log's medians for `publishers` threads, then the JetStream/local ratios.
    private static func writeMedians(
        publishers: Int, local localMedian: Result, jetStream natsMedian: Result, to writer: inout JSONWriter
    ) {
        for (name, result) in [("local", localMedian), ("jetstream", natsMedian)] {
            writer.beginObject()
            writer.key("log")
            writer.string(name)
            writer.key("publishers")
            writer.int64(Int64(publishers))
            writer.key("appends_per_s")
            writer.double(result.appendsPerSecond.rounded())
            writer.key("ack_p50_micros")
            writer.int64(result.p50Micros)
            writer.key("ack_p99_micros")
            writer.int64(result.p99Micros)
            writer.key("failed")
            writer.int64(Int64(result.failed))
            writer.endObject()
        }
        writer.beginObject()
        writer.key("publishers")
        writer.int64(Int64(publishers))
        writer.key("jetstream_over_local_appends")
        writer.double(
            (natsMedian.appendsPerSecond / max(1, localMedian.appendsPerSecond) * 1000).rounded() / 1000)
        writer.key("jetstream_over_local_p50")
        writer.double(
            (Double(natsMedian.p50Micros) / Double(max(1, localMedian.p50Micros)) * 100).rounded() / 100)
        writer.endObject()
    }

    struct Result {
        var appendsPerSecond: Double
        var p50Micros: Int64
        var p99Micros: Int64
        var failed: Int

        static func figureMedian(_ results: [Result]) -> Result {
            return Result(
                appendsPerSecond: median(results.map(\.appendsPerSecond))!,
                p50Micros: median(results.map(\.p50Micros))!,
                p99Micros: median(results.map(\.p99Micros))!, failed: results.map(\.failed).reduce(0, +))
        }
    }

    /// `publishers` threads, each appending one single-fix batch at a time for `seconds`.
    static func measure(_ log: some EventLogAppending, publishers: Int, seconds: Double) -> Result {
        // Records are made before the clock starts: the benchmark measures the log.
        let pools: [[EncodedEvent]] = (0..<publishers).map { publisher in
            var track = TrackGenerator(seed: UInt64(publisher), startMicros: 1_750_000_000_000_000)
            return (0..<64).map { _ in
                EventCodec.encode(
                    .fixBatch(
                        FixBatch(
                            deviceID: UInt64(publisher + 1), batchID: UUID128.random(), fixes: track.next(1))),
                    receivedAtMicros: 1_750_000_000_000_000)
            }
        }
        let latencies = Locked<[Int64]>([])
        let failures = Locked(0)
        let start = monotonicMicros()
        let end = start + Int64(seconds * 1_000_000)
        let threads = (0..<publishers).map { publisher in
            spawnThread {
                var mine: [Int64] = []
                var failed = 0
                var index = 0
                while monotonicMicros() < end {
                    // A fresh batch id per append: a repeated one would be a JetStream duplicate.
                    var record = pools[publisher][index % 64]
                    record.header.idempotencyKey = UUID128.random()
                    let before = monotonicMicros()
                    do {
                        _ = try log.append(batch: [record])
                        mine.append(monotonicMicros() - before)
                    } catch {
                        failed += 1
                    }
                    index += 1
                }
                latencies.withLock { $0 += mine }
                failures.withLock { $0 += failed }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        let elapsed = Double(monotonicMicros() - start) / 1_000_000
        let sorted = latencies.withLock { $0.sorted() }
        func percentile(_ fraction: Double) -> Int64 {
            sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
        }
        return Result(
            appendsPerSecond: Double(sorted.count) / elapsed, p50Micros: percentile(0.5),
            p99Micros: percentile(0.99), failed: failures.withLock { $0 })
    }
}
