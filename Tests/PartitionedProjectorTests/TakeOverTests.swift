import Events
import Foundation
import NATSLog
import NATSSupport
import Postgres
import Projector
import Testing
import Threads

// Two real `findmy projector` processes (FINDMY_BIN) on one three-node JetStream cluster and one
// private PostgreSQL. Every process, node and cluster this starts is released (killed, reaped,
// destroyed) when the test ends, passed or not.

@Suite(.serialized) struct TakeOverTests {
    /// Each partition is held by exactly one process at a time, the two share the four partitions,
    /// and when one is killed with SIGKILL in the middle of a burst the other takes its partitions
    /// over: every record is in PostgreSQL exactly once.
    @Test func twoProjectorsShareThePartitionsAndOneTakesOverWhenTheOtherIsKilled() throws {
        let cluster = try NATSCluster()
        let postgres = try ScratchPostgres()
        let log = try JetStreamLog(cluster.patientLogConfiguration(partitions: 4))
        let now = wallClockMicros()
        let devices = 16
        _ = try log.append(batch: registry(devices: devices, atMicros: now))
        var fixesAt: [UInt64: Int] = [:]
        func appendBatches(_ count: Int, round: Int) throws {
            for index in 0..<count {
                let device = UInt64(index % devices + 1)
                let fixes = 1 + index % 3
                let recorded = (0..<fixes).map { now - Int64(round * 10_000 + index) * 1_000_000 - Int64($0) }
                let batch = fixBatch(
                    device: device, recordedAtMicros: recorded, receivedAtMicros: now, salt: round)
                fixesAt[try log.append(batch: [batch])[0]] = fixes
            }
        }
        try appendBatches(200, round: 0)

        let arguments = [
            "--log", cluster.logArgument, "--database-url", postgres.conninfo, "--compact-interval-seconds",
            "0",
        ]
        let first = try ProjectorProcess(arguments, outputPath: postgres.directory + "/first.out")
        let second = try ProjectorProcess(arguments, outputPath: postgres.directory + "/second.out")
        let admin = try PostgresConnection(postgres.conninfo)
        defer { admin.close() }
        let context = { "first:\n\(first.output)\nsecond:\n\(second.output)" }

        // Spread: two processes, four partitions, two each (the one that started first gives two up).
        do {
            try waitUntil(
                "each process holds two of the four partitions", timeoutSeconds: 120, intervalMillis: 50
            ) {
                let holders = try PartitionLeases.holders(admin)
                return holders.count == 4
                    && holders.values.filter { $0 == first.sessionName }.count == 2
                    && holders.values.filter { $0 == second.sessionName }.count == 2
            }
            try waitUntil("the 200 batches are folded", timeoutSeconds: 120, intervalMillis: 50) {
                try folded(admin) == fixesAt.count
            }
        } catch {
            Issue.record("\(context())")
            throw error
        }
        let spreadHolders = try PartitionLeases.holders(admin)
        let firstPartitions = spreadHolders.filter { $0.value == first.sessionName }.keys.sorted()

        // A burst from another thread; the first projector is killed in the middle of it.
        let burst = Locked<[UInt64: Int]>([:])
        let burstLog = log
        let appender = spawnThread {
            for index in 0..<400 {
                let device = UInt64(index % devices + 1)
                let recorded = [now - Int64(100_000 + index) * 1_000_000]
                let batch = fixBatch(
                    device: device, recordedAtMicros: recorded, receivedAtMicros: now, salt: 1)
                if let offset = try? burstLog.append(batch: [batch])[0] {
                    burst.withLock { $0[offset] = 1 }
                }
            }
        }
        // The first projector's devices: it has folded part of the burst when it is killed.
        let firstDevices = (1...devices).filter {
            firstPartitions.contains(LogPartitioning.partition(ofDevice: UInt64($0), partitionCount: 4))
        }.map { String($0) }.joined(separator: ",")
        let burstStart = fixesAt.keys.max()! + 1
        try waitUntil(
            "part of the burst is appended, and folded by the first projector too", timeoutSeconds: 120,
            intervalMillis: 50
        ) {
            try burst.withLock { $0.count } >= 100
                && count(
                    admin,
                    "SELECT count(*) FROM findmy.device_batches WHERE log_offset >= \(burstStart) "
                        + "AND device_id IN (\(firstDevices))") > 0
        }
        first.kill9()
        let killedAt = Date()
        pthread_join(appender, nil)
        fixesAt.merge(burst.withLock { $0 }) { $1 }
        #expect(fixesAt.count == 600, "every append of the burst acknowledged")

        do {
            try waitUntil("the survivor holds every partition", timeoutSeconds: 120, intervalMillis: 50) {
                let holders = try PartitionLeases.holders(admin)
                return holders.count == 4 && holders.values.allSatisfy { $0 == second.sessionName }
            }
            let takenOver = Date().timeIntervalSince(killedAt)
            try waitUntil("all 600 batches are folded", timeoutSeconds: 120, intervalMillis: 50) {
                try folded(admin) == fixesAt.count
            }
            print(
                "take-over: \(fixesAt.count) batches acknowledged, \(try folded(admin)) in PostgreSQL; "
                    + "every partition held by the survivor \(String(format: "%.2f", takenOver)) s after the kill, "
                    + "everything folded \(String(format: "%.2f", Date().timeIntervalSince(killedAt))) s after it"
            )
        } catch {
            Issue.record("\(context())")
            throw error
        }

        // Exactly once: one arrival per record, at its offset; one history row per fix.
        let offsets = try admin.execute("SELECT log_offset FROM findmy.device_batches ORDER BY log_offset")
        let foldedOffsets = try (0..<offsets.rowCount).map { UInt64(try offsets.int64($0, 0) ?? -1) }
        #expect(foldedOffsets == fixesAt.keys.sorted(), "each record once, none missing, none extra")
        #expect(
            try count(admin, "SELECT count(*) FROM findmy.device_locations") == fixesAt.values.reduce(0, +))
        #expect(try count(admin, "SELECT count(*) FROM findmy.devices") == devices)
        // The whole projection's checkpoint moves past everything (the lowest partition's), in a
        // statement after the pass's last fold: awaited, not read at once.
        try waitUntil(
            "the whole projection's checkpoint passes the last batch", timeoutSeconds: 120, intervalMillis: 50
        ) {
            try count(admin, "SELECT next_offset FROM findmy.projector_checkpoints WHERE projection = 'main'")
                >= Int(fixesAt.keys.max()! + 1)
        }
        for partition in firstPartitions {
            #expect(second.output.contains("partition \(partition) taken"), "\(context())")
        }
        #expect(second.stop(), "the survivor stops on SIGTERM")
        let stopped = second.output.split(separator: "\n").filter { $0.contains("projector: stopped") }
        #expect(stopped.count == 1, "\(context())")
        print("take-over: the survivor says \(stopped.first ?? "nothing")")
        #expect(try PartitionLeases.holders(admin).isEmpty, "a stopped projector holds nothing")
    }
}

