import Events
import Foundation
import NATSLog
import NATSSupport
import Synchronization
import Testing
import Threads

// Against a real three-node nats-server cluster (Tests/NATSSupport): each test starts its own on
// free ports and the cluster's deinit kills and reaps every node, whether the test passes or not.
// Serialized: three JetStream servers per test are enough for a shared two-core machine.

private func fixBatch(device: UInt64, index: Int) -> EncodedEvent {
    let fixes = (0..<(1 + index % 3)).map { fix in
        Fix(
            latitude: 52.52 + Double(device) * 0.01 + Double(fix) * 0.0001, longitude: 13.405,
            accuracyMeters: 12, batteryPercent: UInt8(50 + fix), source: "significant",
            recordedAtMicros: 1_780_000_000_000_000 + Int64(index) * 60_000_000 + Int64(fix))
    }
    return EventCodec.encode(
        .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes)),
        receivedAtMicros: 1_780_000_100_000_000 + Int64(index))
}

private func userCreated(_ id: UInt64) -> EncodedEvent {
    EventCodec.encode(
        .userCreated(
            UserCreated(
                userID: id, name: "user\(id)", role: .member, tokenHash: Array(repeating: 7, count: 32))),
        receivedAtMicros: 1_780_000_000_000_000)
}

private func configuration(_ cluster: NATSCluster, partitions: Int = 4) -> JetStreamLogConfiguration {
    var configuration = JetStreamLogConfiguration(servers: cluster.urls, partitionCount: partitions)
    configuration.appendDeadlineMillis = 30_000
    // A shared, loaded machine: after a node is killed, electing new stream and meta leaders
    // and creating a consumer took more than the default 10 s once in CI.
    configuration.readWaitMillis = 30_000
    return configuration
}

/// Every record of `partition`, in the order read.
private func readPartition(_ log: JetStreamLog, _ partition: Int, from start: UInt64 = 0) throws
    -> [LogRecord]
{
    var records: [LogRecord] = []
    try log.read(partition: partition, from: start, upTo: nil) { record in
        records.append(record)
        return true
    }
    return records
}

