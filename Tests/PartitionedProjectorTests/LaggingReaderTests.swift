import Events
import Foundation
import NATSSupport
import Postgres
import Projector
import Testing
import Threads

// The fault CombinedFailureTests found about one run in 40 (docs/scale.md, "Combined failures"):
// after a NATS leader change, acknowledged batches were missing from PostgreSQL while every
// partition checkpoint had passed them. A JetStream reader is served by one replica's store, and
// a replica that has not applied the newest messages yet says, truthfully for itself, that the
// partition ends there. A projector that moves its checkpoints to the log's end instead of to
// what the reader showed it skips those messages for good.
//
// Here the replica is a fake with the protocol's semantics (it shows a prefix of the log and says
// how far it showed), in process, against a private PostgreSQL and a real `PartitionedProjector`.

/// Two partitions of records held in memory, of which readers see only the first `visible`
/// offsets: a replica behind the stream leader. `durableEndOffset` is the leader's answer.
private final class LaggingLog: EventLogReading, @unchecked Sendable {
    let records: [LogRecord]
    let partitions: [Int]
    private let visibleEnd: Locked<UInt64>

    init(_ events: [EncodedEvent], visible: UInt64) {
        records = events.enumerated().map { offset, event in
            var header = event.header
            header.offset = UInt64(offset)
            return LogRecord(
                header: header, storedPayload: event.payload, segmentPath: "memory", position: offset)
        }
        partitions = records.map {
            LogPartitioning.partition(ofDevice: $0.header.deviceKey, partitionCount: 2)
        }
        visibleEnd = Locked(visible)
    }

    var partitionCount: Int { 2 }

    var visible: UInt64 {
        get { visibleEnd.withLock { $0 } }
        set { visibleEnd.withLock { $0 = newValue } }
    }

    func durableEndOffset() throws -> UInt64 { UInt64(records.count) }

    /// What an honest replica answers: the records it holds, and the offset after the last one it
    /// showed (it cannot vouch for anything beyond its own store).
    func read(
        partition: Int, from start: UInt64, upTo end: UInt64?, _ visit: (LogRecord) throws -> Bool
    ) throws -> UInt64 {
        let limit = min(end ?? UInt64(records.count), visible)
        var next = start
        for offset in Int(start)..<Int(max(start, limit)) where partitions[offset] == partition {
            if try !visit(records[offset]) { return UInt64(offset) }
            next = UInt64(offset) + 1
        }
        return next
    }

    func read(
        partitions wanted: Set<Int>, from start: UInt64, upTo end: UInt64?,
        _ visit: (Int, LogRecord) throws -> Bool
    ) throws -> UInt64 {
        let limit = min(end ?? UInt64(records.count), visible)
        guard start < limit else { return start }
        for offset in Int(start)..<Int(limit) where wanted.contains(partitions[offset]) {
            if try !visit(partitions[offset], records[offset]) { return UInt64(offset) }
        }
        return limit
    }
}

@Suite(.serialized) struct LaggingReaderTests {
    /// The checkpoints stop where the reader's view stops, and once the replica catches up every
    /// batch is in PostgreSQL exactly once.
    @Test func checkpointsNeverPassWhatTheReaderShowed() throws {
        let postgres = try ScratchPostgres()
        let now = wallClockMicros()
        var events = registry(devices: 8, atMicros: now)
        let registryCount = events.count
        for index in 0..<120 {
            let device = UInt64(index % 8 + 1)
            events.append(
                fixBatch(
                    device: device, recordedAtMicros: [now - Int64(index) * 1_000_000], receivedAtMicros: now)
            )
        }
        let visible = UInt64(registryCount + 50)
        let log = LaggingLog(events, visible: visible)

        var options = PartitionedProjector.Options()
        options.pollMicros = 20_000
        options.log = { _ in }
        let projector = PartitionedProjector(
            conninfo: postgres.conninfo, reader: log, logID: UUID128.random(), options: options)
        let stop = StopSignal()
        let thread = spawnThread { projector.run(until: stop) }
        defer {
            stop.request()
            pthread_join(thread, nil)
        }
        let admin = try PostgresConnection(postgres.conninfo)
        defer { admin.close() }
        func checkpoints() throws -> [UInt64] {
            let exists = try admin.execute("SELECT to_regclass('findmy.projector_checkpoints') IS NOT NULL")
            guard exists.string(0, 0) == "t" else { return [] }
            let rows = try admin.execute(
                "SELECT next_offset FROM findmy.projector_checkpoints WHERE projection LIKE '%.partition.%' "
                    + "ORDER BY projection")
            return try (0..<rows.rowCount).map { UInt64(try rows.int64($0, 0) ?? -1) }
        }

        try waitUntil(
            "both partition checkpoints reach the reader's view", timeoutSeconds: 120, intervalMillis: 50
        ) {
            let found = try checkpoints()
            return found.count == 2 && found.allSatisfy { $0 >= visible }
        }
        #expect(try checkpoints() == [visible, visible], "no checkpoint passes what the reader showed")
        #expect(try folded(admin) == Int(visible) - registryCount)

        log.visible = UInt64(events.count)
        try waitUntil("every batch is folded", timeoutSeconds: 120, intervalMillis: 50) {
            try folded(admin) == events.count - registryCount
        }
        try waitUntil("both checkpoints reach the end", timeoutSeconds: 120, intervalMillis: 50) {
            try checkpoints() == [UInt64(events.count), UInt64(events.count)]
        }
        #expect(
            try count(admin, "SELECT count(*) FROM findmy.device_locations") == events.count - registryCount,
            "every fix exactly once")
    }
}