/// Arrivals in the projection.

@Suite(.serialized) struct ProjectorRetentionScheduleTests {
    /// `findmy projector` runs retention by deletion on its own schedule: an expired fix appended to
    /// the stream is erased from it (its envelope published again) and deleted from PostgreSQL,
    /// the fresh fix of the same device stays in both.
    @Test func theProjectorProcessErasesExpiredFixesOnItsSchedule() throws {
        let cluster = try NATSCluster()
        let postgres = try ScratchPostgres()
        let log = try JetStreamLog(cluster.patientLogConfiguration(partitions: 4))
        let now = wallClockMicros()
        let day: Int64 = 86_400_000_000
        _ = try log.append(batch: registry(devices: 2, atMicros: now - 60 * day))
        let expired = fixBatch(
            device: 1, recordedAtMicros: [now - 40 * day], receivedAtMicros: now - 40 * day)
        let fresh = fixBatch(device: 1, recordedAtMicros: [now - day], receivedAtMicros: now - day)
        let expiredOffset = try log.append(batch: [expired])[0]
        _ = try log.append(batch: [fresh])
        let process = try ProjectorProcess(
            [
                "--log", cluster.logArgument, "--database-url", postgres.conninfo, "--retention-days", "30",
                "--compact-first-run-seconds", "1", "--compact-interval-seconds", "2",
            ], outputPath: postgres.directory + "/projector.out")
        let admin = try PostgresConnection(postgres.conninfo)
        defer { admin.close() }
        do {
            try waitUntil(
                "a retention run erased the expired message", timeoutSeconds: 120, intervalMillis: 50
            ) {
                process.output.contains("1 erased, 1 replaced, 1 fixes removed")
            }
            try waitUntil("the projection holds the fresh fix only", timeoutSeconds: 120, intervalMillis: 50)
            {
                try count(admin, "SELECT count(*) FROM findmy.device_locations WHERE device_id = 1") == 1
            }
        } catch {
            Issue.record("projector:\n\(process.output)")
            throw error
        }
        var fixes: [Int64] = []
        var envelopes = 0
        try log.read(partition: log.partition(ofDevice: 1), from: 0, upTo: nil) { record in
            guard record.header.type == EventType.fixBatch.rawValue else { return true }
            #expect(record.offset != expiredOffset, "the expired message is gone")
            if record.header.isPayloadRemoved {
                envelopes += 1
            } else if case .fixBatch(let batch) = try record.event() {
                fixes += batch.fixes.map(\.recordedAtMicros)
            }
            return true
        }
        #expect(fixes == [now - day], "the log holds the fresh fix only")
        #expect(envelopes == 1, "what arrived when stays, as an envelope")
        #expect(
            try count(admin, "SELECT count(*) FROM findmy.device_batches WHERE device_id = 1") == 2,
            "both arrivals, once each")
        #expect(process.stop())
    }
}
