import Threads

// The log as an interface (docs/scale.md): the local segment log of this module and the
// NATS JetStream log of `NATSLog` hold the same record bytes (a version-1 record frame per request,
// docs/log-format.md) and answer the same three questions: append these records and say once they
// are durable; hand me a partition's records in order from an offset; how far is durable.
//
// The single-machine serve, projector and compactor hold a `LogWriter` and a `LogReader` directly;
// the partitioned projector and the ingest nodes go through these protocols.
//
// What a read returns is what the reader saw, never what it was told. A JetStream reader is
// served by one replica's store; a replica that has not applied the newest messages yet (a
// follower behind, a leader just elected) answers "nothing more" truthfully for itself. So a read
// vouches only for what it delivered: in one in-order delivery, a message at offset X proves that
// every earlier message of what was asked for came before it. A caller that moved a checkpoint to
// the end it was told instead skipped messages for good (the fault docs/scale.md, "Combined
// failures", tells of).

/// Appends records and returns once they are durable.
public protocol EventLogAppending: Sendable {
    /// How many partitions the log has; a device's records are always in `partition(ofDevice:)`.
    var partitionCount: Int { get }

    /// Appends `records` (in this order; those of one device keep it in their partition) and
    /// returns their offsets once every one of them is durable: for the local log, fdatasynced;
    /// for JetStream, acknowledged by a quorum of the stream's replicas (docs/scale.md says what
    /// that promises). When it throws, none of them may be taken as acknowledged.
    func append(batch records: [EncodedEvent]) throws -> [UInt64]

    /// Every offset below this is durable.
    func durableEndOffset() throws -> UInt64
}

/// Reads records in order.
public protocol EventLogReading: Sendable {
    var partitionCount: Int { get }

    /// Visits the records of `partition` with offsets in `start..<end` (end defaults to the durable
    /// end), in offset order; `visit` returns false to stop. Offsets within a partition increase
    /// but need not be dense (other partitions' records, and records a compaction removed, are
    /// gaps). Returns the offset to continue from: every record of the partition below it was
    /// visited (or refused, when it is the refused record's offset). It may be below `end` though
    /// nothing was refused: records not visible to this reader yet, or an erased tail.
    @discardableResult
    func read(
        partition: Int, from start: UInt64, upTo end: UInt64?, _ visit: (LogRecord) throws -> Bool
    ) throws -> UInt64

    /// Visits the records of every partition in `partitions` with offsets in `start..<end`, in
    /// one offset order across them (`visit` gets each record's partition); `visit` returns false
    /// to stop. Returns the verified end: every record of those partitions with an offset in
    /// `start..<returned` was visited, and the refused one is at `returned`. Never more than the
    /// reader saw (see above): below `end` while records are not visible yet or the log's tail was
    /// erased; a caller reads again from it.
    func read(
        partitions: Set<Int>, from start: UInt64, upTo end: UInt64?,
        _ visit: (_ partition: Int, _ record: LogRecord) throws -> Bool
    ) throws -> UInt64

    /// Every offset below this is durable and may be read.
    func durableEndOffset() throws -> UInt64
}

public typealias EventLog = EventLogAppending & EventLogReading

/// Which partition a device's records go to: FNV-1a (64 bits) over the 8 little-endian bytes of
/// the server device id, modulo the partition count. Fixed here, never Swift's `Hasher` (seeded per
/// process): every ingest node, today's and next year's, must put a device in the same partition,
/// because the fold needs a device's records in order and order is only kept within a partition.
/// Records about no device (device key 0: users, settings) go to partition 0.
public enum LogPartitioning {
    public static func partition(ofDevice deviceKey: UInt64, partitionCount: Int) -> Int {
        precondition(partitionCount >= 1, "a log has at least one partition")
        guard deviceKey != 0 else { return 0 }
        return Int(fnv1a64(deviceKey) % UInt64(partitionCount))
    }

    static func fnv1a64(_ value: UInt64) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        var remaining = value
        for _ in 0..<8 {
            hash ^= remaining & 0xff
            hash = hash &* 0x0000_0100_0000_01b3
            remaining >>= 8
        }
        return hash
    }
}

/// The local log has one partition: partition 0 is the whole log.
extension LogWriter: EventLogAppending {
    public var partitionCount: Int { 1 }

    /// Queues every record with the non-blocking append, so that they join the same group commit
    /// (one fdatasync for the batch, as concurrent appenders get), then waits for all of them.
    public func append(batch records: [EncodedEvent]) throws -> [UInt64] {
        let outcomes = BatchOutcomes(count: records.count)
        for (index, record) in records.enumerated() {
            append(record) { outcomes.settle(index, $0) }
        }
        return try outcomes.wait()
    }

    public func durableEndOffset() throws -> UInt64 { durableEnd }
}

extension LogReader: EventLogReading {
    public var partitionCount: Int { 1 }

    @discardableResult
    public func read(
        partition: Int, from start: UInt64, upTo end: UInt64?, _ visit: (LogRecord) throws -> Bool
    ) throws -> UInt64 {
        precondition(partition == 0, "the local log has one partition, 0")
        return try read(from: start, upTo: end, visit)
    }

    /// One machine's log has no replica to lag behind: its end is the writer's.
    public func read(
        partitions: Set<Int>, from start: UInt64, upTo end: UInt64?,
        _ visit: (_ partition: Int, _ record: LogRecord) throws -> Bool
    ) throws -> UInt64 {
        precondition(partitions.isSubset(of: [0]), "the local log has one partition, 0")
        guard !partitions.isEmpty else { return end ?? durableEnd() }
        return try read(from: start, upTo: end) { try visit(0, $0) }
    }

    public func durableEndOffset() throws -> UInt64 { durableEnd() }
}

/// The outcomes of one batch's non-blocking appends, waited for together.
private final class BatchOutcomes: @unchecked Sendable {
    private let lock = ConditionLock(conditions: 1)
    private var results: [Result<UInt64, LogError>?]
    private var pending: Int

    init(count: Int) {
        results = Array(repeating: nil, count: count)
        pending = count
    }

    func settle(_ index: Int, _ result: Result<UInt64, LogError>) {
        lock.withLock {
            results[index] = result
            pending -= 1
            if pending == 0 { lock.broadcast() }
        }
    }

    /// The offsets in record order, or the first failure (then nothing of the batch is taken as
    /// acknowledged, though records before the failed one may be durable: a retry of the batch is
    /// folded as a duplicate by its batch id).
    func wait() throws -> [UInt64] {
        let settled = lock.withLock {
            while pending > 0 { lock.wait() }
            return results
        }
        return try settled.map { try $0!.get() }
    }
}
