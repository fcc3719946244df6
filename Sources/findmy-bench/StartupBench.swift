import CLI
import Events
import Identity
import Synchronization
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench startup --dir DIR`: how long a start takes to rebuild the registry, against the
/// log's size, with and without a registry snapshot (docs/benchmarks.md, "Start-up").
enum StartupBench {
    static let command = Command(
        name: "startup", summary: "start-up time (log open + registry) with and without a snapshot"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench startup --dir DIR --fixes-total N [--fixes-per-record 1] [--devices 1000]
                                    [--rounds 3] [--lag-records L] [--in-flight 8192]
                                    [--variants full_scan,snapshot_at_end,snapshot_lagging]

        Writes a log of N fixes in records of FIXES-PER-RECORD fixes from DEVICES enrolled devices to
        DIR/log (once; an existing log is reused), then measures, alternately in one process, ROUNDS
        times each: a start without snapshots (the log opened and every record folded: what every
        build before registry snapshots does), a start from a snapshot at the log's end (after a
        clean stop), and a start from a snapshot LAG-RECORDS behind the end (a crash just before the
        snapshotter's next write; default: the snapshotter's limits, 100,000 records or 2,000,000
        fixes, whichever comes first). IN-FLIGHT bounds the appends queued at once while writing:
        since log format version 2 it bounds the requests per group record too (64 writes a log grouped
        as 64 connections would). Prints one JSON object per line. Page cache warm: the log was just
        written or read. VARIANTS picks the starts measured (a full scan of 100 M single-fix records
        takes minutes; the fold that prepares the snapshots, printed as `prepare_fold_millis`, is
        one). Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: [
                "dir", "fixes-total", "fixes-per-record", "devices", "rounds", "lag-records", "in-flight",
                "variants",
            ],
            flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let directory = try options.required("dir", environment: nil)
        let fixesTotal = try options.integer("fixes-total", default: 1_000_000)
        let fixesPerRecord = try options.integer("fixes-per-record", default: 1)
        let devices = try options.integer("devices", default: 1000)
        let rounds = try options.integer("rounds", default: 3)
        let inFlightMax = try options.integer("in-flight", default: 8192)
        // The most a crash can leave after the newest snapshot, by the snapshotter's own limits.
        let schedule = RegistrySnapshotter.Schedule()
        let lagDefault = min(
            schedule.recordsBetweenSnapshotsMax,
            schedule.fixesBetweenSnapshotsMax / UInt64(max(1, fixesPerRecord)))
        let lagRecords = UInt64(try options.integer("lag-records", default: Int(lagDefault)))
        precondition(fixesTotal > 0 && fixesPerRecord > 0 && devices > 0 && rounds > 0 && inFlightMax > 0)
        try PosixFileIO().makeDirectory(directory)
        let log = directory + "/log"
        if (try? PosixFileIO().list(log))?.contains(where: { $0.hasSuffix(".seg") }) != true {
            let started = monotonicMicros()
            let records = try write(
                log, fixesTotal: fixesTotal, fixesPerRecord: fixesPerRecord, devices: devices,
                inFlightMax: inFlightMax)
            printLine(
                "{\"wrote_records\":\(records),\"fixes\":\(fixesTotal),\"seconds\":\((monotonicMicros() - started) / 1_000_000)}"
            )
        }
        let clean = RegistrySnapshotStore(directory: directory + "/snapshots-clean")
        let lagged = RegistrySnapshotStore(directory: directory + "/snapshots-lagged")
        let variants = Set(
            (options.value("variants") ?? "full_scan,snapshot_at_end,snapshot_lagging").split(separator: ",")
                .map(String.init))
        let prepareStarted = monotonicMicros()
        let (records, bytes) = try prepareSnapshots(log, clean: clean, lagged: lagged, lagRecords: lagRecords)
        printLine("{\"prepare_fold_millis\":\((monotonicMicros() - prepareStarted) / 1000)}")
        for round in 1...rounds {
            for (variant, store) in [
                ("full_scan", nil), ("snapshot_at_end", clean), ("snapshot_lagging", lagged),
            ] where variants.contains(variant) {
                let started = monotonicMicros()
                let writer = try LogWriter(directory: log)
                let identity = try IdentityService(log: writer, snapshots: store)
                let millis = Double(monotonicMicros() - started) / 1000
                writer.close()
                printLine(
                    "{\"round\":\(round),\"variant\":\"\(variant)\",\"records\":\(records),\"fixes\":\(fixesTotal),"
                        + "\"fixes_per_record\":\(fixesPerRecord),\"snapshot_bytes\":\(store == nil ? 0 : bytes),"
                        + "\"replayed\":\(identity.startReport.recordsReplayed),\"millis\":\(millis)}")
            }
        }
        return 0
    }

    /// Users, enrolled devices with tokens, then fix batches round-robin over the devices, appended
    /// without waiting for each (group commit), at most `inFlightMax` outstanding.
    static func write(
        _ log: String, fixesTotal: Int, fixesPerRecord: Int, devices: Int, inFlightMax: Int = 8192
    )
        throws
        -> Int
    {
        let writer = try LogWriter(directory: log)
        defer { writer.close() }
        let users = max(1, devices / 4)
        for user in 1...users {
            _ = try writer.append(
                .userCreated(
                    UserCreated(
                        userID: UInt64(user), name: "user\(user)", role: .member,
                        tokenHash: bytes(UInt64(user)))))
        }
        for device in 1...devices {
            let id = UInt64(device)
            _ = try writer.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: id, userID: UInt64(device % users + 1), deviceUUID: UUID128.random(),
                        name: "phone \(device)", platform: "ios", model: "iPhone")))
            _ = try writer.append(
                .deviceTokenIssued(DeviceTokenIssued(deviceID: id, tokenHash: bytes(id << 20))))
        }
        let inFlight = Atomic<Int>(0)
        let failed = Atomic<Bool>(false)
        var tracks = (0..<devices).map { TrackGenerator(seed: UInt64($0), startMicros: wallClockMicros()) }
        let records = fixesTotal / fixesPerRecord
        for index in 0..<records {
            while inFlight.load(ordering: .acquiring) >= inFlightMax { sched_yield() }
            let device = index % devices
            let batch = FixBatch(
                deviceID: UInt64(device + 1), batchID: UUID128.random(),
                fixes: tracks[device].next(fixesPerRecord))
            inFlight.add(1, ordering: .relaxed)
            writer.append(EventCodec.encode(.fixBatch(batch), receivedAtMicros: wallClockMicros())) {
                result in
                if case .failure = result { failed.store(true, ordering: .relaxed) }
                inFlight.subtract(1, ordering: .releasing)
            }
        }
        while inFlight.load(ordering: .acquiring) > 0 { sched_yield() }
        precondition(!failed.load(ordering: .relaxed), "an append failed")
        return records + users + 2 * devices
    }

    /// One snapshot at the log's end and one `lagRecords` before it; returns the log's record count
    /// and the clean snapshot's size.
    static func prepareSnapshots(
        _ log: String, clean: RegistrySnapshotStore, lagged: RegistrySnapshotStore, lagRecords: UInt64
    ) throws -> (UInt64, Int) {
        let writer = try LogWriter(directory: log)
        defer { writer.close() }
        let reader = LogReader(directory: log, writer: writer)
        let end = writer.durableEnd
        let logID = try reader.logID() ?? .zero
        let capacity = IdentityLimits().recentBatchesPerDeviceMax
        let lagEnd = end - min(end, lagRecords)
        let (atLag, _) = try Registry.replay(
            reader, into: Registry(recentBatchesPerDeviceMax: capacity), from: 0, upTo: lagEnd)
        try lagged.write(
            RegistrySnapshot(
                offset: lagEnd, logID: logID, segments: try reader.segmentIdentities(below: lagEnd),
                registry: atLag))
        let (atEnd, _) = try Registry.replay(reader, into: atLag, from: lagEnd, upTo: end)
        let (_, bytes) = try clean.write(
            RegistrySnapshot(
                offset: end, logID: logID, segments: try reader.segmentIdentities(below: end), registry: atEnd
            ))
        return (end, bytes)
    }

    static func bytes(_ seed: UInt64) -> [UInt8] {
        (0..<32).map {
            UInt8(truncatingIfNeeded: (seed &* 0x9E37_79B9_7F4A_7C15) >> UInt64($0 % 8 * 8) &+ UInt64($0))
        }
    }
}
