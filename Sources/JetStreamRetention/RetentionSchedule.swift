import Events
import NATSLog
import Postgres
import Threads

/// Retention by deletion on the partitions this process holds, on a schedule; the database half
/// by the holder of partition 0 only (one process, so the projection is compacted once per round).
public struct RetentionSchedule: Sendable {
    public let log: JetStreamLog
    public let settings: RetentionSettings
    public let conninfo: String
    /// The partitions this process holds now (its partitioned projector's leases).
    public let heldPartitions: @Sendable () -> [Int]
    public let firstRunMicros: Int64
    public let intervalMicros: Int64
    /// One line per run: what it did, or why it failed.
    public let report: @Sendable (String) -> Void

    public init(
        log: JetStreamLog, settings: RetentionSettings, conninfo: String,
        heldPartitions: @escaping @Sendable () -> [Int], firstRunMicros: Int64, intervalMicros: Int64,
        report: @escaping @Sendable (String) -> Void
    ) {
        self.log = log
        self.settings = settings
        self.conninfo = conninfo
        self.heldPartitions = heldPartitions
        self.firstRunMicros = firstRunMicros
        self.intervalMicros = intervalMicros
        self.report = report
    }

    /// Runs retention every `intervalMicros`, the first after `firstRunMicros`, until `stop`.
    public func run(until stop: StopSignal) {
        var delay = min(firstRunMicros, intervalMicros)
        while !stop.wait(micros: delay) {
            delay = intervalMicros
            let held = heldPartitions()
            guard !held.isEmpty else { continue }
            do {
                var database: PostgresConnection?
                if held.contains(0) { database = try PostgresConnection(conninfo) }
                defer { database?.close() }
                let report = try JetStreamRetention(log: log, settings: settings).run(
                    partitions: held, nowMicros: wallClockMicros(), database: database)
                self.report(
                    "retention: partitions \(held.map(String.init).joined(separator: ",")): "
                        + "\(report.messagesScanned) messages scanned, \(report.messagesErased) erased, "
                        + "\(report.replacementsPublished) replaced, \(report.fixesRemoved) fixes removed"
                        + (report.database.map { ", \($0.locationRowsDeleted) rows deleted" } ?? ""))
            } catch {
                self.report("retention: \(error); the next run tries again")
            }
        }
    }
}
