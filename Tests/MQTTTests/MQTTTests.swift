import Foundation
import MQTT
import MosquittoSupport
import Synchronization
import Testing
import Threads

// MARK: the codec and the acknowledgement order, as values

@Test func packetsReadTheSameWhateverPiecesTheBytesArriveIn() throws {
    let publishes = [
        Publish(
            topic: "owntracks/alice/phone", payload: Array("{\"_type\":\"location\"}".utf8), qos: 1,
            packetID: 7),
        Publish(topic: "a/b", payload: [], qos: 0, retain: true, packetID: nil),
        Publish(
            topic: "owntracks/bob/tablet", payload: [UInt8](repeating: 0x41, count: 300), qos: 1,
            duplicate: true,
            packetID: 65535),
    ]
    var stream: [UInt8] = [0x20, 0x02, 0x01, 0x00]  // CONNACK, session present
    stream += [0x90, 0x03, 0x00, 0x01, 0x01]  // SUBACK id 1, QoS 1 granted
    for publish in publishes { stream += OutboundPacket.publish(publish) }
    stream += [0xD0, 0x00]  // PINGRESP
    let expected: [InboundPacket] =
        [
            .connectAcknowledged(sessionPresent: true, returnCode: 0),
            .subscribeAcknowledged(packetID: 1, granted: [1]),
        ]
        + publishes.map { .publish($0) } + [.pingResponse]

    for pieceBytes in [stream.count, 1, 2, 3, 7] {
        var reader = PacketReader()
        var read: [InboundPacket] = []
        var index = 0
        while index < stream.count {
            reader.append(stream[index..<min(stream.count, index + pieceBytes)])
            index += pieceBytes
            while let packet = try reader.next() { read.append(packet) }
        }
        #expect(read == expected, "pieces of \(pieceBytes) bytes")
    }
}

