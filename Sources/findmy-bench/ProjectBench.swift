import CLI
import Events
import JSON
import Postgres
import Projector
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench project --dir DIR [--fixes N] [--devices N]`: the projector catching up on a large
/// realistic log, against the raw COPY of the same rows into the same schema, measured in one run.
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
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["dir", "fixes", "devices"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
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
    static func writeLog(_ directory: String, totalFixes: Int, devices: Int) throws
        -> (fixes: Int, records: Int, seconds: Double)
    {
        let log = try LogWriter(directory: directory)
        defer { log.close() }
        let start30DaysAgo = wallClockMicros() - 30 * 86_400_000_000
        var tracks = (0..<devices).map { TrackGenerator(seed: UInt64($0) + 7, startMicros: start30DaysAgo) }
        var written = 0
        var records = 0
        let started = monotonicMicros()
        while written < totalFixes {
            let device = records % devices
            let count = min(100, totalFixes - written)
            let batch = FixBatch(
                deviceID: UInt64(device + 1), batchID: UUID128.random(), fixes: tracks[device].next(count))
            try log.append(.fixBatch(batch))
            written += count
            records += 1
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
