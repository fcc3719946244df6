import Events
import Postgres
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// What the projector reports about itself, for /metrics, /healthz and progress lines.
public struct ProjectorStatus: Sendable, Equatable {
    /// The next offset to fold.
    public var checkpoint: UInt64 = 0
    /// The durable end of the log when last looked at.
    public var logEnd: UInt64 = 0
    public var lagOffsets: UInt64 { logEnd > checkpoint ? logEnd - checkpoint : 0 }
    /// Seconds since the oldest record not yet folded arrived; 0 when caught up.
    public var lagSeconds: Double = 0
    /// The last transaction stopped short of the log's end at a limit of
    /// `Projector.Options`: the projector is working through a backlog (a burst, a restart).
    public var draining = false
    /// Waiting for the catch-up of the projector it yields to (`Projector.Options.yieldsTo`).
    public var yielding = false
    /// Caught up, letting records gather for the next transaction
    /// (`Projector.Options.coalesceWindowMicros`).
    public var gathering = false
    /// The last step stopped short of the log's end at the projection's fold limit (`LogProjection.checkpointAndFoldLimit`) (the
    /// geofence projection waits for the main one, whose history it reads).
    public var heldBack = false
    public var recordsFolded = 0
    public var fixesFolded = 0
    public var transactions = 0
    /// `ANALYZE` runs of the projection tables (see `Projector.Options.analyzeAfterFixesMin`), and
    /// `fixesFolded` at the last one.
    public var analyzes = 0
    public var fixesFoldedAtLastAnalyze = 0
    public var reconnects = 0
    /// The last error, cleared by the next successful transaction.
    public var lastError: String?
    /// Set when the projector stopped for good (the log is behind its checkpoint).
    public var stopped = false
    /// The log the projection is bound to, once `prepare` has checked (or rebuilt) it; nil before,
    /// while the projection is ahead of the log (stopped), and from when a transaction finds the
    /// projection taken over by another log until the next `prepare`. The read side reads nothing
    /// while it is nil (docs/postgres.md).
    public var boundLogID: UUID128?
}

/// One projection of the log that a `Projector` keeps folded: the main one (`MainProjection`: users,
/// devices, history) or another built beside it from the same records (the geofences' transitions).
/// The projector's loop (read a run of records from the checkpoint, fold them into a
/// batch, write the batch and move the checkpoint in one transaction, retry, wait for new records)
/// is the same for every projection; what a projection says is its tables, how a record folds into
/// its batch and how a batch is written.
public protocol LogProjection: Sendable {
    associatedtype Batch: LogProjectionBatch
    /// The word that starts its log lines (`projector`, `geofences`).
    var name: String { get }
    /// The schema its tables are in.
    var schema: String { get }
    /// Makes sure its tables exist, are of the current version and were folded from the log
    /// `logID`; anything else is dropped and made again empty (checkpoint 0), with a line to `log`
    /// saying why.
    func prepare(logID: UUID128, log: (String) -> Void, _ connection: PostgresConnection) throws
    /// The next offset to fold; `ProjectorError.noGeneration` when there are no tables.
    func checkpoint(_ connection: PostgresConnection) throws -> UInt64
    func makeBatch(firstOffset: UInt64) -> Batch
    /// Writes `batch` and moves the checkpoint from its first offset to its next, in one
    /// transaction; nothing is written when the checkpoint is elsewhere (`checkpointMoved`) or
    /// (with `logID`) the tables are another log's (`projectionOfAnotherLog`).
    func apply(_ batch: Batch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection) throws
    /// The same, free to give part of the work to `helper`, a second connection, in a transaction of
    /// its own (the main projection's history, `ProjectionStore.apply`); the default ignores it.
    func apply(
        _ batch: Batch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection,
        helper: PostgresConnection?) throws
    /// Fewest fixes in a batch for `helper` to be worth opening; nil: never.
    var helperFixesMin: Int? { get }
    /// `ANALYZE` of the tables its readers query (see `Projector.Options.analyzeAfterFixesMin`).
    func analyze(_ connection: PostgresConnection) throws
    /// Its checkpoint, and the offset it may fold up to now (exclusive, its fold limit) or nil: no
    /// limit but the log's end. A projection that reads another one's tables (the geofences read
    /// the main history) folds no further than that one has, so that every record it has folded is
    /// there to read. One read for both: every step asks.
    func checkpointAndFoldLimit(_ connection: PostgresConnection) throws -> (
        checkpoint: UInt64, foldLimit: UInt64?
    )
}

