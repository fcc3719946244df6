import Events
import Synchronization
import Threads

/// A registry folded from a log up to `offset`, and the identities of the segment files it was
/// folded from (every segment with a base below `offset`): what a snapshot stores besides the
/// registry, and what tells a fold that compaction changed its input since.
package struct RegistryFold: Sendable {
    package var registry: Registry
    package var offset: UInt64
    package var segments: [SegmentIdentity]
    /// Records applied below `offset`: what rule 4J checks on a shared log (0 and unused on a local one).
    package var records: UInt64 = 0
}

/// How the registry was rebuilt at start: from which snapshot, how much log followed it, and
/// which snapshots were passed over and why (the `registry_rebuilt` log line).
public struct RegistryStartReport: Sendable {
    /// The offset of the snapshot used; nil for a full scan of the log.
    public var snapshotOffset: UInt64?
    /// Records folded after the snapshot (or from the log's start).
    public var recordsReplayed: UInt64
    public var skipped: [RegistrySnapshotStore.LoadReport.Skipped]
    /// Set when the snapshot directory could not be read; the registry was rebuilt by a full scan.
    public var snapshotError: String?
}

extension Registry {
    /// The registry of `reader`'s log: the newest valid snapshot of `store` and the records after
    /// it, or every record when there is none (docs/snapshots.md, "Start-up"). A snapshot that cannot
    /// be read for any reason costs a full scan, never a start.
    package static func rebuild(
        reader: LogReader, store: RegistrySnapshotStore?, recentBatchesPerDeviceMax: Int
    ) throws -> (RegistryFold, RegistryStartReport) {
        var snapshot: RegistrySnapshot?
        var report = RegistryStartReport(snapshotOffset: nil, recordsReplayed: 0, skipped: [])
        if let store {
            do {
                let (loaded, load) = try store.loadNewestValid(
                    reader: reader, recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
                snapshot = loaded
                report.skipped = load.skipped
            } catch {
                report.snapshotError = "\(error)"
            }
        }
        let start = snapshot?.offset ?? 0
        let (registry, reached) = try replay(
            reader,
            into: snapshot?.registry ?? Registry(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax),
            from: start)
        report.snapshotOffset = snapshot?.offset
        report.recordsReplayed = reached - min(start, reached)
        let fold = RegistryFold(
            registry: registry, offset: reached, segments: try reader.segmentIdentities(below: reached))
        return (fold, report)
    }
}

/// Writes registry snapshots while the server runs (docs/snapshots.md): every
/// `recordsBetweenSnapshotsMax` records or `fixesBetweenSnapshotsMax` fixes, or every
/// `snapshotIntervalMicros` when anything arrived,
/// and once more at stop (folding for at most half the grace period: what it leaves, the next start
/// folds). It folds its own copy of the registry from the durable log rather than
/// copying the live one: the live registry applies concurrent reports in completion order, so no
/// instant of it is guaranteed to be the fold of a log prefix, and the copy is, by construction.
public final class RegistrySnapshotter: Service {
    public struct Schedule: Sendable {
        /// A snapshot is written once this many records arrived since the last one...
        public var recordsBetweenSnapshotsMax: UInt64 = 100_000
        /// ...or once this many fixes did (a start's replay of 100-fix records costs per fix)...
        public var fixesBetweenSnapshotsMax: UInt64 = 2_000_000
        /// ...or once this long passed with anything new.
        public var snapshotIntervalMicros: Int64 = 60_000_000
        /// How often the thread compares the log's durable end with the last snapshot.
        public var checkIntervalMicros: Int64 = 1_000_000

        public init() {}

        /// Whether a snapshot is due after `records` records (offsets), `fixes` fixes and `micros`
        /// since the last one; the caller checks that anything is new at all.
        func isDue(records: UInt64, fixes: UInt64, micros: Int64) -> Bool {
            records >= recordsBetweenSnapshotsMax || fixes >= fixesBetweenSnapshotsMax
                || micros >= snapshotIntervalMicros
        }
    }

    /// What a round did, for the server's log.
    public enum Outcome: Sendable, Equatable {
        case written(path: String, offset: UInt64, bytes: Int, millis: Int64)
        /// Compaction rewrote or removed a segment this fold had read: it starts again from the
        /// log's first record (on this thread, not holding up anything else).
        case refolding(reason: String)
        case failed(String)
    }

    public let name = "snapshots"
    let reader: LogReader
    public let store: RegistrySnapshotStore
    public let schedule: Schedule
    let monotonicClock: @Sendable () -> Int64
    let report: @Sendable (Outcome) -> Void
    private let progress: Mutex<Progress>
    /// Callers of `snapshotAfterCompaction` waiting for `progress`: the thread's own fold gives way
    /// to them, so that the refold after a rewrite runs where the compactor's stop can end it.
    private let compactorsWaiting = Atomic<Int>(0)
    /// A fold looks at whether it must stop once per this many records: a stop waits for at most
    /// this many (about a millisecond of a single-fix refold on the reference machine).
    static let recordsPerStopCheck = 256
    /// How much lower than the server's the thread's CPU priority is (nice steps).
    static let threadNiceness: Int32 = 10

