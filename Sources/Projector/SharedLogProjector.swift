import Events
import Postgres
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// What a `SharedLogProjector` reports about itself (`findmy projector`'s lines, tests).
public struct SharedLogProjectorStatus: Sendable, Equatable {
    /// Whether this process holds the projection's lease now.
    public var holding = false
    /// The next offset to fold, while holding.
    public var checkpoint: UInt64?
    public var logEnd: UInt64 = 0
    /// Times the lease was taken (at start, or over from a process that died).
    public var taken = 0
    public var recordsFolded = 0
    public var fixesFolded = 0
    public var transactions = 0
    public var lastError: String?
}

/// Folds a partitioned log (JetStream, docs/scale.md) into a projection that needs the whole log in
/// one offset order, with one checkpoint: the geofence projection, whose fold needs a fence's
/// definition (a registry event, in whatever partition its owner's records are) before the fixes
/// of every device it names (in their own partitions), and a device's removal before the fixes
/// that follow it. Splitting it by partition would fold a partition's fixes before another
/// partition had folded the fence they fall in; one folder in offset order is the single-machine
/// fold, record for record, and the stream's sequence is already that order.
///
/// One process at a time folds it: the one whose session holds `pg_try_advisory_lock(lockClass,
/// 0)` (`PartitionLeases.geofenceClass`), with every write through that same session, as
/// `PartitionedProjector` holds a partition. When the holder dies its lock ends with its session
/// (and its transaction in flight is rolled back); another `findmy projector` takes the lease
/// within `leaseCheckMicros` and goes on from the checkpoint the last commit left. The
/// checkpoint's conditional update is a second guard.
///
/// The checkpoint moves only to the end a read verified (`EventLogReading.read(partitions:)`: what
/// the reader was shown, never the end it was told): a replica behind the leader would otherwise
/// make it skip messages for good.
public final class SharedLogProjector<Projection: LogProjection>: Sendable {
    public struct Options: Sendable {
        /// The advisory-lock class of this projection's lease (key 0).
        public var lockClass: Int32 = PartitionLeases.geofenceClass
        public var recordsPerTransactionMax = 5_000
        public var fixesPerTransactionMax = 50_000
        /// With nothing to fold, the log is looked at again after this.
        public var pollMicros: Int64 = 200_000
        /// How often a process without the lease tries to take it.
        public var leaseCheckMicros: Int64 = 1_000_000
        public var retryDelayMicrosMin: Int64 = 100_000
        public var retryDelayMicrosMax: Int64 = 5_000_000
        public var log: @Sendable (String) -> Void = { writeStandardError($0) }

        public init() {}
    }

    public let conninfo: String
    public let reader: any EventLogReading
    public let logID: UUID128
    public let options: Options
    /// A fresh projection value each time the lease is taken: whatever one keeps in memory
    /// between transactions (the geofences' pair states) may be stale after another process
    /// folded meanwhile, so it starts from the tables.
    private let makeProjection: @Sendable () -> Projection
    private let state = Mutex(SharedLogProjectorStatus())
    private let clock: @Sendable () -> Int64

    public init(
        conninfo: String, reader: any EventLogReading, logID: UUID128, options: Options = Options(),
        clock: @escaping @Sendable () -> Int64 = wallClockMicros,
        makeProjection: @escaping @Sendable () -> Projection
    ) {
        self.conninfo = conninfo
        self.reader = reader
        self.logID = logID
        self.options = options
        self.clock = clock
        self.makeProjection = makeProjection
    }

    public var status: SharedLogProjectorStatus { state.withLock { $0 } }

    private var name: String { makeProjection().name }

    private struct Session {
        var connection: PostgresConnection
        /// Set while the lease is held.
        var projection: Projection?
        var nextLeaseTryMicros: Int64 = 0
    }

    /// Takes the lease when it is free and folds until `stop` is requested; then gives it up (its
    /// session closes). Survives PostgreSQL and the log going away.
    public func run(until stop: StopSignal) {
        var session: Session?
        var retryDelay = options.retryDelayMicrosMin
        while !stop.isRequested {
            do {
                if session == nil { session = try open() }
                if session!.projection == nil {
                    let now = monotonicMicros()
                    if now >= session!.nextLeaseTryMicros {
                        session!.nextLeaseTryMicros = now + options.leaseCheckMicros
                        session!.projection = try take(session!.connection)
                    }
                    if session!.projection == nil {
                        _ = stop.wait(micros: options.leaseCheckMicros)
                        continue
                    }
                }
                let folded = try step(session!.projection!, session!.connection)
                retryDelay = options.retryDelayMicrosMin
                if folded == 0 { _ = stop.wait(micros: options.pollMicros) }
            } catch {
                if let current = session {
                    if !current.connection.isAlive || PartitionedProjector.needsPrepare(error) {
                        lose(current, why: "\(error)")
                        session = nil
                    } else if case .checkpointMoved? = error as? ProjectorError {
                        // Someone else wrote it (a `findmy replay` rebuild): start from the tables.
                        session!.projection = makeProjection()
                        continue
                    }
                }
                backOff(error, &retryDelay, stop)
            }
        }
        if let session {
            session.connection.close()
            state.withLock {
                $0.holding = false
                $0.checkpoint = nil
            }
        }
    }

