import Events
import Postgres
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// What a partitioned projector process reports about itself (`findmy projector`'s lines).
public struct PartitionedProjectorStatus: Sendable, Equatable {
    /// The partitions this process holds, each with its checkpoint (the next offset to fold).
    public var checkpoints: [Int: UInt64] = [:]
    /// The log's durable end when last looked at.
    public var logEnd: UInt64 = 0
    /// This process's member slot while its session lives.
    public var member: Int?
    /// Partitions taken (at start, or over from a projector that died or gave them up) and given
    /// up (to make room for a projector that joined), since the process started.
    public var taken = 0
    public var released = 0
    public var recordsFolded = 0
    public var fixesFolded = 0
    public var transactions = 0
    /// Arrivals ("what arrived when") of a record already in the projection, folded as
    /// duplicates: a retention replacement (docs/scale.md, "Retention") or a batch stored again.
    public var duplicateArrivals = 0
    public var lastError: String?
}

/// Folds a partitioned log (JetStream, docs/scale.md) into the main projection, one checkpoint per
/// partition, each written in the same transaction as the rows folded from its partition (as the
/// single-log `Projector` does with its one checkpoint): exactly once per partition.
///
/// Several processes share the partitions through leases (`PartitionLeases`): a partition is
/// folded only by the session holding its advisory lock, and every write of this process goes
/// through that same session, so a process that lost its session (killed, cut off) can write
/// nothing more: its lock and its writes end together, and whoever takes the partition over starts
/// from the checkpoint its last committed transaction left. The checkpoint's conditional update
/// stays as a second guard.
///
/// The fold is the projector's (`ProjectionBatch`, `ProjectionStore.apply`); the records of a device
/// are all in one partition, so a device's order is kept. Registry rows cross partitions (a
/// device's row refers to its user, whose record is in partition 0): a transaction that needs a
/// row another partition has not folded yet fails and is retried on the next pass.
public final class PartitionedProjector: Sendable {
    public struct Options: Sendable {
        public var selection = PartitionSelection.all
        public var recordsPerTransactionMax = 5_000
        public var fixesPerTransactionMax = 50_000
        /// With nothing to fold, the log is looked at again after this.
        public var pollMicros: Int64 = 200_000
        /// How often free partitions are looked for and the share is recomputed.
        public var leaseCheckMicros: Int64 = 1_000_000
        /// Pause after a failure (PostgreSQL or the log unreachable), doubled up to the maximum.
        public var retryDelayMicrosMin: Int64 = 100_000
        public var retryDelayMicrosMax: Int64 = 5_000_000
        public var log: @Sendable (String) -> Void = { writeStandardError($0) }

        public init() {}
    }

    public let conninfo: String
    public let reader: any EventLogReading
    /// The log the projection is bound to (`findmy_meta.generations.log_id`).
    public let logID: UUID128
    public let projection: MainProjection
    public let options: Options
    private let state = Mutex(PartitionedProjectorStatus())
    private let clock: @Sendable () -> Int64

    public init(
        conninfo: String, reader: any EventLogReading, logID: UUID128, schema: String = Schema.live,
        options: Options = Options(), clock: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        self.conninfo = conninfo
        self.reader = reader
        self.logID = logID
        projection = MainProjection(schema: schema)
        self.options = options
        self.clock = clock
    }

    public var status: PartitionedProjectorStatus { state.withLock { $0 } }

    /// The row of partition `partition` in `projector_checkpoints`.
    public static func checkpointName(partition: Int) -> String {
        "\(Schema.projectionName).partition.\(partition)"
    }

    /// What the loop holds while its session lives.
    private struct Session {
        var connection: PostgresConnection
        var member: Int
        var owned: Set<Int> = []
        var nextBalanceMicros: Int64 = 0
    }

