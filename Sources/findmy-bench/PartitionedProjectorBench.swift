import CLI
import Events
import Foundation
import NATSLog
import NATSSupport
import Postgres
import Threads

/// `findmy-bench partitioned-projector`: how fast `findmy projector` folds a JetStream log, with one
/// and with two processes, against `findmy project` folding the same records from the local log
/// into the same PostgreSQL, in the same run (docs/scale.md, "Projectors").
enum PartitionedProjectorBench {
    static let command = Command(
        name: "partitioned-projector",
        summary:
            "fold a JetStream log with 1 and 2 findmy projector processes vs findmy project on the local log"
    ) { try run($0) }

    static let help = """
        usage: findmy-bench partitioned-projector [--batches N] [--fixes N] [--partitions P] [--rounds N]

        Starts a three-node nats-server cluster on loopback and an embedded PostgreSQL, appends N fix
        batches of --fixes fixes (64 devices) to a JetStream log of P partitions and to a local log,
        then times, in alternating rounds, until every batch is in a fresh database: `findmy project` on
        the local log, one `findmy projector`, two `findmy projector`. Prints medians and ratios.
        Defaults: 20000 batches, 1 fix, 4 partitions, 3 rounds.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["batches", "fixes", "partitions", "rounds"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let batches = try options.integer("batches", default: 20_000)
        let fixes = try options.integer("fixes", default: 1)
        let partitions = try options.integer("partitions", default: 4)
        let rounds = try options.integer("rounds", default: 3)
        let binary = try findmyExecutable()
        let root = NSTemporaryDirectory() + "findmy-partbench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root + "/data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let cluster = try NATSCluster()
        let postgres = try EmbeddedPostgres(dataDirectory: root)
        try postgres.start()
        defer { try? postgres.destroy() }

        var configuration = JetStreamLogConfiguration(servers: cluster.urls, partitionCount: partitions)
        configuration.appendDeadlineMillis = 60_000
        let jetStream = try JetStreamLog(configuration)
        let writer = try LogWriter(directory: root + "/data/log")
        let records = makeRecords(batches: batches, fixes: fixes)
        printLine("appending \(records.count) records to both logs...")
        for start in stride(from: 0, to: records.count, by: 500) {
            let chunk = Array(records[start..<min(records.count, start + 500)])
            _ = try jetStream.append(batch: chunk)
            _ = try writer.append(batch: chunk)
        }
        writer.close()
        let logArgument = cluster.logArgument

        var seconds: [String: [Double]] = [:]
        var database = 0
        for round in 0..<rounds {
            for variant in ["local project", "1 projector", "2 projectors"] {
                database += 1
                let conninfo = try freshDatabase(postgres, number: database)
                let arguments: [[String]] =
                    switch variant {
                    case "local project":
                        [["project", "--data-dir", root + "/data", "--database-url", conninfo]]
                    case "1 projector":
                        [
                            [
                                "projector", "--log", logArgument, "--database-url", conninfo,
                                "--compact-interval-seconds", "0",
                            ]
                        ]
                    default:
                        Array(
                            repeating: [
                                "projector", "--log", logArgument, "--database-url", conninfo,
                                "--compact-interval-seconds", "0",
                            ], count: 2)
                    }
                let elapsed = try time(binary, arguments, conninfo: conninfo, batches: batches, root: root)
                seconds[variant, default: []].append(elapsed)
                printLine("round \(round + 1): \(variant): \(String(format: "%.2f", elapsed)) s")
            }
        }
        let median = seconds.mapValues { $0.sorted()[$0.count / 2] }
        let base = median["local project"]!
        printLine(
            "\(batches) batches of \(fixes) fix(es), \(partitions) partitions, medians of \(rounds) rounds (from start "
                + "of the processes to the last batch in PostgreSQL):")
        for variant in ["local project", "1 projector", "2 projectors"] {
            let value = median[variant]!
            printLine(
                "  \(variant): \(String(format: "%.2f", value)) s, \(Int(Double(batches * fixes) / value)) fixes/s, "
                    + "\(String(format: "%.2f", base / value)) x local")
        }
        return 0
    }

    static func makeRecords(batches: Int, fixes: Int) -> [EncodedEvent] {
        let now = wallClockMicros()
        var records = [
            EventCodec.encode(
                .userCreated(
                    UserCreated(
                        userID: 1, name: "bench", role: .member, tokenHash: Array(repeating: 1, count: 32))),
                receivedAtMicros: now)
        ]
        for device in 1...64 {
            records.append(
                EventCodec.encode(
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: UInt64(device), userID: 1, deviceUUID: UUID128.random(),
                            name: "d\(device)",
                            platform: "ios", model: "bench")), receivedAtMicros: now))
        }
        for index in 0..<batches {
            let device = UInt64(index % 64 + 1)
            let fixList = (0..<fixes).map { fix in
                Fix(
                    latitude: 52.5 + Double(index % 1000) * 0.0001, longitude: 13.4 + Double(fix) * 0.0001,
                    accuracyMeters: 10, batteryPercent: 80, source: "significant",
                    recordedAtMicros: now - Int64(batches - index) * 1_000_000 - Int64(fix))
            }
            records.append(
                EventCodec.encode(
                    .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixList)),
                    receivedAtMicros: now))
        }
        return records
    }

    static func freshDatabase(_ postgres: EmbeddedPostgres, number: Int) throws -> String {
        let admin = try PostgresConnection(postgres.conninfo)
        defer { admin.close() }
        try admin.executeScript("CREATE DATABASE bench_\(number)")
        return postgres.conninfo.replacingOccurrences(of: "dbname='findmy'", with: "dbname=bench_\(number)")
    }

    /// Starts the processes, waits until `device_batches` holds every batch, stops them.
    static func time(_ binary: String, _ processes: [[String]], conninfo: String, batches: Int, root: String)
        throws -> Double
    {
        let started = monotonicMicros()
        var pids: [pid_t] = []
        defer {
            for pid in pids { kill(pid, SIGTERM) }
            for pid in pids { reapChild(pid) }
        }
        for (index, arguments) in processes.enumerated() {
            pids.append(
                try spawnChild(
                    [setprivPath, "--pdeathsig", "KILL", "--", binary] + arguments,
                    outputPath: root + "/process-\(index).out"))
        }
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        while true {
            let ready = try connection.execute("SELECT to_regclass('findmy.device_batches') IS NOT NULL")
            if ready.string(0, 0) == "t",
                try connection.execute("SELECT count(*) FROM findmy.device_batches").int64(0, 0)
                    == Int64(batches)
            {
                return Double(monotonicMicros() - started) / 1_000_000
            }
            guard monotonicMicros() - started < 900_000_000 else {
                throw UsageError("the projection did not reach \(batches) batches within 900 s; see \(root)")
            }
            usleep(20_000)
        }
    }
}