extension LogProjection {
    public func apply(
        _ batch: Batch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection,
        helper: PostgresConnection?
    ) throws {
        try apply(batch, nowMicros: nowMicros, logID: logID, connection)
    }

    public var helperFixesMin: Int? { nil }

    public func checkpointAndFoldLimit(_ connection: PostgresConnection) throws -> (
        checkpoint: UInt64, foldLimit: UInt64?
    ) {
        (try checkpoint(connection), nil)
    }
}

/// What one transaction of a projection writes, folded from a run of records in offset order.
public protocol LogProjectionBatch {
    /// The checkpoint after this batch: the offset of the next record to fold.
    var nextOffset: UInt64 { get set }
    var lastReceivedAtMicros: Int64? { get }
    /// Fixes folded so far, which `Projector.Options.fixesPerTransactionMax` bounds.
    var fixCount: Int { get }
    mutating func add(_ record: LogRecord) throws
    /// Called once the last record is added, before the batch is written: drops what only the
    /// fold needed and puts what is written in the order it is written in, in place. A batch holds
    /// up to a transaction's fixes, and the next one is read while this one is written: what is not
    /// needed while it waits is not held.
    mutating func seal()
}

extension LogProjectionBatch {
    public mutating func seal() {}
}

/// The main projection: users, devices, history, latest positions, arrivals, commands
/// (`ProjectionStore`, `ProjectionBatch`), in a generation schema (`Schema`).
public struct MainProjection: LogProjection {
    public let store: ProjectionStore
    public var name: String { "projector" }
    public var schema: String { store.schema }

    public init(schema: String = Schema.live) { store = ProjectionStore(schema: schema) }

    public func prepare(logID: UUID128, log: (String) -> Void, _ connection: PostgresConnection) throws {
        try Schema.migrate(connection)
        let generation = try Schema.generation(of: schema, connection)
        guard
            let reason = Projector.rebuildReason(
                generation, schema: schema, logID: logID, version: Schema.projectionVersion)
        else { return }
        if !reason.isEmpty { log("projector: " + reason) }
        try Schema.createGeneration(schema, logID: logID, connection)
    }

    public func checkpoint(_ connection: PostgresConnection) throws -> UInt64 {
        try store.checkpoint(connection).next
    }

    public func makeBatch(firstOffset: UInt64) -> ProjectionBatch {
        ProjectionBatch(firstOffset: firstOffset)
    }

    public func apply(
        _ batch: ProjectionBatch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection
    ) throws {
        try store.apply(batch, nowMicros: nowMicros, logID: logID, connection)
    }

    public func apply(
        _ batch: ProjectionBatch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection,
        helper: PostgresConnection?
    ) throws {
        try store.apply(batch, nowMicros: nowMicros, logID: logID, connection, helper: helper)
    }

    public var helperFixesMin: Int? { ProjectionStore.splitFixesMin }

    public func analyze(_ connection: PostgresConnection) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        try connection.executeScript("ANALYZE \(s).device_locations, \(s).device_latest, \(s).devices")
    }
}

extension ProjectionBatch: LogProjectionBatch {
    public var fixCount: Int { locations.count }
}