    /// Takes partitions and folds them until `stop` is requested; then gives them up (its session
    /// closes). Survives PostgreSQL and the log going away: it reconnects and takes partitions
    /// again, from their checkpoints.
    public func run(until stop: StopSignal) {
        var session: Session?
        var retryDelay = options.retryDelayMicrosMin
        while !stop.isRequested {
            do {
                if session == nil { session = try open() }
                let now = monotonicMicros()
                if now >= session!.nextBalanceMicros {
                    try balance(&session!)
                    session!.nextBalanceMicros = now + options.leaseCheckMicros
                }
                let (folded, failure) = pass(session!)
                if let failure { throw failure }
                retryDelay = options.retryDelayMicrosMin
                if folded == 0 { _ = stop.wait(micros: options.pollMicros) }
            } catch {
                if let current = session, !current.connection.isAlive || Self.needsPrepare(error) {
                    lose(current, why: "\(error)")
                    session = nil
                }
                backOff(error, &retryDelay, stop)
            }
        }
        if let session { close(session) }
    }

    /// The projection was rebuilt under this process (by a process of another projection version,
    /// or for another log): its partitions' checkpoint rows went with the old tables. Starting
    /// again prepares it (rebuilding it for this log if needed) and takes partitions from new rows.
    static func needsPrepare(_ error: any Error) -> Bool {
        switch error as? ProjectorError {
        case .noGeneration?, .projectionOfAnotherLog?: true
        default: false
        }
    }

    /// Connects, prepares the projection (one process at a time), and registers as a member.
    private func open() throws -> Session {
        let connection = try PostgresConnection(conninfo)
        do {
            // pg_stat_activity then says which process holds which lease (PartitionLeases.holders).
            try connection.executeScript("SET application_name = 'findmy projector \(getpid())'")
            try PartitionLeases.lock(PartitionLeases.prepareClass, 0, connection)
            try projection.prepare(logID: logID, log: options.log, connection)
            try PartitionLeases.unlock(PartitionLeases.prepareClass, 0, connection)
            let member = try PartitionLeases.register(connection)
            state.withLock { $0.member = member }
            return Session(connection: connection, member: member)
        } catch {
            connection.close()
            throw error
        }
    }

    /// Gives up partitions beyond this process's share, then takes free ones up to it. With
    /// `--partitions all` the share is the selected partitions divided by the live projector
    /// processes, rounded up: N processes spread over them, and when one dies the others' shares
    /// grow and they take its partitions. With a fixed set the share is the whole set.
    private func balance(_ session: inout Session) throws {
        let candidates = options.selection.partitions(of: reader.partitionCount)
        var share = candidates.count
        if options.selection == .all {
            let members = max(1, try PartitionLeases.members(session.connection))
            share = (candidates.count + members - 1) / members
        }
        while session.owned.count > share, let partition = session.owned.max() {
            try PartitionLeases.unlock(PartitionLeases.partitionClass, partition, session.connection)
            session.owned.remove(partition)
            state.withLock {
                $0.checkpoints[partition] = nil
                $0.released += 1
            }
            options.log("projector: partition \(partition) released (share \(share))")
        }
        for partition in candidates where session.owned.count < share && !session.owned.contains(partition) {
            guard try PartitionLeases.tryLock(PartitionLeases.partitionClass, partition, session.connection)
            else { continue }
            session.owned.insert(partition)
            let checkpoint = try takeCheckpoint(partition, session.connection)
            state.withLock {
                $0.checkpoints[partition] = checkpoint
                $0.taken += 1
            }
            options.log("projector: partition \(partition) taken at offset \(checkpoint)")
        }
    }

    /// The partition's checkpoint, its row made (at 0) the first time any projector takes it.
    private func takeCheckpoint(_ partition: Int, _ connection: PostgresConnection) throws -> UInt64 {
        let s = PostgresConnection.quoteIdentifier(projection.schema)
        _ = try connection.execute(
            """
            INSERT INTO \(s).projector_checkpoints (projection, next_offset) VALUES ($1, 0)
            ON CONFLICT (projection) DO NOTHING
            """, [.text(Self.checkpointName(partition: partition))])
        return try store(partition).checkpoint(connection).next
    }

    private func store(_ partition: Int) -> ProjectionStore {
        ProjectionStore(schema: projection.schema, checkpointName: Self.checkpointName(partition: partition))
    }