@Suite(.serialized) struct JetStreamLogTests {
    /// What goes in comes out: per partition, in append order, the same header and stored payload,
    /// and JetStream holds exactly one record frame per message, the local writer's bytes.
    @Test func appendedRecordsReadBackByteIdenticalInOrderPerPartition() throws {
        let cluster = try NATSCluster()
        let log = try JetStreamLog(configuration(cluster))
        var appended: [(record: EncodedEvent, offset: UInt64)] = []
        var all: [EncodedEvent] = [userCreated(1)]
        for index in 0..<5 {
            for device in UInt64(1)...12 { all.append(fixBatch(device: device, index: index)) }
        }
        all.append(userCreated(2))
        var position = 0
        for size in [1, 7, 2, 30, 100] where position < all.count {
            let batch = Array(all[position..<min(all.count, position + size)])
            let offsets = try log.append(batch: batch)
            #expect(offsets.count == batch.count)
            appended += zip(batch, offsets).map { ($0, $1) }
            position += batch.count
        }
        #expect(appended.map(\.offset) == Array(0..<UInt64(all.count)), "offsets are stream sequences − 1")
        #expect(try log.durableEndOffset() == UInt64(all.count))

        for partition in 0..<log.partitionCount {
            let expected = appended.filter {
                log.partition(ofDevice: $0.record.header.deviceKey) == partition
            }
            let read = try readPartition(log, partition)
            #expect(read.map(\.offset) == expected.map(\.offset), "partition \(partition) in append order")
            for (record, (encoded, offset)) in zip(read, expected) {
                var header = encoded.header
                header.offset = offset
                #expect(record.header == header)
                #expect(record.storedPayload == encoded.payload)
                let stored = try log.storedMessage(offset: offset)
                #expect(stored.subject == "findmy.log.\(partition)")
                #expect(stored.bytes == JetStreamLog.messageBytes(encoded))
                #expect(
                    try record.event() == EventCodec.decode(header: encoded.header, stored: encoded.payload))
            }
            // From the middle: the suffix, nothing before it.
            if expected.count > 2 {
                let middle = expected[expected.count / 2].offset
                #expect(
                    try readPartition(log, partition, from: middle).map(\.offset)
                        == expected.filter { $0.offset >= middle }.map(\.offset))
            }
        }
        #expect(Set(appended.map { log.partition(ofDevice: $0.record.header.deviceKey) }).count == 4)

        // The local log takes the same batch through the same protocol and gives the same events.
        let directory = NSTemporaryDirectory() + "findmy-eventlog-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let writer = try LogWriter(directory: directory)
        let localOffsets = try (writer as any EventLogAppending).append(batch: all)
        #expect(localOffsets == Array(0..<UInt64(all.count)))
        var localEvents: [Event] = []
        try (LogReader(directory: directory, writer: writer) as any EventLogReading).read(
            partition: 0, from: 0, upTo: nil
        ) { record in
            localEvents.append(try record.event())
            return true
        }
        #expect(localEvents == all.map { try! EventCodec.decode(header: $0.header, stored: $0.payload) })
        writer.close()
    }

    /// A read of several partitions visits exactly their records, in one offset order, and
    /// returns only an end it saw: the refused record's offset on a stop, the offset after the
    /// last message delivered when the stream's tail was erased (not the end it was told), and
    /// the asked end once a message at or past it came.
    @Test func aReadOfSeveralPartitionsVouchesOnlyForWhatItDelivered() throws {
        let cluster = try NATSCluster()
        let log = try JetStreamLog(configuration(cluster))
        var all: [EncodedEvent] = [userCreated(1)]
        for index in 0..<4 {
            for device in UInt64(1)...10 { all.append(fixBatch(device: device, index: index)) }
        }
        let offsets = try log.append(batch: all)
        let partitionOf = offsets.map { log.partition(ofDevice: all[Int($0)].header.deviceKey) }
        let end = UInt64(all.count)
        let wanted: Set<Int> = [0, 2]
        func readWanted(from start: UInt64, upTo limit: UInt64? = nil, stopAt stop: UInt64? = nil) throws
            -> (visited: [UInt64], end: UInt64)
        {
            var visited: [UInt64] = []
            let returned = try log.read(partitions: wanted, from: start, upTo: limit) { partition, record in
                #expect(
                    partition == log.partition(ofDevice: record.header.deviceKey),
                    "each record with its partition")
                if record.offset == stop { return false }
                visited.append(record.offset)
                return true
            }
            return (visited, returned)
        }
        let expected = offsets.filter { wanted.contains(partitionOf[Int($0)]) }

        let whole = try readWanted(from: 0)
        #expect(whole.visited == expected)
        #expect(whole.end == end)
        #expect(try readWanted(from: 5).visited == expected.filter { $0 >= 5 })
        #expect(try readWanted(from: 0, upTo: 20) == (expected.filter { $0 < 20 }, 20))
        let refused = expected[expected.count / 2]
        #expect(try readWanted(from: 0, stopAt: refused) == (expected.filter { $0 < refused }, refused))
        #expect(try readWanted(from: end).end == end, "nothing to read: the start")

        // Erase the stream's last three messages: the read is told the end is `end`, but no
        // message at or past end − 3 exists to show it, so it vouches for end − 3 only.
        for offset in (end - 3)..<end { #expect(try log.erase(offset: offset)) }
        #expect(try log.durableEndOffset() == end)
        let afterErasure = try readWanted(from: 0)
        #expect(afterErasure.visited == expected.filter { $0 < end - 3 })
        #expect(afterErasure.end == end - 3)
        #expect(try readWanted(from: end - 2) == ([], end - 2), "only erased messages: no progress")

        // A new message past the erased ones shows the reader that nothing else is there.
        let more = try log.append(batch: [fixBatch(device: 1, index: 9)])
        let newEnd = more[0] + 1
        let caughtUp = try readWanted(from: end - 3)
        #expect(caughtUp.end == newEnd)
        #expect(caughtUp.visited == (wanted.contains(log.partition(ofDevice: 1)) ? [more[0]] : []))
    }

    /// A batch retried through another ingest node (another connection, another node) is stored
    /// once: the second append answers with the first one's offset.
    @Test func aRetriedBatchIDIsOneMessage() throws {
        let cluster = try NATSCluster()
        let first = try JetStreamLog(configuration(cluster))
        var second = configuration(cluster)
        second.servers = [cluster.urls[2], cluster.urls[1]]
        let other = try JetStreamLog(second)
        let batch = fixBatch(device: 42, index: 0)
        let before = try first.append(batch: [fixBatch(device: 42, index: 1)])
        let offset = try first.append(batch: [batch])
        #expect(try other.append(batch: [batch]) == offset)
        #expect(try first.append(batch: [batch]) == offset)
        #expect(try first.durableEndOffset() == 2)
        let read = try readPartition(other, other.partition(ofDevice: 42))
        #expect(read.map(\.offset) == before + offset)
        #expect(read.filter { $0.header.idempotencyKey == batch.header.idempotencyKey }.count == 1)
    }

    /// Two ingest nodes appending the same batches at the same instant: a copy that arrives while
    /// the first is still being replicated is answered by nats-server 2.10 as a duplicate with
    /// sequence 0. Every append still returns the one offset the batch is stored at (an offset
    /// of 2^64 - 1, or a trap, was what the node made of that answer).
    @Test func theSameBatchAppendedAtOnceThroughTwoConnectionsHasOneOffset() throws {
        let cluster = try NATSCluster()
        var second = configuration(cluster, partitions: 1)
        second.servers = [cluster.urls[2], cluster.urls[1]]
        let logs = [try JetStreamLog(configuration(cluster, partitions: 1)), try JetStreamLog(second)]
        let batches = (0..<200).map { fixBatch(device: 7, index: $0) }
        let answers = Mutex([[UInt64]](repeating: [], count: 2))
        let threads = (0..<2).map { node in
            spawnThread {
                // One record an append, in the same order on both: each pair of copies races.
                let offsets = batches.map { (try? logs[node].append(batch: [$0]).first) ?? UInt64.max }
                answers.withLock { $0[node] = offsets }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        let (first, other) = answers.withLock { ($0[0], $0[1]) }
        #expect(first == other)
        #expect(!first.contains(UInt64.max))
        let stored = try readPartition(logs[0], 0)
        #expect(stored.count == batches.count)
        #expect(stored.map(\.offset) == first)
        #expect(stored.map(\.header.idempotencyKey) == batches.map(\.header.idempotencyKey))
    }

    /// `sync_interval: always` (docs/scale.md, "What the acknowledgement promises"): each node
    /// fsyncs a message before it counts towards the acknowledgement. The configuration an operator
    /// who wants the local log's promise writes; nats-server 2.9.10 refuses to start with it.
    @Test func aClusterThatSyncsEveryMessageAcknowledgesAndReadsBack() throws {
        let cluster = try NATSCluster(syncInterval: "always")
        let log = try JetStreamLog(configuration(cluster, partitions: 2))
        let batches = (0..<20).map { fixBatch(device: UInt64($0 % 4 + 1), index: $0) }
        let offsets = try log.append(batch: batches)
        #expect(offsets == Array(0..<20))
        let read = try (0..<2).flatMap { try readPartition(log, $0) }.sorted { $0.offset < $1.offset }
        #expect(read.map(\.header.idempotencyKey) == batches.map(\.header.idempotencyKey))
    }

    /// With the stream's leader killed, appends still succeed (a new leader, 2 of 3 replicas) and
    /// nothing acknowledged before is missing.
    @Test func withOneNodeKilledAppendsStillSucceed() throws {
        let cluster = try NATSCluster()
        let log = try JetStreamLog(configuration(cluster))
        var offsets = try log.append(batch: (0..<10).map { fixBatch(device: UInt64($0 + 1), index: 0) })
        let leader = try #require(try log.streamLeader())
        let index = try #require(cluster.nodes.firstIndex { $0.name == leader })
        cluster.kill(index)
        let after = (0..<10).map { fixBatch(device: UInt64($0 + 1), index: 1) }
        offsets += try log.append(batch: after)
        #expect(offsets.count == 20)
        #expect(try log.streamLeader() != leader)
        var seen: [UInt64] = []
        for partition in 0..<log.partitionCount {
            seen += try readPartition(log, partition).map(\.offset)
        }
        #expect(seen.sorted() == offsets.sorted(), "every acknowledged record, once")
    }

    /// With two of three nodes killed there is no quorum: an append fails with a clear error and
    /// returns no offset. Once the nodes are back, retrying the same batch stores it exactly once.
    @Test func withTwoNodesKilledAnAppendFailsClearlyAndARetryLaterIsStoredOnce() throws {
        let cluster = try NATSCluster()
        var settings = configuration(cluster)
        settings.appendDeadlineMillis = 4_000
        let log = try JetStreamLog(settings)
        _ = try log.append(batch: [fixBatch(device: 7, index: 0)])
        cluster.kill(1)
        cluster.kill(2)
        let batch = fixBatch(device: 7, index: 1)
        var acknowledged: [UInt64]?
        do {
            acknowledged = try log.append(batch: [batch])
            Issue.record("an append without a quorum returned offsets")
        } catch let error as JetStreamLogError {
            guard case .noQuorum = error else {
                Issue.record("expected noQuorum, got \(error)")
                return
            }
            #expect("\(error)".contains("quorum"))
            #expect("\(error)".contains("Nothing was acknowledged"))
        }
        #expect(acknowledged == nil)
        try cluster.restart(1)
        try cluster.restart(2)
        try cluster.waitUntilWhole()
        var later = configuration(cluster)
        later.appendDeadlineMillis = 60_000
        let again = try JetStreamLog(later)
        let offset = try again.append(batch: [batch])
        let read = try readPartition(again, again.partition(ofDevice: 7))
        #expect(
            read.filter { $0.header.idempotencyKey == batch.header.idempotencyKey }.map(\.offset) == offset)
        #expect(read.count == 2)
    }

    /// A node that was down while records were appended catches up after its restart; a read's
    /// consumer placed on it meanwhile says "nothing pending" before the newest record. Every read
    /// of a partition still returns every record up to the leader's newest (CI once read one of two).
    @Test func aReadRightAfterANodesRestartReturnsEveryRecord() throws {
        let cluster = try NATSCluster()
        let log = try JetStreamLog(configuration(cluster, partitions: 1))
        let leader = try #require(try log.streamLeader())
        let follower = try #require(cluster.nodes.firstIndex { $0.name != leader })
        cluster.kill(follower)
        var offsets: [UInt64] = []
        for round in 0..<40 {
            let batch = (0..<50).map { fixBatch(device: UInt64($0 % 5 + 1), index: round) }
            offsets += try log.append(batch: batch)
        }
        try cluster.restart(follower)
        for _ in 0..<12 {
            let read = try readPartition(log, 0).map(\.offset)
            #expect(read == offsets, "read \(read.count) records ending at \(read.last ?? 0)")
        }
    }

    /// The partition count is fixed at creation: opening with another count is refused, naming
    /// both; a missing stream is refused when creation is off.
    @Test func aStreamIsCheckedWhenOpened() throws {
        let cluster = try NATSCluster()
        _ = try JetStreamLog(configuration(cluster, partitions: 4))
        #expect(throws: JetStreamLogError.wrongPartitionCount(stream: "FINDMY_LOG", found: 4, expected: 8)) {
            try JetStreamLog(configuration(cluster, partitions: 8))
        }
        var missing = configuration(cluster)
        missing.streamName = "FINDMY_OTHER"
        missing.subjectPrefix = "findmy.other"
        missing.createsStream = false
        #expect(throws: JetStreamLogError.streamMissing(stream: "FINDMY_OTHER")) {
            try JetStreamLog(missing)
        }
    }
}

/// A device's partition is a fixed function of its id, the same in every process and release
/// (the values pinned here come from an independent FNV-1a in Python; a change here moves
/// devices between partitions).
@Test func aDeviceAlwaysLandsInTheSamePartition() {
    #expect(
        (1...8).map { LogPartitioning.partition(ofDevice: UInt64($0), partitionCount: 8) }
            == [4, 7, 6, 1, 0, 3, 2, 5])
    #expect(LogPartitioning.partition(ofDevice: 0, partitionCount: 8) == 0)
    for device in UInt64(1)...1000 {
        let partition = LogPartitioning.partition(ofDevice: device, partitionCount: 16)
        #expect(partition == LogPartitioning.partition(ofDevice: device, partitionCount: 16))
    }
    var counts = [Int](repeating: 0, count: 16)
    for device in UInt64(1)...16_000 {
        counts[LogPartitioning.partition(ofDevice: device, partitionCount: 16)] += 1
    }
    #expect(counts.allSatisfy { $0 > 800 && $0 < 1200 }, "spread: \(counts)")
}