/// Folds the log into a projection, exactly once: each transaction writes its rows and the new
/// checkpoint together, conditional on the old checkpoint. One loop for every projection
/// (`LogProjection`): the main one, and the geofences' beside it with its own checkpoint.
public final class Projector: Sendable {
    public struct Options: Sendable {
        /// Records folded in one transaction at most.
        public var recordsPerTransactionMax = 20_000
        /// Fixes folded in one transaction at most: bounds the projector's memory, whatever the
        /// backlog, at two transactions' rows (the one written and the one read ahead, about 144
        /// bytes a fix: 14 MB). At 200,000 a catch-up of 250,000 fixes took `findmy serve` from 26
        /// to 118 MB; at 50,000, to 69-72 MB, 58 MB with malloc's threshold fixed (docs/benchmarks.md,
        /// "Projector catch-up memory"). A drain's transaction COPYs its fixes sorted by device
        /// and time (`ProjectionStore.indexOrder`): the more fixes, the longer each device's run
        /// and the cheaper the index upkeep (2 M fixes with both indexes, before the helper
        /// connection: 45 s in chunks of 50,000, 37 s in chunks of 200,000).
        public var fixesPerTransactionMax = 50_000
        /// How long the tailing projector, idle, sleeps at most before looking at its checkpoint
        /// again. New durable records (the writer in this process rings it; a log of another
        /// process is looked at every `LogReader.tailPollMicros`) and a stop wake it at once, so
        /// this bounds nothing a user waits for.
        public var idleWaitMicros: Int64 = 5_000_000
        /// Caught up, the projector starts a transaction at most once per this window: after one
        /// that reached the log's end it sleeps until this long after that one started, and the
        /// records that arrive meanwhile fold together. Every transaction costs PostgreSQL the same
        /// fixed work (the checkpoint's read and update, the COPYs and upserts begun, a commit and
        /// its WAL flush) and this process a wake and the statements built: folding steady traffic
        /// as it came, 30-60 fixes a transaction, PostgreSQL spent 47 µs a fix, against 16-18 µs
        /// in transactions of 600-1,900 (docs/benchmarks.md, "Projector transactions when keeping
        /// up"). A record after an idle spell (no transaction within the window) folds at once; a
        /// backlog (a transaction stopped at a limit) is drained without pause; a read waiting for
        /// its own write (`after_offset`, which adds a bell to `checkpointBells`) and a stop end
        /// the window at once. So it delays only what no one waits for, by at most the window.
        /// 0: fold as records come.
        public var coalesceWindowMicros: Int64 = 100_000
        /// Pause after a failed transaction before trying again (PostgreSQL down, say), doubled after
        /// each further failure up to the maximum, back to the minimum after a success.
        public var retryDelayMicrosMin: Int64 = 100_000
        public var retryDelayMicrosMax: Int64 = 5_000_000
        /// Once this many fixes were folded since the last `ANALYZE` (a catch-up after a backlog, a
        /// replay, or enough steady traffic), and at least a tenth of those folded before it
        /// (`analyzeIsDue`), the projector analyzes the projection tables the next time it is idle
        /// (nothing new after a window of `coalesceWindowMicros`).
        /// Autovacuum analyzes leaf partitions only after a delay and never the partitioned
        /// `device_locations` itself; until then the planner guesses row counts from empty-table
        /// statistics (37 rows for a 30-day history of 8,640) and picks bitmap scans and sorts.
        /// The tenth is autovacuum's own rule (`autovacuum_analyze_scale_factor`): under steady
        /// traffic the projector is idle between transactions, and an `ANALYZE` every 5,000 fixes
        /// (250-350 ms of PostgreSQL's time each, a sample of 30,000 rows a partition) was 8-17 % of
        /// PostgreSQL's statement time in the whole service (docs/benchmarks.md).
        public var analyzeAfterFixesMin = 5_000
        /// A projector whose catch-up goes first: while it is draining a backlog, this one folds
        /// nothing (it waits for that one's transactions, at most `yieldMicrosMax` at a time, then
        /// folds one transaction). The geofence projector yields to the main one, which the reads
        /// wait for: both share one connection and two cores, and folding them side by side halved
        /// the main projection's rate during a burst (docs/benchmarks.md). In steady state the main
        /// projector catches up in every transaction and both fold as records come. Its commits also
        /// wake this one when its projection's fold limit holds it back (the geofence projection
        /// reads the main one's history).
        public var yieldsTo: Projector?
        public var yieldMicrosMax: Int64 = 30_000_000
        /// Held back by the projection's fold limit (`LogProjection.checkpointAndFoldLimit`) (`ProjectorStatus.heldBack`), it looks again
        /// after this at most; a commit of the projector it yields to wakes it at once.
        public var limitPollMicros: Int64 = 100_000
        /// Whether a large transaction (a drain's) may use a second PostgreSQL connection for part
        /// of its history (`LogProjection.helperFixesMin`, `ProjectionStore.apply`): PostgreSQL
        /// folds on one core per connection, and index upkeep there is what bounds a drain. The
        /// helper connection is opened on first need and closed when `run` returns.
        public var usesHelperConnection = true
        public var log: @Sendable (String) -> Void = { writeStandardError($0) }

        public init() {}
    }

    public let client: PostgresClient
    public let reader: LogReader
    public let projection: any LogProjection
    public let options: Options
    let state = Mutex(ProjectorStatus())
    private let clock: @Sendable () -> Int64
    /// Rung whenever `status.checkpoint` may have moved: a read waiting for its own write
    /// (`after_offset`) sleeps on one of these instead of polling.
    public let checkpointBells: Doorbells
    /// Ends the wait of `Options.coalesceWindowMicros`: rung by a waiter added to
    /// `checkpointBells`, by `foldNow` and by a stop.
    let windowBell: Doorbell
    /// The second connection of `Options.usesHelperConnection`; one attempt to connect, since the
    /// transaction does without it.
    private let helperClient: PostgresClient
    /// The run of records read ahead while the last transaction was written (a `ReadRun` of the
    /// projection's batch type), taken by the next step.
    private let prefetch = Locked<Any?>(nil)

