import CLI
import Events
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy log stats|verify|dump|repair|export|import`: inspect and check the event log, and move
/// it into a JetStream cluster.
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
        case "stats": return try stats(logDirectory, json: options.flag("json"))
        case "verify": return try verify(logDirectory, json: options.flag("json"))
        case "dump":
            return try dump(
                logDirectory, json: options.flag("json"),
                from: UInt64(try options.integer("from", default: 0)),
                limit: try options.integer("limit", default: Int.max))
        case "repair": return try repair(logDirectory, json: options.flag("json"))
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
            file: file, node: node, mapPath: options.value("map") ?? file + ".offsets",
            verify: options.flag("verify"),
            publishersPerPartition: publishers)
    }

    static func requireLog(_ directory: String) throws {
        var info = stat()
        guard stat(directory, &info) == 0 else {
            throw UsageError("no event log at \(directory): is --data-dir the server's data directory?")
        }
    }

    // MARK: stats

    static func stats(_ directory: String, json: Bool) throws -> Int32 {
        try requireLog(directory)
        let reader = LogReader(directory: directory)
        let durableEnd = reader.durableEnd()
        let logID = try reader.logID()
        var records = 0
        var fixes = 0
        var byType: [UInt8: Int] = [:]
        var firstOffset: UInt64?
        var lastOffset: UInt64?
        var receivedMin = Int64.max
        var receivedMax = Int64.min
        var recordedMin = Int64.max
        var recordedMax = Int64.min
        let headersOnly: (RecordHeader) -> Bool = { _ in false }
        try reader.read(from: 0, upTo: durableEnd, wantPayload: headersOnly) { record in
            let header = record.header
            records += 1
            fixes += Int(header.fixCount)
            byType[header.type, default: 0] += 1
            firstOffset = firstOffset ?? header.offset
            lastOffset = header.offset
            receivedMin = min(receivedMin, header.receivedAtMicros)
            receivedMax = max(receivedMax, header.receivedAtMicros)
            if header.fixCount > 0 {
                recordedMin = min(recordedMin, header.recordedMinMicros)
                recordedMax = max(recordedMax, header.recordedMaxMicros)
            }
            return true
        }
        let files = try PosixFileIO().list(directory).filter { LogFormat.baseOffset(fileName: $0) != nil }
        var bytes = 0
        for file in files {
            var info = stat()
            if stat(directory + "/" + file, &info) == 0 { bytes += Int(info.st_size) }
        }
        let bytesPerFix = fixes > 0 ? Double(bytes) / Double(fixes) : 0
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("log_id")
            if let logID { writer.string(logID.description) } else { writer.null() }
            writer.key("segments")
            writer.int64(Int64(files.count))
            writer.key("records")
            writer.int64(Int64(records))
            writer.key("fixes")
            writer.int64(Int64(fixes))
            writer.key("bytes")
            writer.int64(Int64(bytes))
            writer.key("bytes_per_fix")
            writer.double(bytesPerFix)
            writer.key("first_offset")
            optional(firstOffset, &writer)
            writer.key("last_offset")
            optional(lastOffset, &writer)
            writer.key("durable_end")
            writer.int64(Int64(durableEnd))
            writer.key("received_from")
            time(records > 0 ? receivedMin : nil, &writer)
            writer.key("received_to")
            time(records > 0 ? receivedMax : nil, &writer)
            writer.key("recorded_from")
            time(fixes > 0 ? recordedMin : nil, &writer)
            writer.key("recorded_to")
            time(fixes > 0 ? recordedMax : nil, &writer)
            writer.key("records_by_type")
            writer.beginObject()
            for (type, count) in byType.sorted(by: { $0.key < $1.key }) {
                writer.key(EventJSON.typeName(type))
                writer.int64(Int64(count))
            }
            writer.endObject()
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            // A log no writer of this version has opened yet has none (docs/log-format.md).
            printLine("log id         \(logID.map { "\($0)" } ?? "none (written before log ids)")")
            printLine("segments       \(files.count) (\(bytes) bytes)")
            printLine(
                "records        \(records)" + (firstOffset.map { " (offsets \($0)...\(lastOffset!))" } ?? ""))
            printLine(
                "fixes          \(fixes)"
                    + (fixes > 0 ? " (\(String(format1: bytesPerFix)) bytes per fix on disk)" : ""))
            printLine("durable end    \(durableEnd)")
            if records > 0 {
                printLine(
                    "received       \(EventJSON.time(receivedMin, millis: true)) to \(EventJSON.time(receivedMax, millis: true))"
                )
            }
            if fixes > 0 {
                printLine(
                    "recorded       \(EventJSON.time(recordedMin, millis: true)) to \(EventJSON.time(recordedMax, millis: true))"
                )
            }
            for (type, count) in byType.sorted(by: { $0.key < $1.key }) {
                printLine("  " + EventJSON.typeName(type).padding(24) + "\(count)")
            }
        }
        return 0
    }

    // MARK: verify

    static func verify(_ directory: String, json: Bool) throws -> Int32 {
        try requireLog(directory)
        let report = try LogInspector(directory: directory).verify()
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("ok")
            writer.bool(report.ok)
            writer.key("records")
            writer.int64(Int64(report.records))
            writer.key("fixes")
            writer.int64(Int64(report.fixes))
            writer.key("first_offset")
            optional(report.firstOffset, &writer)
            writer.key("last_offset")
            optional(report.lastOffset, &writer)
            writer.key("segments")
            writer.int64(Int64(report.segments))
            writer.key("bytes")
            writer.int64(Int64(report.bytes))
            writer.key("torn_bytes_truncated")
            writer.int64(Int64(report.tornBytesTruncated))
            writer.key("recovered")
            writer.bool(report.recovered)
            writer.key("unknown_records")
            writer.int64(Int64(report.unknownRecords))
            writer.key("problems")
            writer.beginArray()
            for problem in report.problems {
                writer.beginObject()
                writer.key("file")
                writer.string(problem.file)
                writer.key("position")
                writer.int64(Int64(problem.position))
                writer.key("reason")
                writer.string(problem.reason)
                writer.endObject()
            }
            writer.endArray()
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            printLine(report.ok ? "ok: the log is sound" : "DAMAGED: \(report.problems.count) problem(s)")
            printLine(
                "segments \(report.segments), records \(report.records), fixes \(report.fixes), bytes \(report.bytes)"
            )
            if let first = report.firstOffset { printLine("offsets \(first)...\(report.lastOffset!)") }
            if report.tornBytesTruncated > 0 {
                printLine("truncated a torn tail of \(report.tornBytesTruncated) bytes")
            }
            if !report.recovered {
                printLine("(a server holds the log: checked up to its durable watermark)")
            }
            for problem in report.problems {
                printLine("  \(problem.file) at byte \(problem.position): \(problem.reason)")
            }
            if !report.ok {
                printLine(
                    "run `findmy log repair --data-dir DIR` with the server stopped to cut the log at the first damage"
                )
            }
        }
        return report.ok ? 0 : 1
    }

    // MARK: dump

    static func dump(_ directory: String, json: Bool, from: UInt64, limit: Int) throws -> Int32 {
        try requireLog(directory)
        var printed = 0
        try LogReader(directory: directory).read(from: from) { record in
            guard printed < limit else { return false }
            printed += 1
            let event: Event
            do {
                event = try record.event()
            } catch {
                event = .unknown(type: record.header.type, version: record.header.eventVersion, payload: [])
            }
            if json {
                var writer = JSONWriter(capacity: 256)
                EventJSON.write(record.header, event, to: &writer)
                printLine(String(decoding: writer.bytes, as: UTF8.self))
            } else {
                printLine(EventJSON.line(record.header, event))
            }
            return true
        }
        return 0
    }

    // MARK: repair

    static func repair(_ directory: String, json: Bool) throws -> Int32 {
        try requireLog(directory)
        let report = try LogInspector(directory: directory).repair()
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("repaired")
            writer.bool(report.cutFile != nil || !report.movedFiles.isEmpty)
            writer.key("end_offset")
            writer.int64(Int64(report.newEndOffset))
            writer.key("cut_file")
            if let file = report.cutFile { writer.string(file) } else { writer.null() }
            writer.key("cut_position")
            writer.int64(Int64(report.cutPosition))
            writer.key("quarantine")
            if let folder = report.quarantine { writer.string(folder) } else { writer.null() }
            writer.key("moved")
            writer.beginArray()
            for file in report.movedFiles { writer.string(file) }
            writer.endArray()
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else if report.movedFiles.isEmpty && report.cutFile == nil {
            printLine(
                "nothing to repair: no damaged frame found; the log ends at offset \(report.newEndOffset)")
        } else {
            printLine(
                "cut the log at offset \(report.newEndOffset)"
                    + (report.cutFile.map { " (\($0), byte \(report.cutPosition))" } ?? ""))
            printLine("moved to \(report.quarantine ?? "?"):")
            for file in report.movedFiles { printLine("  \(file)") }
            printLine(
                "records from offset \(report.newEndOffset) on are no longer in the log; rebuild projections with `findmy replay`"
            )
        }
        return 0
    }

    // MARK: helpers

    static func optional(_ value: UInt64?, _ writer: inout JSONWriter) {
        if let value { writer.int64(Int64(value)) } else { writer.null() }
    }

    static func time(_ micros: Int64?, _ writer: inout JSONWriter) {
        if let micros { writer.string(EventJSON.time(micros)) } else { writer.null() }
    }
}

extension String {
    init(format1 value: Double) {
        guard let tenths = Int64(saturating: (value * 10).rounded()) else {
            self = "unknown"
            return
        }
        self = "\(tenths / 10).\((tenths % 10).magnitude)"
    }
}