    struct Progress {
        /// Writes `snapshot` (of this fold) to `store` and starts the next interval from it.
        mutating func write(_ snapshot: RegistrySnapshot, to store: RegistrySnapshotStore, nowMicros: Int64)
            throws
            -> Outcome
        {
            let started = monotonicMicros()
            let (path, bytes) = try store.write(snapshot)
            lastOffset = snapshot.offset
            lastMicros = nowMicros
            fixesSinceSnapshot = 0
            return .written(
                path: path, offset: snapshot.offset, bytes: bytes,
                millis: (monotonicMicros() - started) / 1000)
        }

        var fold: RegistryFold
        /// The offset and time of the last snapshot written (or loaded at start).
        var lastOffset: UInt64
        var lastMicros: Int64
        var fixesSinceSnapshot: UInt64 = 0
        /// Set by a refold: the snapshots on disk may list rewritten segments (or, of a stream, hold
        /// messages retention erased). They are removed
        /// before the next write, which may stand below them (a refold cut short by a stop) and
        /// would otherwise be the one pruned.
        var staleOnDisk = false
    }
    private let worker = StoppableThread()

    /// Continues from the fold `registry` was rebuilt with; call once per service.
    public init(
        registry: RegistryStore, store: RegistrySnapshotStore, schedule: Schedule = Schedule(),
        monotonicClock: @escaping @Sendable () -> Int64 = monotonicMicros,
        report: @escaping @Sendable (Outcome) -> Void = { _ in }
    ) {
        precondition(
            schedule.recordsBetweenSnapshotsMax > 0 && schedule.fixesBetweenSnapshotsMax > 0
                && schedule.snapshotIntervalMicros > 0
                && schedule.checkIntervalMicros > 0)
        guard let fold = registry.takeStartFold() else {
            preconditionFailure("one RegistrySnapshotter per RegistryStore")
        }
        reader = LogReader(directory: registry.writer.directory, writer: registry.writer)
        self.store = store
        self.schedule = schedule
        self.monotonicClock = monotonicClock
        self.report = report
        let lastOffset = registry.startReport.snapshotOffset ?? 0
        progress = Mutex(Progress(fold: fold, lastOffset: lastOffset, lastMicros: monotonicClock()))
    }

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    public func start() throws {
        worker.start { [self] stop in
            // Background work: its folds (a whole refold after a compaction) and writes must not
            // take the CPU from the reports arriving meanwhile.
            lowerCurrentThreadPriority(by: Self.threadNiceness)
            while !stop.wait(micros: schedule.checkIntervalMicros) {
                let giveWay = { stop.isRequested || self.compactorsWaiting.load(ordering: .relaxed) > 0 }
                if let outcome = round(force: false, shouldStop: giveWay) { report(outcome) }
            }
        }
    }

    /// Stops the thread, then writes a last snapshot of what is durable, folding for at most half
    /// of `graceMicros`: after a compaction's refold was cut short that is not all of the log, and
    /// the next start folds the rest (docs/snapshots.md, "Stopping during a refold").
    public func stop(graceMicros: Int64) {
        worker.stop()
        let deadline = monotonicClock() + graceMicros / 2
        let outcome = round(
            force: true, shouldStop: { self.monotonicClock() >= deadline }, writeWhenStopped: true)
        if let outcome { report(outcome) }
    }

    /// Folds up to the durable end and writes a snapshot there if anything is new: what `stop`
    /// does, for tests and tools.
    @discardableResult
    public func snapshotNow() -> Outcome? { round(force: true) }

    /// For the compactor, right after it rewrote or deleted segments and before it reports done:
    /// refolds from the log's first record (the fold notices the changed segments), writes a
    /// snapshot of the compacted log, reports the outcome, and returns the snapshot's offset (nil
    /// when none was written). Without it the next start would fold the whole log, and a start
    /// before the thread's next round did (docs/snapshots.md, "Snapshots and compaction").
    ///
    /// `stop` requested ends the refold within `recordsPerStopCheck` records and writes nothing; the
    /// snapshots the compaction made stale are removed all the same. The fold so far is kept: it is
    /// a fold of a prefix of the compacted log, which the snapshot at the server's stop holds.
    public func snapshotAfterCompaction(stop: StopSignal? = nil) -> UInt64? {
        let offset: UInt64?
        compactorsWaiting.add(1, ordering: .relaxed)
        let outcome = progress.withLock { state in
            compactorsWaiting.subtract(1, ordering: .relaxed)
            return round(&state, force: true, shouldStop: { stop?.isRequested == true })
        }
        if stop?.isRequested == true {
            removeStale()
            return nil
        }
        if let outcome {
            report(outcome)
            guard case .written(_, let written, _, _) = outcome else { return nil }
            offset = written
        } else {
            // Nothing new since the last snapshot, which this thread's own round may have refolded
            // and written after the rewrite: it lists the segments as they are now.
            offset = progress.withLock {
                $0.lastOffset > 0 && $0.lastOffset == $0.fold.offset ? $0.lastOffset : nil
            }
        }
        guard let offset else { return nil }
        removeStale()
        return offset
    }