    /// One read of every partition held, from the lowest of their checkpoints, then one
    /// transaction for each partition that moved. Each partition's checkpoint moves to the end
    /// the read verified (`EventLogReading`: what the reader was shown, never the end it was told,
    /// which a replica behind the leader gets wrong), so a message that was not visible in this
    /// pass is read in the next. A partition whose transaction fails (a registry row of another
    /// partition not folded yet) does not hold the others up; the first failure is returned once
    /// the others had their turn.
    private func pass(_ session: Session) -> (folded: Int, failure: (any Error)?) {
        let read: PassRead
        do {
            let logEnd = try reader.durableEndOffset()
            state.withLock { $0.logEnd = logEnd }
            read = try readPass(session, logEnd: logEnd)
        } catch {
            return (0, error)
        }
        var folded = 0
        var moved = false
        var failure: (any Error)?
        for partition in read.batches.keys.sorted() {
            var batch = read.batches[partition]!
            batch.nextOffset = max(batch.nextOffset, read.verifiedEnd)
            guard !batch.isEmpty else { continue }
            do {
                try commit(
                    partition: partition, batch, records: read.records[partition] ?? 0, session.connection)
                folded += read.records[partition] ?? 0
                moved = true
            } catch {
                failure = failure ?? error
                // A broken session ends the pass: nothing may be written without the leases.
                if !session.connection.isAlive { break }
            }
        }
        if moved && session.connection.isAlive {
            do {
                try advanceWholeCheckpoint(session.connection)
            } catch {
                failure = failure ?? error
            }
        }
        return (folded, failure)
    }

    /// What one pass read: a batch per partition held (from its checkpoint), and how far the read
    /// vouches that it saw every record of them.
    private struct PassRead {
        var batches: [Int: ProjectionBatch] = [:]
        var records: [Int: Int] = [:]
        var verifiedEnd: UInt64 = 0
    }

    /// Reads the partitions held from the lowest of their checkpoints up to `logEnd`; a
    /// partition's records below its own checkpoint are already folded and skipped. The read stops
    /// at the first record that would take a partition's transaction over its maximum.
    private func readPass(_ session: Session, logEnd: UInt64) throws -> PassRead {
        var read = PassRead()
        for partition in session.owned {
            let start = try store(partition).checkpoint(session.connection).next
            guard logEnd >= start else {
                throw ProjectorError.logBehindCheckpoint(logEnd: logEnd, checkpoint: start)
            }
            read.batches[partition] = ProjectionBatch(firstOffset: start)
        }
        guard let from = read.batches.values.map(\.firstOffset).min(), from < logEnd else { return read }
        let recordsMax = options.recordsPerTransactionMax
        let fixesMax = options.fixesPerTransactionMax
        read.verifiedEnd = try reader.read(partitions: session.owned, from: from, upTo: logEnd) {
            partition, record in
            guard var batch = read.batches[partition], record.offset >= batch.firstOffset else { return true }
            let records = read.records[partition] ?? 0
            if records > 0
                && (records >= recordsMax || batch.fixCount + Int(record.header.fixCount) > fixesMax)
            {
                return false
            }
            try batch.add(record)
            read.batches[partition] = batch
            read.records[partition] = records + 1
            return true
        }
        return read
    }

    /// Moves the projection's own checkpoint row (`Schema.projectionName`) to the lowest partition
    /// checkpoint once every partition has one: every record below it is folded, whichever
    /// partition holds it. What the single-log readers of that row (the compactor's scrub, a read
    /// waiting for its offset) mean by "folded up to". Never moves it back (`greatest`), so two
    /// processes writing it in turn cannot undo each other.
    private func advanceWholeCheckpoint(_ connection: PostgresConnection) throws {
        let s = PostgresConnection.quoteIdentifier(projection.schema)
        _ = try connection.execute(
            """
            UPDATE \(s).projector_checkpoints SET next_offset = greatest(next_offset, m.low), updated_at = now()
            FROM (SELECT min(next_offset) AS low, count(*) AS n FROM \(s).projector_checkpoints
                  WHERE projection LIKE $2) m
            WHERE projection = $1 AND m.n = $3
            """,
            [
                .text(Schema.projectionName), .text(Schema.projectionName + ".partition.%"),
                .int64(Int64(reader.partitionCount)),
            ])
    }

    /// Folds one partition's batch and moves its checkpoint, in one transaction.
    private func commit(
        partition: Int, _ batch: ProjectionBatch, records: Int, _ connection: PostgresConnection
    )
        throws
    {
        var batch = batch
        let duplicates = try dropKnownArrivals(&batch, connection)
        try store(partition).apply(batch, nowMicros: clock(), logID: logID, connection)
        state.withLock {
            $0.checkpoints[partition] = batch.nextOffset
            $0.recordsFolded += records
            $0.fixesFolded += batch.fixCount
            $0.transactions += 1
            $0.duplicateArrivals += duplicates
            $0.lastError = nil
        }
    }

