import CLI
import Events
import Foundation
import NATSSupport
import Threads

/// `findmy-bench migrate`: how long moving a local log into a JetStream cluster takes (docs/scale.md,
/// "Migrating a single-machine log"): `findmy log export`, `findmy log import`, and `findmy log
/// import --verify` run again (nothing left to store: the read-back and comparison alone).
enum MigrateBench {
    static let command = Command(
        name: "migrate", summary: "findmy log export and import of a large local log into a JetStream cluster"
    ) { try run($0) }

    static let help = """
        usage: findmy-bench migrate [--fixes 1000000] [--fixes-per-record 1] [--devices 1000] [--partitions 8]
                                    [--publishers-per-partition 1,8]

        Writes a local log of N fixes (records of --fixes-per-record fixes from --devices devices, 100 records
        per group commit, so that the log holds group records), starts a three-node nats-server cluster on
        loopback, then times the real commands: `findmy log export`, `findmy log import` into a new stream
        of P partitions, and `findmy log import --verify` again (it stores nothing: the stream read back
        and compared). Prints seconds and records/s of each, and the load average before and after.
        With several --publishers-per-partition values, the import and its verify run once for each,
        in the order given, each into a new cluster, and the import rates are printed as ratios to the
        first value's. Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: ["fixes", "fixes-per-record", "devices", "partitions", "publishers-per-partition"],
            flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let fixes = try options.integer("fixes", default: 1_000_000)
        let perRecord = try options.integer("fixes-per-record", default: 1)
        let devices = try options.integer("devices", default: 1_000)
        let partitions = try options.integer("partitions", default: 8)
        let publisherCounts = try IngestBench.list(options.value("publishers-per-partition") ?? "1,8")
        let binary = try findmyExecutable()
        let root = NSTemporaryDirectory() + "findmy-migratebench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root + "/data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let written = try ProjectBench.writeLog(
            root + "/data/log", totalFixes: fixes, devices: devices, fixesPerRecord: perRecord,
            fixesPerGroupCommit: 100 * perRecord)
        let loadBefore = APIDriver.loadAverage()
        let export = root + "/findmy.export"
        printLine(
            "\(written.records) records, \(written.fixes) fixes (\(perRecord) per record), \(devices) devices, "
                + "\(partitions) partitions; load average \(loadBefore)")
        func timed(_ name: String, _ argv: [String]) throws -> Double {
            let started = monotonicMicros()
            let output = try runCapturing(binary, argv)
            let seconds = Double(monotonicMicros() - started) / 1e6
            let last = output.split(separator: "\n").last {
                $0.hasPrefix("verify:") || $0.hasPrefix("import: done")
            }
            printLine(
                "  \(name): \(String(format: "%.1f", seconds)) s, \(Int(Double(written.records) / seconds)) records/s, "
                    + "\(Int(Double(written.fixes) / seconds)) fixes/s" + (last.map { "  (\($0))" } ?? ""))
            return seconds
        }
        _ = try timed("export", ["findmy", "log", "export", "--data-dir", root + "/data", "--out", export])
        var importSeconds: [Double] = []
        for publishers in publisherCounts {
            let cluster = try NATSCluster()
            defer { cluster.stopAll() }
            let log = cluster.logArgument
            importSeconds.append(
                try timed(
                    "import, \(publishers) publishers per partition",
                    [
                        "findmy", "log", "import", "--log", log, "--log-partitions", "\(partitions)",
                        "--publishers-per-partition", "\(publishers)", export,
                    ]))
            _ = try timed("verify", ["findmy", "log", "import", "--log", log, "--verify", export])
        }
        if importSeconds.count > 1 {
            printLine(
                "import rate against \(publisherCounts[0]) publishers per partition: "
                    + zip(publisherCounts, importSeconds).map {
                        "\($0.0): " + String(format: "%.2f", importSeconds[0] / $0.1)
                    }.joined(separator: ", "))
        }
        var info = stat()
        if stat(export, &info) == 0 { printLine("  export file: \(info.st_size) bytes") }
        printLine("load average after: \(APIDriver.loadAverage())")
        return 0
    }
}
