import Events
import Postgres
import Synchronization
import Threads

/// Everything one compaction run did (or, dry, would do).
public struct CompactionReport: Sendable, Equatable {
    public var asOfMicros: Int64
    public var dryRun: Bool
    public var log = LogCompactionReport()
    public var database: DatabaseCompactionReport?
    /// The offset of the registry snapshot written for the compacted log, when the run rewrote or
    /// deleted segments and a snapshot could be written (docs/snapshots.md).
    public var registrySnapshotOffset: UInt64?
    /// The server's stop cut the run short (docs/retention.md, "Stopping during a compaction"):
    /// what the report counts was done and is consistent; the rest is the next run's.
    public var stoppedEarly = false
    public var elapsedMicros: Int64 = 0
}

/// Totals since the process started, for `/metrics`.
public struct CompactorTotals: Sendable, Equatable {
    public var runs = 0
    public var failures = 0
    public var fixesRemoved = 0
    public var placesRemoved = 0
    public var bytesFreed = 0
    public var segmentsDeleted = 0
    public var segmentsRewritten = 0
    public var locationRowsDeleted = 0
    public var partitionsDropped = 0
    public var batchRowsDeleted = 0
    public var relationsRewritten = 0
    /// Command events (types 27-31) removed from the log, and `commands` rows deleted (with their
    /// `command_deliveries`): docs/retention.md, "Commands".
    public var commandEventsRemoved = 0
    public var commandRowsDeleted = 0
    /// Presence changes (type 35) removed from the log (docs/retention.md, "Presence").
    public var presenceEventsRemoved = 0
    /// Rows removed from the geofence projection: its fixes and transitions (docs/retention.md,
    /// "Geofences").
    public var geofenceRowsDeleted = 0
    public var lastRunMicros: Int64?
    public var lastError: String?
}

/// Where a run is, for `findmy compact`'s progress lines and the admin socket's run status.
public enum CompactionPhase: Sendable, Equatable {
    /// Queued behind a run in progress (runs are serialised).
    case waiting
    /// Reading the retention policy from every record's header: up to `offset`, of `end`.
    case readingPolicy(offset: UInt64, end: UInt64)
    /// Rewriting or deleting sealed segments: `done` of `total` looked at.
    case rewritingLog(done: Int, total: Int)
    /// Writing the registry snapshot of the compacted log (a refold of the whole log).
    case snapshotting
    /// Deleting rows from PostgreSQL.
    case database
}

/// The retention job: one `run` compacts the log (holding its writer) and then the database.
/// Runs are serialised; the scheduled run inside `findmy serve` and one asked for through the
/// admin socket never overlap.
public final class Compactor: Sendable {
    public struct Options: Sendable {
        public var settings = RetentionSettings()
        /// Rows one DELETE removes at most; each such statement is its own short transaction.
        public var deleteRowsPerBatchMax = 5_000
        /// How much lower than the server's the run's CPU priority is (nice steps): on a small
        /// machine the rewrite and the registry refold would otherwise take a core from the
        /// reports arriving meanwhile (docs/benchmarks.md, "Compaction at 100 M fixes").
        public var niceness: Int32 = 10
        /// The policy scan (every record's header, the run's first step) asks whether to stop once
        /// per this many records: about a millisecond of header reading on the reference machine.
        public var policyRecordsPerStopCheck = 4096
        public init() {}
    }

    public let writer: LogWriter
    public let client: PostgresClient?
    public let options: Options
    /// The projector's checkpoint, when it runs in this process: whole segments are deleted only
    /// below it, so that it never finds a file gone under it.
    let readerCheckpoint: @Sendable () -> UInt64?
    /// Writes a registry snapshot of the log as it is now, returning its offset (nil: none written).
    /// It gives up, writing none, once the signal it is given is requested.
    public typealias SnapshotWriter = @Sendable (StopSignal) -> UInt64?
    /// Called once a run has rewritten or deleted segments, before the run reports done: the
    /// snapshots on disk list the old segment files and are no longer valid, and without a new one
    /// the next start would fold the whole log (docs/snapshots.md, "Snapshots and compaction").
    let snapshotAfterRewrite: SnapshotWriter?
    private let serial = Mutex(())
    private let state = Mutex(CompactorTotals())
    /// Requested when the server stops (`CompactorService.stop`): a run in progress ends at its
    /// next safe point instead of finishing (docs/retention.md, "Stopping during a compaction").
    public let stopSignal = StopSignal()
    /// Where the run in progress is; nil between runs.
    private let current = Mutex<CompactionPhase?>(nil)
    /// Told every change of phase, on the run's thread (tests hold a run at a phase with it).
    let observePhase: (@Sendable (CompactionPhase) -> Void)?
    /// Runs asked for with `start` (the admin socket's `POST /admin/compact/runs`).
    let startedRuns = StartedRuns()

