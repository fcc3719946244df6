import CLI
import Maintenance

/// `findmy log stats|verify|dump|repair|export|import`: the arguments; inspecting the log is
/// Maintenance's `LogInspection`, moving it into a JetStream cluster its `LogTransfer`.
enum LogCommand {
    static let command = Command(
        name: "log", summary: "inspect, verify, dump, repair the event log; export it, import it into NATS"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy log SUBCOMMAND --data-dir DIR [--json]
               findmy log export --data-dir DIR --out FILE|-
               findmy log import --log nats://HOST:PORT[,HOST:PORT...] [--log-partitions P] [--map FILE|-]
                                 [--publishers-per-partition N] [--verify] FILE

        subcommands:
          stats    the log id, segments, records, fixes, bytes per fix, offsets and time ranges (reads
                   headers only)
          verify   checks every frame of every segment and decodes every payload; if no server holds the
                   log, first recovers it as a restart would (a torn tail is truncated and reported).
                   Exit status 0 when the log is sound, 1 when it is damaged.
          dump     prints every record: offset, type, received_at, batch id, device, fixes
                   (--from OFFSET, --limit N)
          repair   cuts the log at its first damaged frame; the damaged bytes and every later segment are
                   moved to DIR/log/quarantine/<time>/, never deleted. Needs the server stopped.
          export   writes every record of the log, in offset order, to a portable export file (a group
                   record split into its requests, each as a JetStream message), with a trailer of counts
                   and a checksum. Keeps a server from starting meanwhile; beside a running server it
                   exports what was durable when it started and says so (stop the server for the
                   migration itself). Written to FILE.partial, renamed to FILE once complete.
          import   checks the whole export file (a damaged one is refused, nothing stored), then appends
                   each record to the stream FINDMY_LOG (its device's partition; the stream is created
                   with P partitions, default 8, when missing). Exactly once: running it again, or after
                   a crash halfway, stores only what is not there yet. A stream holding anything else is
                   refused. Writes the offset map (old offset -> new offset) to --map (default
                   FILE.offsets; - prints it); --verify then reads the stream back and checks every
                   record is there once, unchanged, in device order (exit status 1 if not).
                   --publishers-per-partition N (default 8): publishes in flight per partition, each
                   device's records through one of them, in order.
                   Afterwards, build the PostgreSQL projection anew with `findmy projector` (docs/scale.md,
                   "Migrating a single-machine log").

        options:
          --data-dir DIR   the server's data directory (the log is DIR/log); or set FINDMY_DATA_DIR
          --json           machine-readable output: one JSON object (dump: one per line)
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        guard let sub = arguments.first, !sub.hasPrefix("--") else {
            print(help)
            return arguments.contains("--help") ? 0 : 2
        }
        if let driver = ["bench": "log", "load": "load"][sub] {
            return movedToFindmyBench("findmy log \(sub)", driver: driver)
        }
        let options = try Options(
            Array(arguments.dropFirst()),
            valued: [
                "data-dir", "from", "limit", "out", "log", "log-partitions", "map",
                "publishers-per-partition",
            ],
            flags: ["json", "verify"])
        if options.flag("help") {
            print(help)
            return 0
        }
        if sub == "import" { return try runImport(options) }
        for name in ["out", "log", "log-partitions", "map", "verify", "publishers-per-partition"]
        where options.value(name) != nil || options.flag(name) {
            guard sub == "export" && name == "out" else {
                throw UsageError("--\(name) is not an option of '\(sub)'")
            }
        }
        guard options.positional.isEmpty else {
            throw UsageError("unexpected argument '\(options.positional[0])'")
        }
        let logDirectory = try options.required("data-dir", environment: "FINDMY_DATA_DIR") + "/log"
        switch sub {
        case "stats": return try LogInspection.stats(logDirectory, json: options.flag("json"))
        case "verify": return try LogInspection.verify(logDirectory, json: options.flag("json"))
        case "dump":
            return try LogInspection.dump(
                logDirectory, json: options.flag("json"),
                from: UInt64(try options.integer("from", default: 0)),
                limit: try options.integer("limit", default: Int.max))
        case "repair": return try LogInspection.repair(logDirectory, json: options.flag("json"))
        case "export":
            return try LogTransfer.export(
                dataDirectory: String(logDirectory.dropLast("/log".count)), out: try options.required("out"))
        default: throw UsageError("unknown subcommand '\(sub)'")
        }
    }

    static func runImport(_ options: Options) throws -> Int32 {
        guard options.positional.count == 1 else {
            throw UsageError("import takes one export file (findmy log import --log nats://... FILE)")
        }
        let file = options.positional[0]
        guard
            let node = try IngestNodeConfiguration.parse(
                log: try options.required("log", environment: "FINDMY_LOG"),
                partitions: options.value("log-partitions", environment: "FINDMY_LOG_PARTITIONS"),
                projector: nil)
        else {
            throw UsageError("--log must name the NATS cluster (nats://HOST:PORT,...), not the local log")
        }
        let publishers = try options.integer(
            "publishers-per-partition", default: LogTransfer.publishersPerPartitionDefault)
        guard (1...64).contains(publishers) else {
            throw UsageError(
                "--publishers-per-partition must be a whole number from 1 to 64, got \(publishers)")
        }
        return try LogTransfer.runImport(
            file: file, openLog: node.open, mapPath: options.value("map") ?? file + ".offsets",
            verify: options.flag("verify"),
            publishersPerPartition: publishers)
    }
}
