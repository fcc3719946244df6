import Events
import Synchronization
import Threads

// Registry snapshots of an ingest node, whose log is shared (JetStream; docs/snapshots.md
// "Ingest nodes"). The file format and the store are one machine's (RegistrySnapshot.swift); what
// differs is what ties a snapshot to its log, and where the fold comes from.
//
// The cut. The node's live registry is not a fold of a log prefix at any instant: the report path
// applies its own batch when the append returns, before the follower reaches it. So, as on one
// machine, the snapshotter keeps its own copy, folded from the stream by its own reads, in offset
// order: after a read that reached `offset`, the copy holds every message below `offset` the stream
// delivered and nothing above it. That is the cut written.
//
// Retention (docs/scale.md "Retention by deletion") erases messages and republishes what lives of
// them at the end of the stream, at new offsets. A fold that applied a message since erased is not
// what a fold of the stream now gives (its batch result, its rejections, a command's events), so
// such a snapshot must never be loaded, and must not be continued: the copy is refolded from the
// stream's first message. Sequences are only added at the end and a gone message never returns,
// so one stream-info answer (last sequence, message count) tells whether anything a fold applied
// is gone: rule 4J, `SharedLogCounts.covers`.

/// What registry snapshots of a shared log need of it.
public protocol SnapshotSharedLog: Sendable {
    /// The log's identity, which a snapshot is bound to (a stream deleted and made again is another).
    func logID() throws -> UUID128
    /// The offset after the last message ever stored and the messages stored now, in one answer.
    func storedCounts() throws -> SharedLogCounts
    /// Hands every record of every partition from `start` below `end` to `visit`, in offset order,
    /// until `visit` returns false (that record counts as visited). Returns the offset below which
    /// every message was visited or was gone when the read passed it.
    func readAll(from start: UInt64, upTo end: UInt64, _ visit: (LogRecord) throws -> Bool) throws -> UInt64
}

/// One stream-info answer: `end` (the offset after the last message ever stored; offsets of gone
/// messages are never given again) and how many messages the stream holds now.
public struct SharedLogCounts: Sendable, Equatable {
    public var end: UInt64
    public var messages: UInt64

    public init(end: UInt64, messages: UInt64) {
        self.end = end
        self.messages = messages
    }

    /// Rule 4J: a fold that applied `records` messages below `offset` is the fold of the stream as
    /// it is now. Below `offset` the stream holds at most the messages the fold applied (none is
    /// added there later), above it at most `end - offset`; equality on the sum means nothing the
    /// fold applied is gone (and nothing above it either, which a count cannot tell apart).
    public func covers(offset: UInt64, records: UInt64) -> Bool {
        offset <= end && messages == records + (end - offset)
    }
}

extension RegistrySnapshotStore {
    /// The newest snapshot valid on `log` (rules 1, 2, 3, 4J, 5), or nil; stale ones are deleted.
    public func loadNewestValid(shared log: any SnapshotSharedLog, recentBatchesPerDeviceMax: Int) throws
        -> (RegistrySnapshot?, LoadReport)
    {
        var stream: (id: UUID128, counts: SharedLogCounts)?
        return try loadNewestValid(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax) { snapshot in
            if stream == nil { stream = (try log.logID(), try log.storedCounts()) }
            return Self.staleness(of: snapshot, sharedLogID: stream!.id, counts: stream!.counts)
        }
    }

    /// Why `snapshot` can never be loaded on the shared log with this id and these counts, or nil.
    static func staleness(of snapshot: RegistrySnapshot, sharedLogID: UUID128, counts: SharedLogCounts)
        -> String?
    {
        if snapshot.logID != sharedLogID {
            return "it belongs to log \(snapshot.logID), not this stream (\(sharedLogID))"
        }
        guard snapshot.segments.isEmpty, let records = snapshot.recordsFolded else {
            return "it is a snapshot of a local log (segment files, no record count), not of a stream"
        }
        if snapshot.offset > counts.end {
            return "it stands at offset \(snapshot.offset), beyond the stream's end \(counts.end)"
        }
        if !counts.covers(offset: snapshot.offset, records: records) {
            return
                "messages it folded are gone from the stream (retention erased them): it applied \(records) below "
                + "offset \(snapshot.offset), the stream holds \(counts.messages) messages up to \(counts.end)"
        }
        return nil
    }
}