    public init(
        writer: LogWriter, client: PostgresClient?, options: Options,
        readerCheckpoint: @escaping @Sendable () -> UInt64? = { nil },
        snapshotAfterRewrite: SnapshotWriter? = nil,
        observePhase: (@Sendable (CompactionPhase) -> Void)? = nil
    ) {
        precondition(options.policyRecordsPerStopCheck > 0)
        self.writer = writer
        self.client = client
        self.options = options
        self.readerCheckpoint = readerCheckpoint
        self.snapshotAfterRewrite = snapshotAfterRewrite
        self.observePhase = observePhase
    }

    /// Where the run in progress is, or nil when none runs.
    public var phase: CompactionPhase? { current.withLock { $0 } }

    func enter(_ phase: CompactionPhase) {
        current.withLock { $0 = phase }
        observePhase?(phase)
    }

    public var totals: CompactorTotals { state.withLock { $0 } }

    /// `began` is called once the run holds the compactor (after any run before it ended).
    public func run(asOfMicros: Int64? = nil, dryRun: Bool = false, began: () -> Void = {}) throws
        -> CompactionReport
    {
        try serial.withLock { _ in
            began()
            // On a thread of its own, whose lowered priority ends with it (the caller's, an HTTP
            // worker's say, could not be raised again without privilege).
            let outcome = Outcome()
            runOnThreadOfItsOwn { [self] in
                lowerCurrentThreadPriority(by: options.niceness)
                let result = Result { try runSerialised(asOfMicros: asOfMicros, dryRun: dryRun) }
                current.withLock { $0 = nil }
                outcome.result.withLock { $0 = result }
            }
            return try outcome.result.withLock { $0! }.get()
        }
    }

    private final class Outcome: Sendable {
        let result = Mutex<Result<CompactionReport, any Error>?>(nil)
    }

    private func runSerialised(asOfMicros: Int64?, dryRun: Bool) throws -> CompactionReport {
        let started = monotonicMicros()
        let now = asOfMicros ?? wallClockMicros()
        var report = CompactionReport(asOfMicros: now, dryRun: dryRun)
        do {
            let reader = LogReader(directory: writer.directory, writer: writer)
            let end = writer.durableEnd
            enter(.readingPolicy(offset: 0, end: end))
            let policy: RetentionPolicy
            do {
                policy = try RetentionPolicy.fold(
                    reader, upTo: end, settings: options.settings,
                    recordsPerStopCheck: options.policyRecordsPerStopCheck
                ) { offset in
                    enter(.readingPolicy(offset: offset, end: end))
                    return stopSignal.isRequested
                }
            } catch is RetentionPolicy.FoldStopped {
                // Nothing was changed yet: the whole run is the next one's.
                report.stoppedEarly = true
                report.elapsedMicros = monotonicMicros() - started
                return report
            }
            var logCompaction = LogCompaction(
                writer: writer, policy: policy, nowMicros: now, deleteBelowOffset: readerCheckpoint())
            logCompaction.stopSignal = stopSignal
            logCompaction.onSegment = { [self] done, total in enter(.rewritingLog(done: done, total: total)) }
            report.log = try logCompaction.run(dryRun: dryRun)
            // Before the database half, which can fail on its own: the log is compacted by now.
            if !dryRun && report.log.segmentsRewritten + report.log.segmentsDeleted > 0,
                let snapshotAfterRewrite
            {
                enter(.snapshotting)
                report.registrySnapshotOffset = snapshotAfterRewrite(stopSignal)
            }
            // Stopping: the rows are the next run's (its policy folds the same log).
            report.stoppedEarly = stopSignal.isRequested
            if let client, !report.stoppedEarly {
                enter(.database)
                let database = DatabaseCompaction(
                    policy: policy, nowMicros: now, rowsPerStatementMax: options.deleteRowsPerBatchMax,
                    logID: writer.logID)
                report.database = try client.withConnection { try database.run($0, dryRun: dryRun) }
            }
        } catch {
            state.withLock {
                $0.failures += 1
                $0.lastError = "\(error)"
            }
            throw error
        }
        report.elapsedMicros = monotonicMicros() - started
        if !dryRun {
            state.withLock { totals in
                totals.runs += 1
                totals.lastError = nil
                totals.lastRunMicros = now
                totals.fixesRemoved += report.log.fixesRemoved
                totals.placesRemoved += report.log.placesRemoved
                totals.bytesFreed += report.log.bytesFreed
                totals.segmentsDeleted += report.log.segmentsDeleted
                totals.segmentsRewritten += report.log.segmentsRewritten
                totals.locationRowsDeleted += report.database?.locationRowsDeleted ?? 0
                totals.partitionsDropped += report.database?.partitionsDropped.count ?? 0
                totals.batchRowsDeleted += report.database?.batchRowsDeleted ?? 0
                totals.relationsRewritten += report.database?.relationsRewritten.count ?? 0
                totals.commandEventsRemoved += report.log.commandEventsRemoved
                totals.commandRowsDeleted += report.database?.commandRowsDeleted ?? 0
                totals.presenceEventsRemoved += report.log.presenceEventsRemoved
                totals.geofenceRowsDeleted += report.database?.geofenceRowsDeleted ?? 0
            }
        }
        return report
    }
}