    /// The main projection in `schema`.
    public convenience init(
        client: PostgresClient, reader: LogReader, schema: String = Schema.live, options: Options = Options(),
        clock: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        self.init(
            client: client, reader: reader, projection: MainProjection(schema: schema), options: options,
            clock: clock)
    }

    public init(
        client: PostgresClient, reader: LogReader, projection: any LogProjection,
        options: Options = Options(),
        clock: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        self.client = client
        self.reader = reader
        self.projection = projection
        self.options = options
        self.clock = clock
        let windowBell = Doorbell()
        self.windowBell = windowBell
        checkpointBells = Doorbells(onAdd: { windowBell.ring() })
        helperClient = PostgresClient(
            conninfo: client.conninfo, policy: PostgresClient.ReconnectPolicy(reconnectAttemptsMax: 1))
    }

    deinit { helperClient.close() }

    public var status: ProjectorStatus { state.withLock { $0 } }

    /// Ends the current (or next) wait of `Options.coalesceWindowMicros`: the records that arrived
    /// are folded at once, as for a read waiting on `checkpointBells`.
    public func foldNow() { windowBell.ring() }

    /// Prepares the projection's tables (`LogProjection.prepare`: the main one applies the meta
    /// migrations and rebuilds a generation of another version or log from offset 0) before
    /// anything is served, and checks that the log is not behind its checkpoint.
    public func prepare() throws {
        guard let logID = try reader.logID() else {
            throw ProjectorError.logWithoutID(directory: reader.directory)
        }
        let checkpoint = try client.withConnection { connection in
            try projection.prepare(logID: logID, log: options.log, connection)
            return try projection.checkpoint(connection)
        }
        state.withLock { $0.checkpoint = checkpoint }
        checkpointBells.ringAll()
        // Holds records this log does not have (restored from an older backup): not a fold of it.
        let logEnd = reader.durableEnd()
        guard checkpoint <= logEnd else {
            throw ProjectorError.logBehindCheckpoint(logEnd: logEnd, checkpoint: checkpoint)
        }
        state.withLock { $0.boundLogID = logID }
    }

    /// Why the generation found must be built again for the log `logID` (empty: there is none yet),
    /// or nil when it is this log's, of version `version`.
    public static func rebuildReason(
        _ generation: Schema.Generation?, schema: String, logID: UUID128,
        version: Int = Schema.projectionVersion
    ) -> String? {
        guard let generation else { return "" }
        if generation.version != version {
            return "projection version \(generation.version) in schema \(schema) is not "
                + "\(version); rebuilding it from the log"
        }
        guard let folded = generation.logID else {
            return
                "the projection in schema \(schema) has no log id (it was made before projections were bound "
                + "to their log), this log is \(logID): dropping it and rebuilding from offset 0 (once)"
        }
        if folded != logID {
            return
                "projection was folded from log \(folded), this log is \(logID): dropping it and rebuilding "
                + "from offset 0 (a new log at this data directory, with a database left from an older one)"
        }
        return nil
    }

    /// Folds the next run of records (at most one transaction's worth) up to `logEnd`. Returns the
    /// number of records folded; 0 when there was nothing to do.
    @discardableResult
    public func step(logEnd: UInt64) throws -> Int { try step(projection, logEnd: logEnd) }