extension Registry {
    /// Where an ingest node's registry starts: the newest valid snapshot of `store` on `log`, or an
    /// empty registry at offset 0. Never throws: a snapshot that cannot be read costs a full fold.
    package static func sharedStart(
        log: any SnapshotSharedLog, store: RegistrySnapshotStore, recentBatchesPerDeviceMax: Int
    ) -> (RegistryFold, RegistryStartReport) {
        var report = RegistryStartReport(snapshotOffset: nil, recordsReplayed: 0, skipped: [])
        do {
            let (snapshot, load) = try store.loadNewestValid(
                shared: log, recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
            report.skipped = load.skipped
            if let snapshot, let records = snapshot.recordsFolded {
                report.snapshotOffset = snapshot.offset
                return (
                    RegistryFold(
                        registry: snapshot.registry, offset: snapshot.offset, segments: [], records: records),
                    report
                )
            }
        } catch {
            report.snapshotError = "\(error)"
        }
        let empty = Registry(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
        return (RegistryFold(registry: empty, offset: 0, segments: [], records: 0), report)
    }
}

/// The snapshotter of an ingest node (see the top of this file): the schedule, the outcomes and the
/// store of `RegistrySnapshotter`, a fold of its own read from the shared log, refolded from the
/// first message when retention took something it had applied.
public final class SharedRegistrySnapshotter: Service {
    public let name = "snapshots"
    let log: any SnapshotSharedLog
    public let store: RegistrySnapshotStore
    public let schedule: RegistrySnapshotter.Schedule
    let monotonicClock: @Sendable () -> Int64
    let report: @Sendable (RegistrySnapshotter.Outcome) -> Void
    private let progress: Mutex<Progress>
    private let worker = StoppableThread()

    /// One machine's; `staleOnDisk` here: the snapshots on disk hold what retention erased.
    typealias Progress = RegistrySnapshotter.Progress

    /// Continues from the fold `registry` started with (a loaded snapshot, or offset 0).
    public init(
        registry: RegistryStore, log: any SnapshotSharedLog, store: RegistrySnapshotStore,
        schedule: RegistrySnapshotter.Schedule = .init(),
        monotonicClock: @escaping @Sendable () -> Int64 = monotonicMicros,
        report: @escaping @Sendable (RegistrySnapshotter.Outcome) -> Void = { _ in }
    ) {
        guard let fold = registry.takeStartFold() else {
            preconditionFailure("one snapshotter per RegistryStore, which must start from a snapshot store")
        }
        self.log = log
        self.store = store
        self.schedule = schedule
        self.monotonicClock = monotonicClock
        self.report = report
        progress = Mutex(Progress(fold: fold, lastOffset: fold.offset, lastMicros: monotonicClock()))
    }

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    public func start() throws {
        worker.start { [self] stop in
            lowerCurrentThreadPriority(by: RegistrySnapshotter.threadNiceness)
            while !stop.wait(micros: schedule.checkIntervalMicros) {
                if let outcome = round(force: false, shouldStop: { stop.isRequested }) { report(outcome) }
            }
        }
    }

    /// Stops the thread, then folds what the stream holds for at most half of `graceMicros` and
    /// writes a last snapshot where the fold got to.
    public func stop(graceMicros: Int64) {
        worker.stop()
        let deadline = monotonicClock() + graceMicros / 2
        let outcome = round(
            force: true, shouldStop: { self.monotonicClock() >= deadline }, writeWhenStopped: true)
        if let outcome { report(outcome) }
    }

    /// Folds up to the stream's end and writes a snapshot there if anything is new (tests, tools).
    @discardableResult
    public func snapshotNow() -> RegistrySnapshotter.Outcome? { round(force: true) }

    func round(force: Bool, shouldStop: () -> Bool = { false }, writeWhenStopped: Bool = false)
        -> RegistrySnapshotter.Outcome?
    {
        progress.withLock { state in
            do {
                let counts = try log.storedCounts()
                if !counts.covers(offset: state.fold.offset, records: state.fold.records) {
                    refold(&state, counts)
                }
                if counts.end > state.fold.offset {
                    let finished = try fold(&state, upTo: counts.end, shouldStop: shouldStop)
                    if !finished && !writeWhenStopped { return nil }
                }
                // What the read vouches for must still be the stream (an erasure during the read).
                let after = try log.storedCounts()
                if !after.covers(offset: state.fold.offset, records: state.fold.records) {
                    refold(&state, after)
                    return nil
                }
            } catch {
                return .failed("\(error)")
            }
            return writeIfDue(&state, force: force)
        }
    }

    private func refold(_ state: inout Progress, _ counts: SharedLogCounts) {
        report(
            .refolding(
                reason:
                    "messages the snapshot fold had read are gone from the stream (retention): it applied "
                    + "\(state.fold.records) below \(state.fold.offset), the stream holds \(counts.messages) up to \(counts.end)"
            ))
        state.fold = RegistryFold(
            registry: Registry(recentBatchesPerDeviceMax: state.fold.registry.recentBatchesPerDeviceMax),
            offset: 0, segments: [], records: 0)
        state.lastOffset = 0
        state.staleOnDisk = true
        state.fixesSinceSnapshot = schedule.fixesBetweenSnapshotsMax
    }

    /// Returns false when `shouldStop` ended it before `end`; what it read is kept.
    private func fold(_ state: inout Progress, upTo end: UInt64, shouldStop: () -> Bool) throws -> Bool {
        var registry = state.fold.registry
        var records: UInt64 = 0
        var fixes: UInt64 = 0
        var stopped = false
        let reached = try log.readAll(from: state.fold.offset, upTo: end) { record in
            fixes += UInt64(record.header.fixCount)
            try registry.apply(record)
            records += 1
            if records % UInt64(RegistrySnapshotter.recordsPerStopCheck) == 0 && shouldStop() {
                stopped = true
                return false
            }
            return true
        }
        state.fold = RegistryFold(
            registry: registry, offset: max(reached, state.fold.offset), segments: [],
            records: state.fold.records + records)
        state.fixesSinceSnapshot += fixes
        return !stopped
    }

    private func writeIfDue(_ state: inout Progress, force: Bool) -> RegistrySnapshotter.Outcome? {
        let now = monotonicClock()
        guard state.fold.offset > state.lastOffset,
            force
                || schedule.isDue(
                    records: state.fold.offset - state.lastOffset, fixes: state.fixesSinceSnapshot,
                    micros: now - state.lastMicros)
        else { return nil }
        do {
            let logID = try log.logID()
            if state.staleOnDisk {
                let counts = try log.storedCounts()
                try store.removeStale {
                    RegistrySnapshotStore.staleness(of: $0, sharedLogID: logID, counts: counts)
                }
                state.staleOnDisk = false
            }
            let snapshot = RegistrySnapshot(
                offset: state.fold.offset, logID: logID, segments: [], registry: state.fold.registry,
                recordsFolded: state.fold.records)
            return try state.write(snapshot, to: store, nowMicros: now)
        } catch {
            return .failed("\(error)")
        }
    }
}
