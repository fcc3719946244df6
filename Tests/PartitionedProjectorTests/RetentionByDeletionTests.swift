import Compactor
import Events
import Foundation
import JetStreamRetention
import NATSLog
import NATSSupport
import Postgres
import Projector
import Testing
import Threads

// Retention by deletion on a real three-node JetStream cluster, with the projection in a private
// PostgreSQL, on an injected clock (`now`): the log after a run holds no expired, erased or removed
// fix and every kept one; the projection equals a fresh fold of what the log still holds.

private let day: Int64 = 86_400_000_000
private let now: Int64 = 1_790_000_000_000_000

/// A fix as the history's unique key sees it.
private struct FixKey: Hashable, Comparable {
    var device: UInt64
    var recordedAtMicros: Int64
    var latitude: Double
    var longitude: Double

    static func < (a: FixKey, b: FixKey) -> Bool {
        (a.device, a.recordedAtMicros, a.latitude, a.longitude) < (
            b.device, b.recordedAtMicros, b.latitude, b.longitude
        )
    }
}

private struct Arrival: Hashable {
    var device: UInt64
    var batchID: UUID128
}

@Suite(.serialized) struct RetentionByDeletionTests {
    @Test func expiredFixesAreGoneFromEveryPartitionAndTheProjectionMatchesAFreshFold() throws {
        let cluster = try NATSCluster()
        let postgres = try ScratchPostgres()
        let log = try JetStreamLog(cluster.patientLogConfiguration(partitions: 4))
        let settings = RetentionSettings(retentionDays: 30, arrivalsRetentionDays: 90)
        let devices = 8

        _ = try log.append(batch: registry(devices: devices, atMicros: now - 200 * day))
        // Device 8 keeps fixes 5 days only.
        _ = try log.append(batch: [
            EventCodec.encode(
                .retentionChanged(RetentionChanged(scope: .device(8), days: 5)),
                receivedAtMicros: now - 150 * day)
        ])
        var kept = Set<FixKey>()
        var keptArrivals = Set<Arrival>()
        var erasedMessages: [[UInt8]] = []
        func append(
            _ device: UInt64, _ recordedDaysAgo: [Int64], receivedDaysAgo: Int64, keep: [Bool], arrival: Bool
        )
            throws
        {
            let record = fixBatch(
                device: device, recordedAtMicros: recordedDaysAgo.map { now - $0 * day },
                receivedAtMicros: now - receivedDaysAgo * day)
            _ = try log.append(batch: [record])
            guard
                case .fixBatch(let batch) = try EventCodec.decode(
                    header: record.header, stored: record.payload)
            else { return }
            for (fix, keepIt) in zip(batch.fixes, keep) where keepIt {
                kept.insert(
                    FixKey(
                        device: device, recordedAtMicros: fix.recordedAtMicros, latitude: fix.latitude,
                        longitude: fix.longitude))
            }
            if arrival { keptArrivals.insert(Arrival(device: device, batchID: batch.batchID)) }
            if keep.contains(false) { erasedMessages.append(record.payload) }
        }
        for device in UInt64(1)...UInt64(devices) {
            let shortWindow = device == 8
            let erased = device == 2  // erased from 3 days ago on, below
            let removed = device == 7  // removed, below
            let alive = !removed
            // Past the envelope window (90 days) too: the message goes whole.
            try append(device, [120, 120], receivedDaysAgo: 120, keep: [false, false], arrival: false)
            // Expired (30 days), the envelope lives: an envelope replaces it.
            try append(device, [40, 40], receivedDaysAgo: 40, keep: [false, false], arrival: alive)
            // Mixed: the first fix expired, the others live (not for the 5-day device).
            try append(
                device, [35, 20, 19], receivedDaysAgo: 19,
                keep: [false, alive && !shortWindow, alive && !shortWindow], arrival: alive)
            // Fresh, unless erased or removed.
            try append(
                device, [2, 1], receivedDaysAgo: 1, keep: [alive && !erased, alive && !erased], arrival: alive
            )
        }
        _ = try log.append(batch: [
            EventCodec.encode(
                .historyErased(HistoryErased(deviceID: 2, fromMicros: now - 3 * day, toMicros: now)),
                receivedAtMicros: now - day / 2),
            EventCodec.encode(.deviceRemoved(DeviceRemoved(deviceID: 7)), receivedAtMicros: now - day / 2),
        ])

        let admin = try PostgresConnection(postgres.conninfo)
        defer { admin.close() }
        let logID = try log.logID()
        // The projection before retention: it folded everything, expired fixes included.
        try project(log, postgres, logID: logID, schema: "findmy")
        #expect(try count(admin, "SELECT count(*) FROM findmy.device_locations") > kept.count)

        let report = try JetStreamRetention(log: log, settings: settings).run(nowMicros: now, database: admin)
        #expect(report.messagesErased > 0 && report.replacementsPublished > 0, "\(report)")
        #expect((report.database?.locationRowsDeleted ?? 0) > 0, "\(report)")

        // The log: no expired, erased or removed fix; every kept fix once; every live arrival once.
        var fixesInLog: [FixKey] = []
        var arrivalsInLog: [Arrival] = []
        for partition in 0..<log.partitionCount {
            try log.read(partition: partition, from: 0, upTo: nil) { record in
                guard record.header.type == EventType.fixBatch.rawValue else { return true }
                arrivalsInLog.append(
                    Arrival(device: record.header.deviceKey, batchID: record.header.idempotencyKey))
                guard !record.header.isPayloadRemoved, case .fixBatch(let batch) = try record.event() else {
                    return true
                }
                fixesInLog += batch.fixes.map {
                    FixKey(
                        device: batch.deviceID, recordedAtMicros: $0.recordedAtMicros, latitude: $0.latitude,
                        longitude: $0.longitude)
                }
                return true
            }
        }
        #expect(fixesInLog.sorted() == kept.sorted(), "the log holds exactly the kept fixes")
        #expect(arrivalsInLog.count == keptArrivals.count && Set(arrivalsInLog) == keptArrivals)

        // A second run finds nothing more to do.
        let again = try JetStreamRetention(log: log, settings: settings).run(nowMicros: now)
        #expect(again.messagesErased == 0 && again.replacementsPublished == 0, "\(again)")

        // The projection, after folding the replacements, holds what a fresh fold of the log holds.
        try project(log, postgres, logID: logID, schema: "findmy")
        try project(log, postgres, logID: logID, schema: "fresh")
        for (what, columns) in [
            ("device_locations", "device_id, recorded_at, latitude, longitude"),
            ("device_batches", "device_id, batch_id, received_at"),
            ("device_latest", "device_id, recorded_at, latitude, longitude"),
            ("devices", "id, name"),
        ] {
            let width = columns.split(separator: ",").count
            let live = try rows(
                admin, "SELECT \(columns) FROM findmy.\(what) ORDER BY \(columns)", columns: width)
            let fresh = try rows(
                admin, "SELECT \(columns) FROM fresh.\(what) ORDER BY \(columns)", columns: width)
            #expect(live == fresh, "\(what): the projection is the fold of the log")
        }
        #expect(try count(admin, "SELECT count(*) FROM findmy.device_locations") == kept.count)
        #expect(
            try count(admin, "SELECT count(*) FROM findmy.device_batches") == keptArrivals.count,
            "no arrival twice")

