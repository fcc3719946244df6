import CLI
import Core
import Events
import Identity
import Ingest
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench snapshot-ingest`: single-fix report latency while the registry snapshotter writes
/// snapshots, against the same load without (docs/benchmarks.md, "Ingest while a registry
/// snapshot is written").
enum SnapshotIngestBench {
    static let command = Command(
        name: "snapshot-ingest",
        summary: "single-fix report latency with and without a registry snapshot being written"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench snapshot-ingest --dir DIR [--records-before 300000] [--devices 1000]
                                            [--connections 64] [--windows 6] [--window-seconds 3] [--nice 10]

        Writes RECORDS-BEFORE single-fix records from DEVICES devices to DIR/log (once; reused), so that
        every device's ring of recent batch ids is full and a snapshot is as large as a server's (13.5 MB
        for 1,000 devices). Then opens the log as `findmy serve` does (IngestService from the snapshots
        in DIR/snapshots, a RegistrySnapshotter) and runs CONNECTIONS threads, each submitting single-fix
        reports of its own device through the report path (`IngestService.submit`: fix rules, registry,
        group commit with fdatasync; no HTTP) one after the other. Windows of WINDOW-SECONDS alternate:
        `idle` (no snapshot) and `snapshot` (another thread writes snapshots back to back, each a fold of
        the records since the last one, then the 13.5 MB file written and fsynced: a snapshot is being
        written for the whole window, at NICE steps below the reports' threads as the server's
        snapshotter thread runs), WINDOWS of each. Prints one JSON object per window (p50, p99 of
        the report latency, reports/s, snapshots written), then the median p99 of each kind and their
        ratio. Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: ["dir", "records-before", "devices", "connections", "windows", "window-seconds", "nice"],
            flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let directory = try options.required("dir", environment: nil)
        let recordsBefore = try options.integer("records-before", default: 300_000)
        let devices = try options.integer("devices", default: 1000)
        let connections = try options.integer("connections", default: 64)
        let windows = try options.integer("windows", default: 6)
        let windowMicros = Int64(try options.integer("window-seconds", default: 3)) * 1_000_000
        let niceness = Int32(try options.integer("nice", default: 10))
        precondition(recordsBefore > 0 && devices >= connections && connections > 0 && windows > 0)
        try PosixFileIO().makeDirectory(directory)
        let logPath = directory + "/log"
        if (try? PosixFileIO().list(logPath))?.contains(where: { $0.hasSuffix(".seg") }) != true {
            _ = try StartupBench.write(
                logPath, fixesTotal: recordsBefore, fixesPerRecord: 1, devices: devices)
        }
        let log = try LogWriter(directory: logPath)
        defer { log.close() }
        let store = RegistrySnapshotStore(directory: directory + "/snapshots")
        let service = try IngestService(log: log, snapshots: store)
        let snapshotter = RegistrySnapshotter(registry: service.identity.store, store: store)
        // One snapshot first, so that every `snapshot` window's writes fold only that window's records.
        _ = snapshotter.snapshotNow()

        let window = Atomic<Int>(0)  // 1-based; 0: not yet; -1: done
        let samples = Mutex<[Int: [Int64]]>([:])
        var threads: [pthread_t] = []
        for connection in 0..<connections {
            threads.append(
                spawnThread {
                    submitReports(asDevice: UInt64(connection + 1), service, window: window, samples: samples)
                })
        }
        // This thread writes the snapshots: at the snapshotter thread's priority in the server.
        lowerCurrentThreadPriority(by: niceness)
        var written: [Int: Int] = [:]
        for index in 1...(2 * windows) {
            let writing = index % 2 == 0
            window.store(index, ordering: .releasing)
            let end = monotonicMicros() + windowMicros
            var count = 0
            if writing {
                while monotonicMicros() < end {
                    if case .written? = snapshotter.snapshotNow() { count += 1 }
                }
            } else {
                usleep(UInt32(windowMicros))
            }
            written[index] = count
        }
        window.store(-1, ordering: .releasing)
        for thread in threads { pthread_join(thread, nil) }

        printWindows(samples.withLock { $0 }, written: written, windows: windows, windowMicros: windowMicros)
        return 0
    }

    /// One connection: single-fix reports of `device`, one after the other, each timed into the
    /// window it started in, from the first window until the last ends.
    private static func submitReports(
        asDevice device: UInt64, _ service: IngestService, window: borrowing Atomic<Int>,
        samples: borrowing Mutex<[Int: [Int64]]>
    ) {
        var local: [Int: [Int64]] = [:]
        var serial: UInt64 = 0
        while window.load(ordering: .acquiring) == 0 { sched_yield() }
        while true {
            let current = window.load(ordering: .acquiring)
            if current < 0 { break }
            serial += 1
            let started = monotonicMicros()
            let report = ClientReport(
                deviceID: device,
                batchID: UUID128(high: device << 32 | 0x5A, low: serial),
                clientProtocol: .native,
                items: [
                    ClientReport.Item(
                        index: 0,
                        fix: Fix(
                            latitude: 52.5 + Double(serial % 1000) / 1e5, longitude: 13.4,
                            accuracyMeters: 12, source: "significant",
                            recordedAtMicros: wallClockMicros()))
                ])
            let outcome = service.submitAndWait(report)
            guard case .stored = outcome else {
                fatalError("a report was not stored: \(outcome)")
            }
            local[current, default: []].append(monotonicMicros() - started)
        }
        samples.withLock { all in
            for (index, values) in local { all[index, default: []] += values }
        }
    }

    /// One line per window, then the median p99 of each kind and their ratio.
    private static func printWindows(
        _ all: [Int: [Int64]], written: [Int: Int], windows: Int, windowMicros: Int64
    ) {
        var p99s: [String: [Int64]] = [:]
        for index in 1...(2 * windows) {
            let kind = index % 2 == 0 ? "snapshot" : "idle"
            let values = (all[index] ?? []).sorted()
            guard !values.isEmpty else { continue }
            let p99 = values[min(values.count - 1, Int((Double(values.count) * 0.99).rounded(.up)) - 1)]
            let p50 = values[values.count / 2]
            p99s[kind, default: []].append(p99)
            printLine(
                "{\"window\":\(index),\"kind\":\"\(kind)\",\"reports\":\(values.count),"
                    + "\"reports_per_second\":\(Int64(values.count) * 1_000_000 / windowMicros),"
                    + "\"p50_ms\":\(Double(p50) / 1000),\"p99_ms\":\(Double(p99) / 1000),"
                    + "\"snapshots_written\":\(written[index] ?? 0)}")
        }
        let idle = Double(median(p99s["idle"] ?? []) ?? 0) / 1000
        let writing = Double(median(p99s["snapshot"] ?? []) ?? 0) / 1000
        printLine(
            "{\"median_p99_idle_ms\":\(idle),\"median_p99_snapshot_ms\":\(writing),"
                + "\"ratio\":\(idle > 0 ? writing / idle : 0)}")
    }
}
