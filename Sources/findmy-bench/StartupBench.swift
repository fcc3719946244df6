import CLI
import Core
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
                                    [--rounds 3] [--lag-records L] [--in-flight 64]
                                    [--variants full_scan,snapshot_at_end,snapshot_lagging]
                                    [--group-delay-micros 200]

        Writes a log of N fixes in records of FIXES-PER-RECORD fixes from DEVICES enrolled devices to
        DIR/log (once; an existing log is reused), then measures, alternately in one process, ROUNDS
        times each: a start without snapshots (the log opened and every record folded: what every
        build before registry snapshots does), a start from a snapshot at the log's end (after a
        clean stop), and a start from a snapshot LAG-RECORDS behind the end (a crash just before the
        snapshotter's next write; default: the snapshotter's limits, 100,000 records or 2,000,000
        fixes, whichever comes first). IN-FLIGHT is the requests per group record written (64: as a
        server writes them after commit groups of 64 connections); the generator does not fdatasync
        each group (one sync at the end), so a 100 M-record log takes minutes, not an hour; each
        group's leader waits GROUP-DELAY-MICROS for the group to fill (0: groups are what is queued
        when the leader gets to it, which may be fewer). Prints one JSON object per line. Page cache warm: the log was just
        written or read. VARIANTS picks the starts measured (a full scan of 100 M single-fix records
        takes minutes; the fold that prepares the snapshots, printed as `prepare_fold_millis`, is
        one). Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: [
                "dir", "fixes-total", "fixes-per-record", "devices", "rounds", "lag-records", "in-flight",
                "variants", "group-delay-micros",
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
        let inFlightMax = try options.integer("in-flight", default: 64)
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
                inFlightMax: inFlightMax,
                groupDelayMicros: try options.integer("group-delay-micros", default: 200))
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
                        + "\"replayed\":\(identity.store.startReport.recordsReplayed),\"millis\":\(millis)}")
            }
        }
        return 0
    }

    /// Users, enrolled devices with tokens, then fix batches round-robin over the devices, written
    /// as the server writes them after its commit groups: about `inFlightMax` requests per v2 group
    /// record, through the writer's own group commit (the same records, frames and seals as a
    /// server's). What makes it fast (100 M single-fix records took 52 min before): the writer
    /// does not fdatasync each group (`UnsyncedFileIO`; one `sync` at the end: a crash while
    /// generating leaves a log to delete, never one to measure); the producer never waits for a
    /// group to be written (up to four groups queued), and a group's size is set by its bytes
    /// (`groupBytesMax`, from the size of one encoded request), the leader waiting
    /// `groupCommitDelayMicros` for the queue to hold a whole group; batch ids come from a seeded
    /// generator instead of a system call each.
    static func write(
        _ log: String, fixesTotal: Int, fixesPerRecord: Int, devices: Int, inFlightMax: Int = 64,
        groupDelayMicros: Int = 200
    )
        throws
        -> Int
    {
        var tracks = (0..<devices).map { TrackGenerator(seed: UInt64($0), startMicros: wallClockMicros()) }
        var ids = SeededGenerator(seed: 0x5EED_1D5)
        func encoded(_ device: Int) -> EncodedEvent {
            let batch = FixBatch(
                deviceID: UInt64(device + 1), batchID: UUID128.random(using: &ids),
                fixes: tracks[device].next(fixesPerRecord))
            return EventCodec.encode(.fixBatch(batch), receivedAtMicros: wallClockMicros())
        }
        var sampleTrack = TrackGenerator(seed: UInt64.max, startMicros: wallClockMicros())
        let sample = EventCodec.encode(
            .fixBatch(FixBatch(deviceID: 1, batchID: .random(), fixes: sampleTrack.next(fixesPerRecord))),
            receivedAtMicros: wallClockMicros())
        // What the writer counts per request against `groupBytesMax`: the member's payload plus
        // GroupRecord.memberDirectoryBytes (2 + 2 + 2 + 8 * 8 + 16, internal to Events).
        let requestBytes = GroupRecord.member(sample).payload.count + 86
        var options = LogOptions()
        options.io = UnsyncedFileIO()
        options.groupBytesMax = inFlightMax * requestBytes + requestBytes / 2
        options.groupCommitDelayMicros = groupDelayMicros
        let writer = try LogWriter(directory: log, options: options)
        defer {
            writer.close()
            sync()
        }
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
        let registryGroups = writer.statistics.groupCommits
        let inFlight = AppendsInFlight()
        let records = fixesTotal / fixesPerRecord
        for index in 0..<records {
            let event = encoded(index % devices)
            inFlight.add(waitingBelow: 4 * inFlightMax)
            writer.append(event) { result in
                inFlight.done(failed: { if case .failure = result { true } else { false } }())
            }
        }
        inFlight.waitUntilEmpty()
        precondition(!inFlight.failed, "an append failed")
        let statistics = writer.statistics
        let groups = statistics.groupCommits - registryGroups
        printLine(
            "{\"fix_batch_group_records\":\(groups),\"requests_per_group\":"
                + "\(Double(records) / Double(max(1, groups)))}")
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

/// Appends queued and not yet written (durable, but for `UnsyncedFileIO`).
final class AppendsInFlight: @unchecked Sendable {
    private let lock = ConditionLock()
    private var count = 0
    private(set) var failed = false

    /// Waits until fewer than `limit` are in flight, then counts one more.
    func add(waitingBelow limit: Int) {
        lock.withLock {
            while count >= limit { lock.wait() }
            count += 1
        }
    }

    func waitUntilEmpty() {
        lock.withLock {
            while count > 0 { lock.wait() }
        }
    }

    func done(failed appendFailed: Bool) {
        lock.withLock {
            count -= 1
            if appendFailed { failed = true }
            lock.broadcast()
        }
    }
}

/// The file operations of `PosixFileIO` without `fdatasync` and `fsync`: for generating benchmark
/// logs only, which are synced once at the end (`sync`). Never for a log that acknowledges anything.
struct UnsyncedFileIO: FileIO {
    let posix = PosixFileIO()
    func open(_ path: String, flags: Int32, mode: mode_t) throws -> Int32 {
        try posix.open(path, flags: flags, mode: mode)
    }
    func close(_ fd: Int32) { posix.close(fd) }
    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String) throws -> Int {
        try posix.pwrite(fd, bytes, at: offset, path: path)
    }
    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int, path: String) throws
        -> Int
    {
        try posix.pread(fd, into: buffer, at: offset, path: path)
    }
    func fdatasync(_ fd: Int32, path: String) throws {}
    func fsync(_ fd: Int32, path: String) throws {}
    func ftruncate(_ fd: Int32, size: Int, path: String) throws {
        try posix.ftruncate(fd, size: size, path: path)
    }
    func fileSize(_ fd: Int32, path: String) throws -> Int { try posix.fileSize(fd, path: path) }
    func rename(_ from: String, _ to: String) throws { try posix.rename(from, to) }
    func unlink(_ path: String) throws { try posix.unlink(path) }
    func list(_ directory: String) throws -> [String] { try posix.list(directory) }
    func makeDirectory(_ path: String) throws { try posix.makeDirectory(path) }
    func lockExclusive(_ fd: Int32, path: String) throws -> Bool { try posix.lockExclusive(fd, path: path) }
}