    private func open() throws -> Session {
        let connection = try PostgresConnection(conninfo)
        do {
            try connection.executeScript("SET application_name = 'findmy projector \(getpid())'")
            return Session(connection: connection)
        } catch {
            connection.close()
            throw error
        }
    }

    /// Tries the lease; when taken, prepares the projection (one process at a time, as the
    /// partitioned projectors prepare theirs) and returns a fresh value of it.
    private func take(_ connection: PostgresConnection) throws -> Projection? {
        guard try PartitionLeases.tryLock(options.lockClass, 0, connection) else { return nil }
        let projection = makeProjection()
        do {
            try PartitionLeases.lock(PartitionLeases.prepareClass, 0, connection)
            try projection.prepare(logID: logID, log: options.log, connection)
            try PartitionLeases.unlock(PartitionLeases.prepareClass, 0, connection)
            let checkpoint = try projection.checkpoint(connection)
            state.withLock {
                $0.holding = true
                $0.checkpoint = checkpoint
                $0.taken += 1
            }
            options.log("\(projection.name): lease taken at offset \(checkpoint)")
            return projection
        } catch {
            // Not folding: the lease must not stay with a session that does nothing.
            try? PartitionLeases.unlock(options.lockClass, 0, connection)
            throw error
        }
    }

    /// Reads one transaction's worth of records of every partition, in offset order, from the
    /// checkpoint, and folds them with the checkpoint moved to the end the read verified. Returns
    /// the records folded.
    private func step(_ projection: Projection, _ connection: PostgresConnection) throws -> Int {
        let (start, limit) = try projection.checkpointAndFoldLimit(connection)
        let durableEnd = try reader.durableEndOffset()
        guard durableEnd >= start else {
            throw ProjectorError.logBehindCheckpoint(logEnd: durableEnd, checkpoint: start)
        }
        // A projection that reads another's tables folds no further than that one has.
        let logEnd = limit.map { min(durableEnd, max(start, $0)) } ?? durableEnd
        state.withLock {
            $0.checkpoint = start
            $0.logEnd = durableEnd
        }
        guard logEnd > start else { return 0 }
        var batch = projection.makeBatch(firstOffset: start)
        var records = 0
        let recordsMax = options.recordsPerTransactionMax
        let fixesMax = options.fixesPerTransactionMax
        let verified = try reader.read(
            partitions: Set(0..<reader.partitionCount), from: start, upTo: logEnd
        ) { _, record in
            if records > 0
                && (records >= recordsMax || batch.fixCount + Int(record.header.fixCount) > fixesMax)
            {
                return false
            }
            try batch.add(record)
            records += 1
            return true
        }
        precondition(verified >= batch.nextOffset, "a read vouches for every record it delivered")
        // Nothing visible yet (a replica behind), or an erased tail: nothing to move over.
        guard verified > start else { return 0 }
        batch.nextOffset = verified
        try projection.apply(batch, nowMicros: clock(), logID: logID, connection)
        state.withLock {
            $0.checkpoint = verified
            $0.recordsFolded += records
            $0.fixesFolded += batch.fixCount
            $0.transactions += 1
            $0.lastError = nil
        }
        return records
    }

    private func lose(_ session: Session, why: String) {
        session.connection.close()
        let held = state.withLock { status -> Bool in
            defer {
                status.holding = false
                status.checkpoint = nil
            }
            return status.holding
        }
        if held {
            options.log("\(name): the PostgreSQL session holding its lease ended (\(why)); reconnecting")
        }
    }

    private func backOff(_ error: any Error, _ retryDelay: inout Int64, _ stop: StopSignal) {
        waitAfterFailure(
            error, name: name, log: options.log, &retryDelay, maxMicros: options.retryDelayMicrosMax, stop
        ) { message in
            state.withLock { status in
                defer { status.lastError = message }
                return status.lastError != message
            }
        }
    }
}
