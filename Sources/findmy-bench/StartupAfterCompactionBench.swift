import CLI
import Compactor
import Core
import Events
import Identity
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench startup-compacted --dir DIR`: how long the start right after a compaction takes,
/// with the snapshot a compaction leaves (this build) and with the stale snapshot that builds
/// before it left (docs/benchmarks.md, "Start-up right after a compaction").
enum StartupAfterCompactionBench {
    static let command = Command(
        name: "startup-compacted",
        summary: "start-up right after a compaction: stale snapshot vs the compactor's"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench startup-compacted --dir DIR --fixes-total N [--fixes-per-record 1]
                                              [--devices 1000] [--rounds 3]

        Writes a log of N fixes in records of FIXES-PER-RECORD fixes from DEVICES devices to DIR/log
        (DIR/log must not exist: the log is compacted), snapshots it as a server's stop would, then
        erases the history of device 1 (whose batches are in every segment) and runs the compactor,
        which rewrites every segment and writes a snapshot of the compacted log. Prints the run's
        figures, then measures, alternately in one process, ROUNDS times each, a start with the
        snapshot taken before the compaction (what a build without the compactor's snapshot finds:
        the snapshot is stale, deleted, and the log folded whole) and a start with the compactor's
        snapshot. One JSON object per line; page cache warm. Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["dir", "fixes-total", "fixes-per-record", "devices", "rounds"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let directory = try options.required("dir", environment: nil)
        let fixesTotal = try options.integer("fixes-total", default: 1_000_000)
        let fixesPerRecord = try options.integer("fixes-per-record", default: 1)
        let devices = try options.integer("devices", default: 1000)
        let rounds = try options.integer("rounds", default: 3)
        precondition(fixesTotal > 0 && fixesPerRecord > 0 && devices > 1 && rounds > 0)
        let io = PosixFileIO()
        try io.makeDirectory(directory)
        let log = directory + "/log"
        if (try? io.list(log)) != nil {
            throw UsageError("\(log) exists: give a new --dir (the log is compacted)")
        }
        var started = monotonicMicros()
        let records = try StartupBench.write(
            log, fixesTotal: fixesTotal, fixesPerRecord: fixesPerRecord, devices: devices)
        printLine(
            "{\"wrote_records\":\(records),\"fixes\":\(fixesTotal),\"seconds\":\((monotonicMicros() - started) / 1_000_000)}"
        )
        let current = RegistrySnapshotStore(directory: directory + "/snapshots")
        let stale = RegistrySnapshotStore(directory: directory + "/snapshots-stale")
        let staleBytes: [UInt8]
        let staleName: String
        do {
            let writer = try LogWriter(directory: log)
            defer { writer.close() }
            let identity = try IdentityService(log: writer, snapshots: current)
            let snapshotter = RegistrySnapshotter(registry: identity.store, store: current)
            guard case .written(let path, let offset, _, _)? = snapshotter.snapshotNow() else {
                throw UsageError("no snapshot was written")
            }
            staleBytes = try readAll(path)
            staleName = RegistrySnapshotFormat.fileName(offset: offset)
            _ = try writer.append(.historyErased(HistoryErased(deviceID: 1)))
            let refoldMicros = Mutex<Int64>(0)
            let compactor = Compactor(
                writer: writer, client: nil, options: Compactor.Options(),
                snapshotAfterRewrite: { stop in
                    let started = monotonicMicros()
                    defer { refoldMicros.withLock { $0 = monotonicMicros() - started } }
                    return snapshotter.snapshotAfterCompaction(stop: stop)
                })
            started = monotonicMicros()
            let report = try compactor.run()
            let total = monotonicMicros() - started
            let snapshot = refoldMicros.withLock { $0 }
            printLine(
                "{\"compaction\":{\"segments_rewritten\":\(report.log.segmentsRewritten),"
                    + "\"fixes_removed\":\(report.log.fixesRemoved),\"millis\":\(total / 1000),"
                    + "\"log_millis\":\((total - snapshot) / 1000),\"snapshot_millis\":\(snapshot / 1000),"
                    + "\"registry_snapshot_offset\":\(report.registrySnapshotOffset.map { "\($0)" } ?? "null")}}"
            )
        }
        for round in 1...rounds {
            // The stale snapshot is deleted by the start that rejects it: put it back each round.
            try io.makeDirectory(stale.directory)
            try writeAll(stale.directory + "/" + staleName, staleBytes)
            for (variant, store) in [("stale_snapshot", stale), ("compactor_snapshot", current)] {
                let started = monotonicMicros()
                let writer = try LogWriter(directory: log)
                let identity = try IdentityService(log: writer, snapshots: store)
                let millis = Double(monotonicMicros() - started) / 1000
                writer.close()
                printLine(
                    "{\"round\":\(round),\"variant\":\"\(variant)\",\"fixes\":\(fixesTotal),"
                        + "\"fixes_per_record\":\(fixesPerRecord),"
                        + "\"snapshot_offset\":\(identity.store.startReport.snapshotOffset.map { "\($0)" } ?? "null"),"
                        + "\"replayed\":\(identity.store.startReport.recordsReplayed),\"millis\":\(millis)}")
            }
        }
        return 0
    }

    static func readAll(_ path: String) throws -> [UInt8] {
        let io = PosixFileIO()
        let fd = try io.open(path, flags: O_RDONLY, mode: 0)
        defer { io.close(fd) }
        return try io.read(fd, count: try io.fileSize(fd, path: path), at: 0, path: path)
    }

    static func writeAll(_ path: String, _ bytes: [UInt8]) throws {
        let io = PosixFileIO()
        let fd = try io.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        defer { io.close(fd) }
        try io.writeAll(fd, bytes, at: 0, path: path)
    }
}