@Test func aPacketBeyondTheLimitOrMalformedIsAnErrorNotABuffer() {
    var reader = PacketReader(packetBytesMax: 100)
    reader.append(
        OutboundPacket.publish(
            Publish(topic: "t", payload: .init(repeating: 1, count: 200), qos: 0, packetID: nil)
        ).prefix(4))
    #expect(throws: MQTTProtocolError.self) { try reader.next() }
    var fiveByteLength = PacketReader()
    fiveByteLength.append([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
    #expect(throws: MQTTProtocolError.self) { try fiveByteLength.next() }
    var shortPublish = PacketReader()
    shortPublish.append([0x32, 0x03, 0x00, 0x05, 0x61])  // topic of 5 bytes in a 3-byte body
    #expect(throws: MQTTProtocolError.self) { try shortPublish.next() }
}

@Test func acknowledgementsGoOutInTheOrderTheMessagesArrived() {
    var queue = InboundAcknowledgements()
    let first = queue.received(packetID: 10)
    let second = queue.received(packetID: 11)
    let third = queue.received(packetID: 12)
    // The third is durable first: nothing may go out before the first's PUBACK (MQTT-4.6.0-2).
    #expect(queue.acknowledge(third) == [])
    #expect(queue.acknowledge(first) == [10])
    #expect(queue.pendingCount == 2)
    #expect(queue.acknowledge(second) == [11, 12])
    #expect(queue.acknowledge(second) == [])
    #expect(queue.pendingCount == 0)
    let fourth = queue.received(packetID: 10)
    #expect(queue.acknowledge(fourth) == [10])
}

// MARK: against a real mosquitto

/// What a client was handed, and the tickets to acknowledge with.
private final class Inbox: Sendable {
    let deliveries = Mutex<[MQTTClient.Delivery]>([])
    var payloads: [String] {
        deliveries.withLock { $0.map { String(decoding: $0.publish.payload, as: UTF8.self) } }
    }
}

private func client(_ broker: Mosquitto, id: String, _ inbox: Inbox) -> MQTTClient {
    var configuration = MQTTClient.Configuration(
        host: "127.0.0.1", port: broker.port, clientID: id, topicFilters: ["owntracks/+/+"])
    configuration.reconnectDelayMillisMin = 50
    configuration.reconnectDelayMillisMax = 500
    let started = MQTTClient(configuration) { delivery in inbox.deliveries.withLock { $0.append(delivery) } }
    started.start()
    return started
}

private func waitUntil(_ condition: () -> Bool) -> Bool {
    let deadline = monotonicMicros() + 60_000_000
    while !condition() {
        if monotonicMicros() > deadline { return false }
        usleep(5_000)
    }
    return true
}

@Test func aMessageComesBackUntilTheClientAcknowledgesIt() throws {
    let broker = try Mosquitto()
    let firstInbox = Inbox()
    let first = client(broker, id: "findmy-ack-test", firstInbox)
    #expect(waitUntil { first.status.subscribed })
    try broker.publish(topic: "owntracks/alice/phone", "one")
    #expect(waitUntil { firstInbox.payloads == ["one"] })
    // Not acknowledged: the client goes away (DISCONNECT keeps the session, clean session 0).
    first.stop(graceMicros: 0)
    #expect(first.status.acknowledgementsSent == 0)

    let secondInbox = Inbox()
    let second = client(broker, id: "findmy-ack-test", secondInbox)
    #expect(waitUntil { secondInbox.payloads == ["one"] })
    let redelivered = try #require(secondInbox.deliveries.withLock { $0.first })
    #expect(redelivered.publish.duplicate)
    second.acknowledge(try #require(redelivered.ticket))
    #expect(waitUntil { second.status.acknowledgementsSent == 1 })
    second.stop(graceMicros: 1_000_000)

    let thirdInbox = Inbox()
    let third = client(broker, id: "findmy-ack-test", thirdInbox)
    #expect(waitUntil { third.status.subscribed })
    try broker.publish(topic: "owntracks/alice/phone", "two")
    #expect(waitUntil { thirdInbox.payloads.contains("two") })
    #expect(thirdInbox.payloads == ["two"], "the acknowledged 'one' is not delivered again")
    for delivery in thirdInbox.deliveries.withLock({ $0 }) { third.acknowledge(delivery.ticket!) }
    third.stop(graceMicros: 1_000_000)
}

@Test func messagesPublishedWhileTheClientIsAwayArriveInOrderWhenItReturns() throws {
    let broker = try Mosquitto()
    let before = Inbox()
    let first = client(broker, id: "findmy-away-test", before)
    #expect(waitUntil { first.status.subscribed })
    first.stop(graceMicros: 0)
    for index in 1...5 { try broker.publish(topic: "owntracks/alice/phone", "m\(index)") }
    // Another user's messages too: the filter has two levels of wildcards.
    try broker.publish(topic: "owntracks/bob/tablet", "b1")
    // Not matching the filter: never delivered.
    try broker.publish(topic: "other/alice/phone", "x")

    let after = Inbox()
    let second = client(broker, id: "findmy-away-test", after)
    #expect(waitUntil { after.payloads.count == 6 })
    #expect(after.payloads == ["m1", "m2", "m3", "m4", "m5", "b1"])
    #expect(before.payloads.isEmpty)
    // Acknowledged out of order, sent in order; all six leave the broker's session.
    for delivery in after.deliveries.withLock({ $0 }).reversed() { second.acknowledge(delivery.ticket!) }
    #expect(waitUntil { second.status.acknowledgementsSent == 6 })
    #expect(second.status.acknowledgementsPending == 0)
    second.stop(graceMicros: 1_000_000)
}

@Test func theClientReconnectsAndSubscribesAgainAfterTheBrokerRestarts() throws {
    let broker = try Mosquitto()
    let inbox = Inbox()
    let subscriber = client(broker, id: "findmy-restart-test", inbox)
    defer { subscriber.stop(graceMicros: 0) }
    #expect(waitUntil { subscriber.status.subscribed })
    // The restarted broker has no sessions (persistence off): the subscription must come again.
    try broker.restart()
    #expect(waitUntil { subscriber.status.connections == 2 && subscriber.status.subscribed })
    try broker.publish(topic: "owntracks/alice/phone", "after restart")
    #expect(waitUntil { inbox.payloads == ["after restart"] })
    #expect(subscriber.status.lastError != nil)
}

@Test func anUnreachableBrokerIsReportedAndRetried() throws {
    let broker = try Mosquitto()
    // Nothing listens on the port of a killed broker: the client keeps trying and says why.
    broker.kill()
    let inbox = Inbox()
    let subscriber = client(broker, id: "findmy-refused-test", inbox)
    #expect(waitUntil { subscriber.status.lastError?.contains("cannot connect") == true })
    #expect(!subscriber.status.connected)
    try broker.restart()
    #expect(waitUntil { subscriber.status.subscribed })
    subscriber.stop(graceMicros: 0)
}

@Test func aTopicFilterSaysWhatEachWildcardMatched() throws {
    let filter = try #require(TopicFilter("owntracks/+/+", wildcards: 2))
    #expect(filter.match("owntracks/alice/phone") == ["alice", "phone"])
    #expect(filter.match("owntracks/alice/phone/event") == nil)
    #expect(filter.match("owntracks/alice") == nil)
    #expect(filter.match("owntracks//phone") == nil)
    #expect(filter.match("other/alice/phone") == nil)
    #expect(TopicFilter("home/+/tracks/+", wildcards: 2)?.match("home/bob/tracks/ipad") == ["bob", "ipad"])
    #expect(TopicFilter("owntracks/#", wildcards: 2) == nil)
    #expect(TopicFilter("owntracks/+", wildcards: 2) == nil)
    #expect(TopicFilter("owntracks/a+/+", wildcards: 2) == nil)
}
