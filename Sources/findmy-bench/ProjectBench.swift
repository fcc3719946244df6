import CLI
import Events
import Geofences
import JSON
import Postgres
import Projector
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench project --dir DIR [--fixes N] [--devices N]`: the projector catching up on a large
/// realistic log, against the raw COPY of the same rows into the same schema, measured in one run;
/// with `--drain`, the lag curve of a burst as `findmy serve` folds it (both projections).
enum ProjectBench {
    static let command = Command(
        name: "project", summary: "the projector catching up on a large log, against a raw COPY (fixes/s)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench project --dir DIR [--fixes 5000000] [--devices 1000]

        Writes a log of N realistic fixes (100-fix batches, from the given number of devices) in DIR/log,
        starts a private PostgreSQL in DIR, then measures, in one run: the raw COPY of the same fix rows
        into the same schema (the physical baseline), the projector catching up from offset 0 (fixes/s,
        and its ratio to the COPY rate), and a rebuild (findmy replay) of the whole log. Prints one JSON
        object. DIR is emptied first. Build with -c release to measure.

        usage: findmy-bench project --drain --dir DIR [--fixes 10000000] [--devices 1000]
                                    [--fixes-per-record 100] [--keep-log] [--live] [--no-geofences]
                                    [--one-connection]

        The drain of a burst as `findmy serve` folds it: the main projector and the geofence projector
        (unless --no-geofences), each on its own thread with its own connection, as services. Without
        --live the burst is in the log before they start (the worst case: the projectors were behind
        or down while it was acknowledged), so the clock starts at the last acknowledgement; with --live
        they run while one thread appends the burst (10,000 fixes per group commit), and the clock starts when the last append
        returns (durable). Prints one JSON object: seconds from the last acknowledgement until every
        fix is visible in reads (the main projection's checkpoint at the log's end, which reads with
        after_offset wait for) and until the geofence projection has it, fixes/s, the curve (seconds
        until each tenth of the burst was visible) and the load average before and after.
        --keep-log reuses DIR/log when it already holds the same burst (alternate builds over one log);
        the PostgreSQL cluster is always made afresh. --one-connection folds each transaction's history
        on the main projector's connection alone, without the helper connection serve uses for large
        transactions (the baseline of that helper, in the same build).
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["dir", "fixes", "devices", "fixes-per-record"],
            flags: ["drain", "keep-log", "live", "no-geofences", "one-connection"])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        if options.flag("drain") { return try drain(root, options) }
        let totalFixes = try options.integer("fixes", default: 5_000_000)
        let devices = try options.integer("devices", default: 1_000)
        LogBench.removeTree(root + "/log")
        if let cluster = try? EmbeddedPostgres(dataDirectory: root) { try? cluster.stop() }
        _ = system("rm -rf '\(root)/postgres'")
        try PosixFileIO().makeDirectory(root)

        let generated = try writeLog(root + "/log", totalFixes: totalFixes, devices: devices)
        allowTraversal(root)
        let cluster = try EmbeddedPostgres(dataDirectory: root)
        try cluster.start()
        defer { try? cluster.stop() }
        let client = PostgresClient(conninfo: cluster.conninfo)
        defer { client.close() }
        let reader = LogReader(directory: root + "/log")

        let copySeconds = try rawCopy(client, reader)
        let (projectSeconds, projector) = try catchUp(client, reader)
        let rssAfterProjection = LogBench.peakResidentBytes()
        let rebuildStart = monotonicMicros()
        _ = try Rebuild.run(client: client, reader: reader) { _ in }
        let rebuildSeconds = Double(monotonicMicros() - rebuildStart) / 1_000_000

        let fixes = Double(generated.fixes)
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("fixes")
        writer.int64(Int64(generated.fixes))
        writer.key("records")
        writer.int64(Int64(generated.records))
        writer.key("devices")
        writer.int64(Int64(devices))
        writer.key("log_write_fixes_per_s")
        writer.double((fixes / generated.seconds).rounded())
        writer.key("copy_fixes_per_s")
        writer.double((fixes / copySeconds).rounded())
        writer.key("projector_fixes_per_s")
        writer.double((fixes / projectSeconds).rounded())
        writer.key("projector_over_copy")
        writer.double(((copySeconds / projectSeconds) * 100).rounded() / 100)
        writer.key("projector_transactions")
        writer.int64(Int64(projector.transactions))
        writer.key("rebuild_seconds")
        writer.double((rebuildSeconds * 10).rounded() / 10)
        writer.key("peak_rss_bytes")
        writer.int64(rssAfterProjection)
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    /// Streams generated batches into a log: memory stays flat however many fixes.
    static func writeLog(
        _ directory: String, totalFixes: Int, devices: Int, fixesPerRecord: Int = 100,
        fixesPerGroupCommit: Int = 1
    ) throws -> (fixes: Int, records: Int, seconds: Double) {
        let log = try LogWriter(directory: directory)
        defer { log.close() }
        return try writeLog(
            log, totalFixes: totalFixes, devices: devices, fixesPerRecord: fixesPerRecord,
            fixesPerGroupCommit: fixesPerGroupCommit)
    }

    /// `fixesPerGroupCommit` above one record's: records queued together, one fdatasync for the
    /// group, as the server gets from many devices at once (1: one record per fdatasync).
    static func writeLog(
        _ log: LogWriter, totalFixes: Int, devices: Int, fixesPerRecord: Int, fixesPerGroupCommit: Int = 1
    ) throws -> (fixes: Int, records: Int, seconds: Double) {
        let start30DaysAgo = wallClockMicros() - 30 * 86_400_000_000
        var tracks = (0..<devices).map { TrackGenerator(seed: UInt64($0) + 7, startMicros: start30DaysAgo) }
        var written = 0
        var records = 0
        var group: [EncodedEvent] = []
        let started = monotonicMicros()
        while written < totalFixes {
            let device = records % devices
            let count = min(fixesPerRecord, totalFixes - written)
            let batch = FixBatch(
                deviceID: UInt64(device + 1), batchID: UUID128.random(), fixes: tracks[device].next(count))
            group.append(EventCodec.encode(.fixBatch(batch), receivedAtMicros: wallClockMicros()))
            written += count
            records += 1
            if group.count * fixesPerRecord >= fixesPerGroupCommit || written == totalFixes {
                _ = try log.append(batch: group)
                group.removeAll(keepingCapacity: true)
            }
        }
        return (written, records, Double(monotonicMicros() - started) / 1_000_000)
    }

    /// The COPY of every fix row, in transactions of the projector's size, into a schema of the
    /// same layout; the baseline includes reading and decoding the log, as the projector's work does.
    static func rawCopy(_ client: PostgresClient, _ reader: LogReader) throws -> Double {
        let schema = "bench_copy"
        try client.withConnection { connection in
            try Schema.migrate(connection)
            try Schema.createGeneration(schema, connection)
        }
        let store = ProjectionStore(schema: schema)
        let chunkFixes = Projector.Options().fixesPerTransactionMax
        var rows: [LocationRow] = []
        rows.reserveCapacity(chunkFixes)
        let started = monotonicMicros()
        func flush() throws {
            let now = wallClockMicros()
            try client.withConnection { connection in
                try connection.transaction { try store.copyLocations(rows, nowMicros: now, $0) }
            }
            rows.removeAll(keepingCapacity: true)
        }
        try reader.read(from: 0) { record in
            guard case .fixBatch(let batch) = try record.event() else { return true }
            if rows.count + batch.fixes.count > chunkFixes { try flush() }
            for (index, fix) in batch.fixes.enumerated() {
                rows.append(
                    LocationRow(
                        deviceID: batch.deviceID, logOffset: record.offset, fixIndex: index,
                        receivedAtMicros: record.header.receivedAtMicros, fix: fix))
            }
            return true
        }
        try flush()
        let seconds = Double(monotonicMicros() - started) / 1_000_000
        try client.withConnection { try $0.executeScript("DROP SCHEMA \(schema) CASCADE") }
        return seconds
    }

    static func catchUp(_ client: PostgresClient, _ reader: LogReader) throws -> (Double, ProjectorStatus) {
        let projector = Projector(client: client, reader: reader)
        try projector.prepare()
        let started = monotonicMicros()
        let end = reader.durableEnd()
        while try projector.step(logEnd: end) > 0 {}
        return (Double(monotonicMicros() - started) / 1_000_000, projector.status)
    }
}

extension ProjectBench {
    /// The seconds from the last acknowledgement until the projections hold each tenth of the burst.
    struct DrainCurve {
        var records: UInt64
        var tenths = [Double?](repeating: nil, count: 10)

        mutating func record(checkpoint: UInt64, at seconds: Double) {
            for tenth in 0..<10 where tenths[tenth] == nil {
                if checkpoint >= (records * UInt64(tenth + 1) + 9) / 10 { tenths[tenth] = max(0, seconds) }
            }
        }
    }

    /// The burst is appended in groups of this many fixes per fdatasync: a burst comes from many
    /// devices at once, whose reports share group commits.
    static let drainFixesPerGroupCommit = 10_000

    static func drain(_ root: String, _ options: Options) throws -> Int32 {
        let totalFixes = try options.integer("fixes", default: 10_000_000)
        let devices = try options.integer("devices", default: 1_000)
        let fixesPerRecord = try options.integer("fixes-per-record", default: 100)
        let live = options.flag("live")
        let geofences = !options.flag("no-geofences")
        let loadBefore = APIDriver.loadAverage()
        let logDirectory = root + "/log"
        if let cluster = try? EmbeddedPostgres(dataDirectory: root) { try? cluster.stop() }
        _ = system("rm -rf '\(root)/postgres'")
        let expectedRecords = UInt64((totalFixes + fixesPerRecord - 1) / fixesPerRecord)
        let reuse =
            options.flag("keep-log") && !live
            && LogReader(directory: logDirectory).durableEnd() == expectedRecords
        if !reuse { LogBench.removeTree(logDirectory) }
        try PosixFileIO().makeDirectory(root)
        var written: (fixes: Int, records: Int, seconds: Double)?
        if !reuse && !live {
            written = try writeLog(
                logDirectory, totalFixes: totalFixes, devices: devices, fixesPerRecord: fixesPerRecord,
                fixesPerGroupCommit: drainFixesPerGroupCommit)
        }
        allowTraversal(root)
        let cluster = try EmbeddedPostgres(dataDirectory: root)
        try cluster.start()
        defer { try? cluster.stop() }
        let client = PostgresClient(conninfo: cluster.conninfo)
        defer { client.close() }

        let log = live ? try LogWriter(directory: logDirectory) : nil
        defer { log?.close() }
        var mainOptions = Projector.Options()
        mainOptions.usesHelperConnection = !options.flag("one-connection")
        let main = Projector(
            client: client, reader: LogReader(directory: logDirectory, writer: log), options: mainOptions)
        var fenceOptions = Projector.Options()
        fenceOptions.yieldsTo = main  // as findmy serve runs them
        let fences =
            geofences
            ? Projector(
                client: client, reader: LogReader(directory: logDirectory, writer: log),
                projection: GeofenceProjection(), options: fenceOptions) : nil
        let services =
            [ProjectorService(projector: main)] + (fences.map { [ProjectorService(projector: $0)] } ?? [])
        for service in services { try service.start() }
        defer { for service in services.reversed() { service.stop(graceMicros: 0) } }

        if let log {
            written = try writeLog(
                log, totalFixes: totalFixes, devices: devices, fixesPerRecord: fixesPerRecord)
        }
        // The last acknowledgement: the burst is durable in the log.
        let lastAck = monotonicMicros()
        let end = LogReader(directory: logDirectory).durableEnd()
        let backlogAtAck = end - min(end, main.status.checkpoint)
        let postmaster = Self.postmasterPID(cluster)
        let watch = try watchDrain(
            main: main, fences: fences, end: end, lastAck: lastAck, postmaster: postmaster)
        printDrainReport(
            watch, totalFixes: totalFixes, fixesPerRecord: fixesPerRecord, records: end, live: live,
            helperConnection: mainOptions.usesHelperConnection, written: written, backlogAtAck: backlogAtAck,
            mainTransactions: Int64(main.status.transactions), loadBefore: loadBefore)
        return 0
    }

    /// What the drain saw: the main projection's curve and when each projection caught up.
    struct DrainWatch {
        var curve: DrainCurve
        var mainSeconds: Double?
        var fenceSeconds: Double?
        /// CPU (PostgreSQL's whole cluster, and this process) when everything is visible in reads:
        /// the geofence projector's later catch-up is not in these figures.
        var postgresCPUMicros: Int64?
        var benchCPUMicros: Int64 = 0
    }

    /// Polls the projectors every 20 ms from the last acknowledgement until each holds the log up
    /// to `end`; a projector that stops ends the bench.
    private static func watchDrain(
        main: Projector, fences: Projector?, end: UInt64, lastAck: Int64, postmaster: pid_t?
    ) throws -> DrainWatch {
        var watch = DrainWatch(curve: DrainCurve(records: end))
        while watch.mainSeconds == nil || (fences != nil && watch.fenceSeconds == nil) {
            let seconds = Double(monotonicMicros() - lastAck) / 1_000_000
            let checkpoint = main.status.checkpoint
            watch.curve.record(checkpoint: checkpoint, at: seconds)
            if watch.mainSeconds == nil && checkpoint >= end {
                watch.mainSeconds = seconds
                watch.postgresCPUMicros = postmaster.map { APIDriver.treeCPUMicros($0) }
                watch.benchCPUMicros = APIDriver.cpuMicros(getpid())
            }
            if let fences, watch.fenceSeconds == nil && fences.status.checkpoint >= end {
                watch.fenceSeconds = seconds
            }
            if let stopped = ([main] + (fences.map { [$0] } ?? [])).first(where: { $0.status.stopped }) {
                throw UsageError(
                    "the \(stopped.projection.name) projector stopped: \(stopped.status.lastError ?? "")")
            }
            usleep(20_000)
        }
        return watch
    }

    private static func printDrainReport(
        _ watch: DrainWatch, totalFixes: Int, fixesPerRecord: Int, records: UInt64, live: Bool,
        helperConnection: Bool, written: (fixes: Int, records: Int, seconds: Double)?, backlogAtAck: UInt64,
        mainTransactions: Int64, loadBefore: Double
    ) {
        let fixes = Double(totalFixes)
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("fixes")
        writer.int64(Int64(totalFixes))
        writer.key("fixes_per_record")
        writer.int64(Int64(fixesPerRecord))
        writer.key("records")
        writer.int64(Int64(records))
        writer.key("live")
        writer.bool(live)
        writer.key("helper_connection")
        writer.bool(helperConnection)
        if let written {
            writer.key("log_write_fixes_per_s")
            writer.double((Double(written.fixes) / written.seconds).rounded())
        }
        writer.key("fixes_behind_at_last_ack")
        writer.int64(Int64(min(Double(backlogAtAck) * Double(fixesPerRecord), fixes)))
        writer.key("visible_in_reads_s")
        writer.double(((watch.mainSeconds ?? 0) * 10).rounded() / 10)
        writer.key("main_fixes_per_s")
        writer.double((fixes / max(watch.mainSeconds ?? 0, 0.001)).rounded())
        if let fenceSeconds = watch.fenceSeconds {
            writer.key("geofences_caught_up_s")
            writer.double((fenceSeconds * 10).rounded() / 10)
        }
        writer.key("curve_tenths_s")
        writer.beginArray()
        for tenth in watch.curve.tenths { writer.double(((tenth ?? 0) * 10).rounded() / 10) }
        writer.endArray()
        if let postgresCPUMicros = watch.postgresCPUMicros {
            writer.key("postgres_cpu_s")
            writer.double((Double(postgresCPUMicros) / 100_000).rounded() / 10)
        }
        writer.key("bench_cpu_s")
        writer.double((Double(watch.benchCPUMicros) / 100_000).rounded() / 10)
        writer.key("main_transactions")
        writer.int64(mainTransactions)
        writer.key("load_before")
        writer.double(loadBefore)
        writer.key("load_after")
        writer.double(APIDriver.loadAverage())
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
    }

    /// The cluster's postmaster, from the first line of its `postmaster.pid`.
    static func postmasterPID(_ cluster: EmbeddedPostgres) -> pid_t? { postmasterPID(pgData: cluster.pgData) }

    /// The postmaster of the cluster in `pgData`, from the first line of its `postmaster.pid`.
    static func postmasterPID(pgData: String) -> pid_t? {
        guard let file = fopen(pgData + "/postmaster.pid", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 64)
        guard fgets(&buffer, 64, file) != nil else { return nil }
        let line = String(
            decoding: buffer.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return pid_t(line)
    }
}