        // On disk: the erased messages' bytes are at once in no message block of the stream; the
        // stream's Raft log holds them until nats-server's next snapshot of the stream compacts it
        // (every two to three minutes in 2.10.27): waited for, with a generous deadline.
        let erasedAt = Date()
        let residue = try storeFilesHolding(erasedMessages, under: cluster.directory)
        print(
            "retention by deletion: \(erasedMessages.count) erased messages; files holding their bytes: \(residue)"
        )
        #expect(
            residue.allSatisfy { $0.contains("/_js_/") }, "the stream's own blocks hold no erased message")
        try waitUntil(
            "no file of the three nodes holds an erased message", timeoutSeconds: 400, intervalMillis: 50
        ) {
            try storeFilesHolding(erasedMessages, under: cluster.directory).isEmpty
        }
        print(
            "retention by deletion: the Raft logs let the erased messages go \(Int(Date().timeIntervalSince(erasedAt))) s after the run"
        )
    }
}

/// Runs a partitioned projector over every partition of `log` into `schema` until every partition
/// has reached the log's end, then stops it (releasing its leases).
func project(
    _ log: JetStreamLog, _ postgres: ScratchPostgres, logID: UUID128, schema: String, now: Int64 = now
) throws {
    var options = PartitionedProjector.Options()
    options.log = { _ in }
    let projector = PartitionedProjector(
        conninfo: postgres.conninfo, reader: log, logID: logID, schema: schema, options: options,
        clock: { now })
    let end = try log.durableEndOffset()
    let stop = StopSignal()
    let thread = spawnThread { projector.run(until: stop) }
    defer {
        stop.request()
        pthread_join(thread, nil)
    }
    try waitUntil(
        "the projector in \(schema) reaches offset \(end): \(projector.status)", timeoutSeconds: 120,
        intervalMillis: 50
    ) {
        let status = projector.status
        return status.checkpoints.count == log.partitionCount
            && status.checkpoints.values.allSatisfy { $0 >= end }
    }
}

private func rows(_ connection: PostgresConnection, _ sql: String, columns: Int) throws -> [[String]] {
    let result = try connection.execute(sql)
    return (0..<result.rowCount).map { row in
        (0..<columns).map { result.string(row, $0) ?? "NULL" }
    }
}

/// Files under `directory` that contain any of `needles` (each at least 16 bytes).
private func storeFilesHolding(_ needles: [[UInt8]], under directory: String) throws -> [String] {
    var found: [String] = []
    let enumerator = FileManager.default.enumerator(atPath: directory)
    while let relative = enumerator?.nextObject() as? String {
        let path = directory + "/" + relative
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
            let data = FileManager.default.contents(atPath: path)
        else { continue }
        let bytes = [UInt8](data)
        if needles.contains(where: { $0.count >= 16 && contains(bytes, $0) }) { found.append(relative) }
    }
    return found.sorted()
}

private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard needle.count <= haystack.count, let first = needle.first else { return false }
    var index = 0
    while index <= haystack.count - needle.count {
        if haystack[index] == first && Array(haystack[index..<index + needle.count]) == needle { return true }
        index += 1
    }
    return false
}
