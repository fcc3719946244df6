import Events
import Foundation
import NATSLog
import NATSSupport
import Testing
import Threads

// What an ingest node needs of JetStream beyond the EventLog protocols (RegistryFollower.swift),
// against a real three-node cluster (Tests/NATSSupport), killed and reaped when released.

private func user(_ id: UInt64, name: String? = nil) -> EncodedEvent {
    EventCodec.encode(
        .userCreated(
            UserCreated(
                userID: id, name: name ?? "user\(id)", role: .member,
                tokenHash: Array(repeating: 7, count: 32))),
        receivedAtMicros: 1_780_000_000_000_000)
}

private func batch(device: UInt64) -> EncodedEvent {
    let fix = Fix(
        latitude: 52.52, longitude: 13.405, accuracyMeters: 12, batteryPercent: 50, source: "significant",
        recordedAtMicros: 1_780_000_000_000_000)
    return EventCodec.encode(
        .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: [fix])),
        receivedAtMicros: 1_780_000_100_000_000)
}

private func configuration(_ cluster: NATSCluster, partitions: Int = 4) -> JetStreamLogConfiguration {
    var configuration = JetStreamLogConfiguration(servers: cluster.urls, partitionCount: partitions)
    configuration.appendDeadlineMillis = 30_000
    configuration.readWaitMillis = 30_000
    return configuration
}

/// What a follower delivered, in delivery order.
private final class Delivered: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [(offset: UInt64, partition: Int, type: UInt8)] = []
    var all: [(offset: UInt64, partition: Int, type: UInt8)] { lock.withLock { items } }
    func add(_ record: LogRecord, _ partition: Int) {
        lock.withLock { items.append((record.offset, partition, record.header.type)) }
    }
}

@Suite(.serialized) struct RegistryFollowerTests {
    /// A record appended with a Msg-Id JetStream holds already (within its window) is not stored
    /// again, through another connection to another node too: the append says `duplicate` and
    /// answers with the first copy's offset, which is what an ingest node learns it lost by.
    @Test func anAppendWithAMsgIdAlreadyStoredSaysDuplicateWithTheFirstOffset() throws {
        let cluster = try NATSCluster()
        let log = try JetStreamLog(configuration(cluster))
        defer { log.close() }
        var other = configuration(cluster)
        other.servers = [cluster.urls[2]]
        let otherLog = try JetStreamLog(other)
        defer { otherLog.close() }
        let first = try log.append(record: user(2, name: "first"), messageID: "id-user-2")
        #expect(!first.duplicate)
        let second = try otherLog.append(record: user(2, name: "second"), messageID: "id-user-2")
        #expect(second.duplicate && second.offset == first.offset)
        let third = try otherLog.append(record: user(3), messageID: "id-user-3")
        #expect(!third.duplicate && third.offset == first.offset + 1)
        #expect(try log.durableEndOffset() == third.offset + 1)
        let stored = try log.storedMessage(offset: first.offset)
        #expect(stored.bytes == JetStreamLog.messageBytes(user(2, name: "first")))
    }

    /// A follower delivers every record of every partition once, in offset order: those there
    /// when it starts and those appended while it runs, through a kill of the stream's leader.
    @Test func aFollowerDeliversEveryPartitionInOffsetOrderThroughALeaderKilled() throws {
        let cluster = try NATSCluster()
        let log = try JetStreamLog(configuration(cluster))
        defer { log.close() }
        for device in 1...20 { _ = try log.append(batch: [batch(device: UInt64(device))]) }
        let delivered = Delivered()
        let follower = JetStreamFollower(log: log, from: 0) { record, partition in
            delivered.add(record, partition)
        }
        try follower.start()
        defer { follower.stop(graceMicros: 0) }
        var deadline = Date().addingTimeInterval(60)
        while delivered.all.count < 20 && Date() < deadline { usleep(10_000) }
        #expect(delivered.all.count == 20)

        let leader = try log.streamLeader()
        cluster.kill(cluster.nodes.firstIndex { $0.name == leader } ?? 0)
        var offsets: [UInt64: Int] = [:]
        for device in 21...60 {
            let record = batch(device: UInt64(device))
            let offset = try log.append(batch: [record])[0]
            offsets[offset] = log.partition(ofDevice: UInt64(device))
        }
        let end = try log.durableEndOffset()
        deadline = Date().addingTimeInterval(120)
        while follower.nextOffset < end && Date() < deadline { usleep(10_000) }
        let all = delivered.all
        #expect(all.map(\.offset) == Array(0..<end), "delivered \(all.count) of \(end)")
        for item in all where offsets[item.offset] != nil {
            #expect(item.partition == offsets[item.offset])
        }
        #expect(follower.state == .running)
    }
}
