import Foundation
import MQTT
import MosquittoSupport
import Synchronization
@_exported import TestSupport
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
    // A SUBACK of 200 bytes: only a PUBLISH is read past (below).
    reader.append([0x90, 0xC8, 0x01, 0x00, 0x01])
    #expect(throws: MQTTProtocolError.self) { try reader.next() }
    var fiveByteLength = PacketReader()
    fiveByteLength.append([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
    #expect(throws: MQTTProtocolError.self) { try fiveByteLength.next() }
    var shortPublish = PacketReader()
    shortPublish.append([0x32, 0x03, 0x00, 0x05, 0x61])  // topic of 5 bytes in a 3-byte body
    #expect(throws: MQTTProtocolError.self) { try shortPublish.next() }
}

@Test func aPublishBeyondTheLimitIsReadPastWithoutBeingBufferedWhateverThePieces() throws {
    let packetBytesMax = 1000
    let before = Publish(topic: "owntracks/alice/phone", payload: Array("one".utf8), qos: 1, packetID: 1)
    let after = Publish(topic: "owntracks/alice/phone", payload: Array("three".utf8), qos: 1, packetID: 3)
    let head = Array("{\"_type\":\"card\",\"face\":\"".utf8)
    var payload = head + [UInt8](repeating: 0x41, count: 50_000)
    payload += Array("\"}".utf8)
    let oversized = Publish(
        topic: "owntracks/alice/phone", payload: payload, qos: 1, duplicate: true, packetID: 2)
    let oversizedQoS0 = Publish(
        topic: "a/b", payload: [UInt8](repeating: 0x42, count: 3000), qos: 0, packetID: nil)
    var stream = OutboundPacket.publish(before) + OutboundPacket.publish(oversized)
    stream += OutboundPacket.publish(oversizedQoS0) + OutboundPacket.publish(after)
    stream += [0xD0, 0x00]  // PINGRESP
    var expectedOversized = oversized
    expectedOversized.payload = Array(payload.prefix(PacketReader.oversizedHeadBytesMax))
    expectedOversized.oversizedPayloadBytes = payload.count
    var expectedQoS0 = oversizedQoS0
    expectedQoS0.payload = Array(oversizedQoS0.payload.prefix(PacketReader.oversizedHeadBytesMax))
    expectedQoS0.oversizedPayloadBytes = 3000
    let expected: [InboundPacket] = [
        .publish(before), .publish(expectedOversized), .publish(expectedQoS0), .publish(after), .pingResponse,
    ]

    for pieceBytes in [stream.count, 1, 7, 300, 4096] {
        var reader = PacketReader(packetBytesMax: packetBytesMax)
        var read: [InboundPacket] = []
        var bufferedBytesMax = 0
        var index = 0
        while index < stream.count {
            reader.append(stream[index..<min(stream.count, index + pieceBytes)])
            index += pieceBytes
            bufferedBytesMax = max(bufferedBytesMax, reader.bufferedBytes)
            while let packet = try reader.next() { read.append(packet) }
            bufferedBytesMax = max(bufferedBytesMax, reader.bufferedBytes)
        }
        #expect(read == expected, "pieces of \(pieceBytes) bytes")
        #expect(reader.bufferedBytes == 0)
        // At most one unfinished packet within the limit (and its header) and one piece: never
        // the 50 kB message.
        if pieceBytes < stream.count {
            #expect(bufferedBytesMax <= packetBytesMax + 5 + pieceBytes, "pieces of \(pieceBytes) bytes")
        }
    }
}

@Test func anOversizedPublishCutBeforeItsPacketIDIsMalformed() {
    var reader = PacketReader(packetBytesMax: 100)
    // A QoS 1 PUBLISH of 200 bytes whose topic length (300) runs past the packet.
    reader.append([0x32, 0xC8, 0x01, 0x01, 0x2C] + [UInt8](repeating: 0x61, count: 200))
    #expect(throws: MQTTProtocolError.self) { try reader.next() }
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

// MARK: publishing (commands to phones)

@Test func publishedMessagesGoOutOnceAndAgainWithDupAfterAConnectionIsLost() {
    var queue = OutboundPublishes(capacity: 2)
    let first = queue.enqueue(topic: "owntracks/alice/phone/cmd", payload: [1])
    let second = queue.enqueue(topic: "owntracks/bob/tablet/cmd", payload: [2])
    #expect(first == 2 && second == 3, "packet id 1 is the SUBSCRIBE's")
    let beyond = queue.enqueue(topic: "t", payload: [])
    #expect(beyond == nil, "the capacity is a limit, not a hint")
    let sent = queue.takeUnsent()
    #expect(sent.map(\.packetID) == [2, 3])
    #expect(sent.allSatisfy { $0.qos == 1 && !$0.duplicate })
    let again = queue.takeUnsent()
    #expect(again.isEmpty, "sent once per connection")
    let firstAcknowledged = queue.acknowledged(packetID: 2)
    let acknowledgedTwice = queue.acknowledged(packetID: 2)
    #expect(firstAcknowledged)
    #expect(!acknowledgedTwice, "a second PUBACK for the same id is no news")
    // The connection drops before the second's PUBACK: it goes again, marked DUP, same id.
    queue.connectionLost()
    let resent = queue.takeUnsent()
    #expect(
        resent == [
            Publish(topic: "owntracks/bob/tablet/cmd", payload: [2], qos: 1, duplicate: true, packetID: 3)
        ])
    // A PUBACK of the old connection's message counts only once it was sent on this one.
    let secondAcknowledged = queue.acknowledged(packetID: 3)
    #expect(secondAcknowledged)
    #expect(queue.pendingCount == 0)
    // Ids wrap past 65535 back to 2, skipping those still in use.
    var wrapping = OutboundPublishes(capacity: 3)
    for _ in 0..<65533 {
        let id = wrapping.enqueue(topic: "t", payload: [])!
        _ = wrapping.takeUnsent()
        _ = wrapping.acknowledged(packetID: id)
    }
    let last = wrapping.enqueue(topic: "t", payload: [])
    let wrapped = wrapping.enqueue(topic: "t", payload: [])
    #expect(last == 65535)
    #expect(wrapped == 2)
    // 2 is in use now: the next free id is 3.
    let skipped = wrapping.enqueue(topic: "t", payload: [])
    #expect(skipped == 3)
}

/// What a publish's completion said, read from the test's thread.
private final class Slot: Sendable {
    private let stored = Mutex<MQTTClient.PublishOutcome?>(nil)
    var value: MQTTClient.PublishOutcome? { stored.withLock { $0 } }
    func set(_ outcome: MQTTClient.PublishOutcome) { stored.withLock { $0 = outcome } }
}

@Test func aMessagePublishedWhileTheBrokerIsDownIsAcknowledgedOnceItIsBack() throws {
    let broker = try Mosquitto()
    broker.kill()
    let subscriber = client(broker, id: "findmy-publish-test", Inbox())
    defer { subscriber.stop(graceMicros: 0) }
    let outcome = Slot()
    subscriber.publish(topic: "owntracks/alice/phone/cmd", payload: Array("locate".utf8)) { outcome.set($0) }
    #expect(waitUntil { subscriber.status.lastError?.contains("cannot connect") == true })
    #expect(outcome.value == nil, "held, not failed, while the broker is away")
    try broker.restart()
    let phone = try broker.subscribe(topic: "owntracks/alice/phone/cmd", count: 1)
    #expect(waitUntil { outcome.value == .acknowledged })
    #expect(subscriber.status.publishesAcknowledged == 1)
    _ = phone
}

@Test func aStoppedClientFailsWhatTheBrokerNeverAcknowledged() throws {
    let broker = try Mosquitto()
    broker.kill()
    let subscriber = client(broker, id: "findmy-publish-stop-test", Inbox())
    let outcome = Slot()
    subscriber.publish(topic: "owntracks/alice/phone/cmd", payload: []) { outcome.set($0) }
    subscriber.stop(graceMicros: 0)
    guard case .failed(let why) = outcome.value else {
        Issue.record("\(String(describing: outcome.value))")
        return
    }
    #expect(why.contains("stopped"))
    let after = Slot()
    subscriber.publish(topic: "t", payload: []) { after.set($0) }
    #expect(after.value == .failed("the MQTT client is stopped"))
}