    private func step<P: LogProjection>(_ projection: P, logEnd durableEnd: UInt64) throws -> Int {
        let (start, limit) = try client.withConnection { try projection.checkpointAndFoldLimit($0) }
        // Moved by someone else (a swap, another projector): its waiters look again. Unmoved, no
        // ring: the geofence notifier wakes at each ring.
        let moved = state.withLock { status in
            defer { status.checkpoint = start }
            return status.checkpoint != start
        }
        if moved { checkpointBells.ringAll() }
        guard durableEnd >= start else {
            throw ProjectorError.logBehindCheckpoint(logEnd: durableEnd, checkpoint: start)
        }
        // Below the checkpoint (the projection it reads was rebuilt): nothing more until it catches up.
        let logEnd = limit.map { min(durableEnd, max(start, $0)) } ?? durableEnd
        state.withLock { $0.heldBack = logEnd < durableEnd }
        let prefetched = prefetch.withLock { slot -> ReadRun<P.Batch>? in
            defer { slot = nil }
            return slot as? ReadRun<P.Batch>
        }
        guard logEnd > start else {
            state.withLock {
                $0.logEnd = durableEnd
                $0.lagSeconds = 0
                $0.draining = false
            }
            return 0
        }
        // A run read ahead during the last transaction serves if that transaction committed (the
        // checkpoint is where the run starts); else it is read again.
        let run =
            try prefetched.flatMap { $0.start == start ? $0 : nil }
            ?? read(projection, from: start, upTo: logEnd)
        let batch = run.batch
        let bound = state.withLock { $0.boundLogID }
        // While draining, the next run is read and folded while PostgreSQL writes this one: the
        // fold is this process's CPU, the write PostgreSQL's, and done in turn each waits for the
        // other.
        let readsAhead = batch.nextOffset < logEnd
        var applied: Result<Void, any Error> = .success(())
        var next: ReadRun<P.Batch>?
        concurrentPerform(iterations: readsAhead ? 2 : 1) { index in
            if index == 1 {
                next = try? self.read(projection, from: batch.nextOffset, upTo: logEnd)
                return
            }
            applied = Result {
                try self.withHelper(projection, fixes: batch.fixCount) { helper in
                    try self.client.withConnection {
                        try projection.apply(batch, nowMicros: self.clock(), logID: bound, $0, helper: helper)
                    }
                }
            }
        }
        if case .failure(let error) = applied {
            if case ProjectorError.projectionOfAnotherLog(let schema, let logID)? = error as? ProjectorError {
                state.withLock { $0.boundLogID = nil }
                throw ProjectorError.projectionOfAnotherLog(schema: schema, logID: logID)
            }
            throw error
        }
        if let next { prefetch.withLock { $0 = next } }
        let now = clock()
        state.withLock {
            $0.checkpoint = batch.nextOffset
            $0.logEnd = durableEnd
            $0.recordsFolded += run.records
            $0.fixesFolded += batch.fixCount
            $0.transactions += 1
            $0.lastError = nil
            $0.draining = batch.nextOffset < logEnd
            let pending = run.oldestUnfolded ?? (batch.nextOffset < logEnd ? batch.lastReceivedAtMicros : nil)
            $0.lagSeconds = pending.map { Double(max(0, now - $0)) / 1_000_000 } ?? 0
        }
        checkpointBells.ringAll()
        return run.records
    }

    /// One transaction's worth of records from `start`, folded into a batch.
    private func read<P: LogProjection>(_ projection: P, from start: UInt64, upTo logEnd: UInt64) throws
        -> ReadRun<P.Batch>
    {
        var batch = projection.makeBatch(firstOffset: start)
        var records = 0
        var oldestUnfolded: Int64?
        let fixesMax = options.fixesPerTransactionMax
        let recordsMax = options.recordsPerTransactionMax
        try reader.read(from: start, upTo: logEnd) { record in
            if records > 0
                && (records >= recordsMax || batch.fixCount + Int(record.header.fixCount) > fixesMax)
            {
                oldestUnfolded = record.header.receivedAtMicros
                return false
            }
            try batch.add(record)
            records += 1
            return true
        }
        // A run of records that a compaction removed entirely still moves the checkpoint.
        if batch.nextOffset < logEnd && records < recordsMax && oldestUnfolded == nil {
            batch.nextOffset = logEnd
        }
        batch.seal()
        return ReadRun(start: start, batch: batch, records: records, oldestUnfolded: oldestUnfolded)
    }

    /// Runs `body` with the helper connection when the batch is large enough for `projection` to
    /// use one and it can be had, else with nil.
    private func withHelper<P: LogProjection>(
        _ projection: P, fixes: Int, _ body: (PostgresConnection?) throws -> Void
    ) throws {
        guard options.usesHelperConnection, let fixesMin = projection.helperFixesMin, fixes >= fixesMin,
            (try? helperClient.withConnection { _ in true }) == true
        else { return try body(nil) }
        try helperClient.withConnection { try body($0) }
    }