    /// The snapshots from before a rewrite still hold what it removed (rejection reasons of erased
    /// and expired batches); a start would delete them only if it reached them.
    private func removeStale() {
        do {
            try store.removeStale(reader: reader)
        } catch {
            report(.failed("removing the snapshots the compaction made stale: \(error)"))
        }
    }

    /// Folds whatever became durable since the last round (so the work is spread over the run, not
    /// bunched at snapshot time), then writes a snapshot when one is due. A fold that `shouldStop`
    /// cut short writes nothing unless `writeWhenStopped` (the last round, at stop).
    func round(force: Bool, shouldStop: () -> Bool = { false }, writeWhenStopped: Bool = false) -> Outcome? {
        progress.withLock { state in
            round(&state, force: force, shouldStop: shouldStop, writeWhenStopped: writeWhenStopped)
        }
    }

    private func round(
        _ state: inout Progress, force: Bool, shouldStop: () -> Bool, writeWhenStopped: Bool = false
    ) -> Outcome? {
        let end = reader.durableEnd()
        do {
            // Forced (at stop, after a compaction) it also looks at the segments when nothing
            // is new: a rewrite alone must refold, or its snapshot would list the old files.
            if end > state.fold.offset || force {
                let finished = try fold(&state, upTo: end, shouldStop: shouldStop)
                if !finished && !writeWhenStopped { return nil }
            }
        } catch {
            return .failed("\(error)")
        }
        let now = monotonicClock()
        let pending = state.fold.offset > state.lastOffset
        let due =
            force
            || schedule.isDue(
                records: state.fold.offset - state.lastOffset, fixes: state.fixesSinceSnapshot,
                micros: now - state.lastMicros)
        guard pending && due else { return nil }
        do {
            if state.staleOnDisk {
                try store.removeStale(reader: reader)
                state.staleOnDisk = false
            }
            let snapshot = RegistrySnapshot(
                offset: state.fold.offset, logID: try reader.logID() ?? .zero,
                segments: state.fold.segments,
                registry: state.fold.registry)
            return try state.write(snapshot, to: store, nowMicros: now)
        } catch {
            return .failed("\(error)")
        }
    }

    /// Returns false when `shouldStop` ended it before `end`; what it read is kept (the fold of a
    /// shorter prefix, with the segments it came from), as when reading fails part way.
    private func fold(_ state: inout Progress, upTo end: UInt64, shouldStop: () -> Bool) throws -> Bool {
        let before = try reader.segmentIdentities(below: end)
        if before.filter({ $0.base < state.fold.offset }) != state.fold.segments {
            refoldFromStart(&state)
            report(.refolding(reason: "a segment the snapshot fold had read was rewritten or removed"))
        }
        // The registry is taken out of the fold and updated in place. A copy would share every
        // dictionary with the fold it came from, and each device's first report of the round would
        // copy its recent batch ids whole: at 64 devices reporting, 1.3-2.6 MB allocated and freed
        // again every round (once a second), at 1,000 twenty times that (docs/benchmarks.md, "Serve
        // memory while ingesting"). `Registry.apply` throws before changing anything, so what it
        // applied is a fold of the records up to `applied`, whatever happens after.
        var registry = state.fold.registry
        state.fold.registry = Registry(recentBatchesPerDeviceMax: registry.recentBatchesPerDeviceMax)
        var applied = state.fold.offset
        var fixes: UInt64 = 0
        var records = 0
        var stopped = false
        var failure: (any Error)?
        do {
            applied = try reader.read(from: state.fold.offset, upTo: end) { record in
                try registry.apply(record)
                applied = record.header.offset + 1
                fixes += UInt64(record.header.fixCount)
                records += 1
                if records % Self.recordsPerStopCheck == 0 && shouldStop() {
                    stopped = true
                    return false
                }
                return true
            }
        } catch {
            failure = error
        }
        let segments = before.filter { $0.base < applied }
        state.fold = RegistryFold(registry: registry, offset: applied, segments: segments)
        state.fixesSinceSnapshot += fixes
        if let failure { throw failure }
        // A rewrite during the fold: what was read may mix versions. Folded again from the first
        // record, and nothing written meanwhile.
        guard try reader.segmentIdentities(below: applied) == segments else {
            refoldFromStart(&state)
            report(.refolding(reason: "a segment was rewritten while the snapshot fold read it"))
            return false
        }
        return !stopped
    }

    /// Forgets the fold: the next one starts at the log's first record. Every snapshot on disk is
    /// stale now; the next one is due as soon as that refold ends.
    private func refoldFromStart(_ state: inout Progress) {
        state.fold = RegistryFold(
            registry: Registry(recentBatchesPerDeviceMax: state.fold.registry.recentBatchesPerDeviceMax),
            offset: 0, segments: [])
        state.lastOffset = 0
        state.staleOnDisk = true
        state.fixesSinceSnapshot = schedule.fixesBetweenSnapshotsMax
    }
}
