import Compactor
import Events
import NATSLog
import Postgres
import Threads

/// What one retention run on a JetStream log did (or, dry, would do).
public struct JetStreamRetentionReport: Sendable, Equatable {
    public var partitions: [Int] = []
    public var messagesScanned = 0
    /// Messages erased: dead whole, or replaced.
    public var messagesErased = 0
    /// Messages published in place of an erased one: what lives of it (a fix batch without its
    /// dead fixes, an envelope, a waypoints list without its dead waypoints).
    public var replacementsPublished = 0
    public var fixesRemoved = 0
    public var placesRemoved = 0
    public var commandEventsRemoved = 0
    public var presenceEventsRemoved = 0
    public var database: DatabaseCompactionReport?

    public init() {}
}

/// Retention by deletion on a JetStream log (docs/scale.md, "Retention by deletion"): the same
/// policy as the local compactor (`RetentionPolicy`, `RetentionPolicy.plan`: windows, envelopes,
/// erasures, removals, places, commands, presence) applied to messages, which cannot be rewritten:
///
///   keep                 nothing
///   drop (dead whole)    erase the message
///   replace (part lives) publish what lives as a new message of the same partition (the same
///                        device, batch id and `received_at`; Msg-Id `x<offset>`), then erase the
///                        message. Publish first: a crash in between leaves both, never neither,
///                        and the next run erases the old one again (its plan is the same)
///
/// A replacement has a new, later offset. The fold takes its fixes as duplicates of the ones
/// already projected (the history's unique key) and its arrival as a duplicate of the one already
/// there (`PartitionedProjector`'s arrival rule); a projector that had not reached the old message
/// folds the replacement instead. Erasures and removals are applied before publishing, so a
/// replacement never carries a fix an erasure between the two offsets covered.
public struct JetStreamRetention {
    public let log: JetStreamLog
    public let settings: RetentionSettings

    public init(log: JetStreamLog, settings: RetentionSettings) {
        self.log = log
        self.settings = settings
    }

    /// The policy the registry events of every partition add up to, below `end`. Every partition
    /// is read: a user's retention change is in partition 0, a device's events in the device's
    /// own; within each, in order, so the fold is the local log's.
    public func policy(upTo end: UInt64) throws -> RetentionPolicy {
        var policy = RetentionPolicy(settings: settings)
        for partition in 0..<log.partitionCount {
            try log.read(partition: partition, from: 0, upTo: end) { record in
                let header = record.header
                guard !header.isPayloadRemoved, !RetentionPolicy.isLocationRecord(header.type) else {
                    return true
                }
                let event = try record.event()
                policy.apply(event, offset: record.offset)
                policy.collectCommand(event, offset: record.offset)
                policy.collectSetting(event, offset: record.offset)
                return true
            }
        }
        return policy
    }

    /// Applies retention at `nowMicros` to `partitions` (every one by default), then, with a
    /// database, to the projection (the compactor's `DatabaseCompaction`, bound to this log's id).
    public func run(
        partitions: [Int]? = nil, nowMicros: Int64, database: PostgresConnection? = nil,
        rowsPerStatementMax: Int = 5_000, dryRun: Bool = false
    ) throws -> JetStreamRetentionReport {
        let end = try log.durableEndOffset()
        let policy = try policy(upTo: end)
        var report = JetStreamRetentionReport()
        report.partitions = partitions ?? Array(0..<log.partitionCount)
        for partition in report.partitions {
            try log.read(partition: partition, from: 0, upTo: end) { record in
                report.messagesScanned += 1
                let plan = try policy.plan(record, nowMicros: nowMicros)
                report.fixesRemoved += plan.removedFixes
                report.placesRemoved += plan.removedPlaces
                report.commandEventsRemoved += plan.removedCommandEvents
                report.presenceEventsRemoved += plan.removedPresenceEvents
                switch plan.decision(for: record.header) {
                case .keep:
                    return true
                case .drop:
                    if !dryRun { try log.erase(offset: record.offset) }
                case .replace(let kept):
                    if !dryRun {
                        _ = try log.appendReplacement(kept, replacing: record.offset)
                        try log.erase(offset: record.offset)
                    }
                    report.replacementsPublished += 1
                }
                report.messagesErased += 1
                return true
            }
        }
        if let database {
            let compaction = DatabaseCompaction(
                policy: policy, nowMicros: nowMicros, rowsPerStatementMax: rowsPerStatementMax,
                logID: try log.logID())
            report.database = try compaction.run(database, dryRun: dryRun)
        }
        return report
    }
}