    /// `ANALYZE` of the tables the read API queries, so that the planner knows their real row
    /// counts, once `analyzeAfterFixesMin` fixes were folded since the last one. `run` calls it when
    /// idle: it reads a sample of each partition (up to 30,000 rows each) and must not slow a
    /// catch-up down. Returns whether it analyzed.
    @discardableResult
    public func analyzeIfDue() throws -> Bool {
        let folded = status.fixesFolded
        guard
            Self.analyzeIsDue(
                folded: folded, foldedAtLast: status.fixesFoldedAtLastAnalyze,
                minimum: options.analyzeAfterFixesMin)
        else { return false }
        try client.withConnection { try projection.analyze($0) }
        state.withLock {
            $0.analyzes += 1
            $0.fixesFoldedAtLastAnalyze = folded
        }
        return true
    }

    /// Whether an `ANALYZE` is due with `folded` fixes folded by this projector, `foldedAtLast` of them
    /// at the last one: `minimum` since then, and a tenth of `foldedAtLast` (the statistics are of
    /// the rows folded before; like autovacuum, a table is analyzed again once a tenth of it is new).
    public static func analyzeIsDue(folded: Int, foldedAtLast: Int, minimum: Int) -> Bool {
        let since = folded - foldedAtLast
        return since >= minimum && since >= foldedAtLast / 10
    }

    /// Tails the log until `stop` is requested, surviving PostgreSQL restarts: a failed transaction
    /// is retried from the checkpoint stored in the database, which says whether it committed.
    public func run(until stop: StopSignal) {
        defer { helperClient.close() }
        var prepared = false
        var retryDelay = options.retryDelayMicrosMin
        while !stop.isRequested {
            do {
                if !prepared {
                    try prepare()
                    prepared = true
                }
                if let first = options.yieldsTo { yield(to: first, stop) }
                let logEnd = reader.durableEnd()
                let wasDraining = status.draining
                let started = monotonicMicros()
                let folded = try step(logEnd: logEnd)
                retryDelay = options.retryDelayMicrosMin
                // A drain's batches are freed, but malloc keeps the freed pages (and, once a block
                // that size was freed, serves later large blocks from the heap, which it trims only
                // from the top): the process would stay at a drain's size while idle.
                if wasDraining && !status.draining { releaseFreedMemory() }
                // Folded up to the limit (or nothing, held there): the next step has something only
                // once the projection it reads has moved, which wakes this at once.
                if status.heldBack {
                    waitForLimit(stop)
                    continue
                }
                if folded == 0 {
                    // Idle only, not before a window: an `ANALYZE` holds the loop (250-350 ms of
                    // PostgreSQL's time, more under load), and under steady traffic the backlog it
                    // leaves was still there when a load stopped (docs/benchmarks.md).
                    if try analyzeIfDue() { continue }
                    reader.waitForNewRecords(after: logEnd, timeoutMicros: options.idleWaitMicros, stop: stop)
                } else if !status.draining {
                    gather(until: started + options.coalesceWindowMicros, stop)
                }
            } catch let error as ProjectorError {
                switch error {
                case .checkpointMoved:
                    continue  // a swap or another projector: reread the checkpoint and go on
                case .projectionOfAnotherLog:
                    options.log("\(projection.name): \(error)")
                    prepared = false  // prepare drops it and rebuilds this log's
                    continue
                case .logWithoutID:
                    backOff(error, &retryDelay, stop)
                case .logBehindCheckpoint, .noGeneration:
                    options.log("\(projection.name): stopped: \(error)")
                    state.withLock {
                        $0.lastError = error.description
                        $0.stopped = true
                        $0.boundLogID = nil
                    }
                    return
                }
            } catch {
                backOff(error, &retryDelay, stop)
            }
        }
    }

    /// After a failure that may pass (PostgreSQL down, say): says so once, waits, doubles the wait.
    private func backOff(_ error: any Error, _ retryDelay: inout Int64, _ stop: StopSignal) {
        let message = "\(error)"
        let first = state.withLock { status -> Bool in
            defer {
                status.lastError = message
                status.reconnects += 1
            }
            return status.lastError != message
        }
        if first { options.log("\(projection.name): \(message); retrying") }
        // A stop wakes the wait at once: a shutdown is not held up by a long back-off.
        stop.wait(micros: retryDelay)
        retryDelay = min(retryDelay * 2, options.retryDelayMicrosMax)
    }
}

/// Gives the pages of freed heap blocks back to the system (glibc's `malloc_trim(0)`).
func releaseFreedMemory() { HeapTrimmer.trim() }

/// Records read from the log and folded into one transaction's batch, not written yet.
private struct ReadRun<Batch> {
    var start: UInt64
    var batch: Batch
    var records: Int
    /// `received_at` of the first record left for a later run (the run stopped at a limit).
    var oldestUnfolded: Int64?
}
