/// The QoS 1 messages the client publishes and the broker has not yet acknowledged (PUBACK), in
/// the order they were handed in. A pure value: the client does the I/O.
///
/// MQTT 3.1.1 (4.4.0-1): a client reconnecting with clean session 0 sends every unacknowledged
/// PUBLISH again, with the same packet id and the DUP flag set. A packet id stays in use until its
/// PUBACK; ids 1 is the client's SUBSCRIBE, so publishes take 2 to 65535, wrapping around.
public struct OutboundPublishes: Sendable, Equatable {
    private struct Entry: Sendable, Equatable {
        var packetID: UInt16
        var topic: String
        var payload: [UInt8]
        /// Sent on an earlier connection: a resend carries DUP.
        var sentBefore = false
        var sentOnThisConnection = false
    }

    /// More unacknowledged messages than this are refused rather than queued.
    public let capacity: Int
    private var entries: [Entry] = []
    private var nextPacketID: UInt16 = Self.firstPacketID
    static let firstPacketID: UInt16 = 2

    public init(capacity: Int) {
        precondition(capacity >= 1 && capacity <= Int(UInt16.max) - Int(Self.firstPacketID) + 1)
        self.capacity = capacity
    }

    /// Messages handed in and not yet acknowledged.
    public var pendingCount: Int { entries.count }

    /// Queues a message; its packet id, or nil when `capacity` messages are pending already.
    public mutating func enqueue(topic: String, payload: [UInt8]) -> UInt16? {
        guard entries.count < capacity else { return nil }
        while entries.contains(where: { $0.packetID == nextPacketID }) { advance() }
        let id = nextPacketID
        advance()
        entries.append(Entry(packetID: id, topic: topic, payload: payload))
        return id
    }

    private mutating func advance() {
        nextPacketID = nextPacketID == UInt16.max ? Self.firstPacketID : nextPacketID + 1
    }

    /// The PUBLISH packets not yet sent on this connection, in order; they count as sent.
    public mutating func takeUnsent() -> [Publish] {
        var packets: [Publish] = []
        for index in entries.indices where !entries[index].sentOnThisConnection {
            let entry = entries[index]
            packets.append(
                Publish(
                    topic: entry.topic, payload: entry.payload, qos: 1, duplicate: entry.sentBefore,
                    packetID: entry.packetID))
            entries[index].sentOnThisConnection = true
        }
        return packets
    }

    /// The connection dropped: everything still pending goes out again (with DUP if it went out).
    public mutating func connectionLost() {
        for index in entries.indices {
            entries[index].sentBefore = entries[index].sentBefore || entries[index].sentOnThisConnection
            entries[index].sentOnThisConnection = false
        }
    }

    /// The broker's PUBACK: true when it named a pending message (now done), false for an id not
    /// pending (a late duplicate acknowledgement).
    public mutating func acknowledged(packetID: UInt16) -> Bool {
        guard let index = entries.firstIndex(where: { $0.packetID == packetID && $0.sentOnThisConnection })
        else { return false }
        entries.remove(at: index)
        return true
    }

    /// Empties the queue (the client stops): the ids of the messages never acknowledged.
    public mutating func removeAll() -> [UInt16] {
        defer { entries = [] }
        return entries.map(\.packetID)
    }
}