    /// Removes from `batch` the arrivals (`device_batches` rows) already in the projection or
    /// earlier in the batch: the same device, batch id and `received_at`. On JetStream a record is
    /// never rewritten in place: retention publishes what is kept of a record as a new message and
    /// deletes the old one (docs/scale.md), so the same arrival can come twice, at two offsets. Its
    /// fixes are folded as duplicates by the history's unique key already; this is the same rule
    /// for "what arrived when". Read outside the transaction: only the holder of the partition's
    /// lease writes its devices' rows, and the transaction's checkpoint condition catches the rest.
    private func dropKnownArrivals(_ batch: inout ProjectionBatch, _ connection: PostgresConnection) throws
        -> Int
    {
        guard !batch.batches.isEmpty else { return 0 }
        var seen = Set<ArrivalKey>()
        let unique = batch.batches.filter { seen.insert(ArrivalKey($0)).inserted }
        let s = PostgresConnection.quoteIdentifier(projection.schema)
        let known = try connection.execute(
            """
            SELECT v.i FROM unnest($1::bigint[], $2::uuid[], $3::timestamptz[]) WITH ORDINALITY AS v (d, b, r, i)
            WHERE EXISTS (SELECT 1 FROM \(s).device_batches x
                          WHERE x.device_id = v.d AND x.received_at = v.r AND x.batch_id = v.b)
            """,
            [
                .int64Array(unique.map { Int64($0.deviceID) }),
                .array(
                    PostgresArray(.uuid, unique.map { .uuid(high: $0.batchID.high, low: $0.batchID.low) })),
                .timestampArray(micros: unique.map(\.receivedAtMicros)),
            ])
        var knownIndexes = Set<Int>()
        for row in 0..<known.rowCount { knownIndexes.insert(Int(try known.int64(row, 0) ?? 0) - 1) }
        let kept = unique.enumerated().filter { !knownIndexes.contains($0.offset) }.map(\.element)
        let dropped = batch.batches.count - kept.count
        batch.batches = kept
        return dropped
    }

    /// The session broke: its locks are gone with it, so are this process's partitions.
    private func lose(_ session: Session, why: String) {
        session.connection.close()
        state.withLock {
            $0.released += $0.checkpoints.count
            $0.checkpoints = [:]
            $0.member = nil
        }
        options.log("projector: \(PartitionedProjectorError.sessionLost(why))")
    }

    /// Stopping: closing the session gives every partition up at once.
    private func close(_ session: Session) {
        session.connection.close()
        state.withLock {
            $0.checkpoints = [:]
            $0.member = nil
        }
    }

    private func backOff(_ error: any Error, _ retryDelay: inout Int64, _ stop: StopSignal) {
        waitAfterFailure(
            error, name: "projector", log: options.log, &retryDelay,
            maxMicros: options.retryDelayMicrosMax, stop
        ) { message in
            state.withLock { status in
                defer { status.lastError = message }
                return status.lastError != message
            }
        }
    }
}

/// After a failure that may pass (PostgreSQL or the log unreachable): says so when `isNew` says
/// the message was not the last one too, waits `retryDelay` (a stop wakes it at once), and doubles
/// it up to `maxMicros`. The leased projectors' back-off.
func waitAfterFailure(
    _ error: any Error, name: String, log: (String) -> Void, _ retryDelay: inout Int64, maxMicros: Int64,
    _ stop: StopSignal, isNew: (String) -> Bool
) {
    let message = "\(error)"
    if isNew(message) { log("\(name): \(message); retrying") }
    _ = stop.wait(micros: retryDelay)
    retryDelay = min(retryDelay * 2, maxMicros)
}

/// What makes two arrivals the same arrival.
private struct ArrivalKey: Hashable {
    var deviceID: UInt64
    var batchID: UUID128
    var receivedAtMicros: Int64

    init(_ row: BatchRow) {
        deviceID = row.deviceID
        batchID = row.batchID
        receivedAtMicros = row.receivedAtMicros
    }
}
