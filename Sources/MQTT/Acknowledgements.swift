/// The QoS 1 messages of one connection that the application holds and has not yet acknowledged,
/// in the order they arrived.
///
/// MQTT 3.1.1 (4.6.0-2) requires a client to send PUBACKs in the order the PUBLISH packets
/// arrived, while findmy learns that a message is durable in whatever order the log's group
/// commits finish. So a message's acknowledgement is held until every message received before
/// it on the same connection is acknowledged too, and then the whole run goes out. A pure value:
/// the client does the I/O.
public struct InboundAcknowledgements: Sendable, Equatable {
    private struct Entry: Sendable, Equatable {
        var packetID: UInt16
        var done: Bool
    }

    /// Sequence numbers count the QoS 1 messages of the connection from 0; `entries[0]` is
    /// `firstSequence`.
    private var entries: [Entry] = []
    private var head = 0
    private var firstSequence: UInt64 = 0

    public init() {}

    /// Messages received and not yet acknowledged to the broker.
    public var pendingCount: Int { entries.count - head }

    /// Records a received QoS 1 message; the sequence number is what `acknowledge` takes.
    public mutating func received(packetID: UInt16) -> UInt64 {
        entries.append(Entry(packetID: packetID, done: false))
        return firstSequence + UInt64(entries.count - head - 1)
    }

    /// Marks a message done and returns the packet ids to acknowledge now, in order: those of the
    /// done messages at the front. A second call for the same sequence changes nothing.
    public mutating func acknowledge(_ sequence: UInt64) -> [UInt16] {
        guard sequence >= firstSequence else { return [] }
        let index = head + Int(sequence - firstSequence)
        guard index < entries.count else { return [] }
        entries[index].done = true
        var ready: [UInt16] = []
        while head < entries.count && entries[head].done {
            ready.append(entries[head].packetID)
            head += 1
            firstSequence += 1
        }
        if head > 1024 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
        return ready
    }
}
