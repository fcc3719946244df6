// MQTT 3.1.1 (OASIS standard, 29 October 2014), the subset a subscribing client needs, and QoS 1
// PUBLISH outbound (OwnTracks commands).
//
// Why our own client rather than libmosquitto or Eclipse Paho C: both acknowledge a QoS 1
// PUBLISH before, or regardless of, the application's handling of it. libmosquitto 2.0.11
// (`lib/handle_publish.c`, `case 1:`) calls `send__puback` and only then `on_message`; Paho C
// (`MQTTProtocol_handlePublishes` in `src/MQTTProtocolClient.c`) queues the message for the
// application and sends (or queues) the PUBACK at once. findmy's promise is that a PUBACK means
// "durable in the log", so the acknowledgement must wait for the log's group commit, which
// neither library lets an application do. See docs/clients.md, "OwnTracks (MQTT)".
//
// Every packet: a fixed header (type in the high nibble of byte 0, flags in the low nibble), the
// remaining length as a variable byte integer (1 to 4 bytes, 7 bits each, least significant
// first, the high bit meaning "more"), then the variable header and payload. Strings are a 2-byte
// big-endian length and UTF-8 bytes.

/// A packet the broker sends to a client.
public enum InboundPacket: Sendable, Equatable {
    /// `returnCode` 0 is accepted; 1 to 5 are the standard's refusals (`ConnectRefusal`).
    case connectAcknowledged(sessionPresent: Bool, returnCode: UInt8)
    case publish(Publish)
    /// Granted QoS per topic filter, 0x80 for a refused one.
    case subscribeAcknowledged(packetID: UInt16, granted: [UInt8])
    case pingResponse
    /// The broker has the QoS 1 message the client published with this id.
    case publishAcknowledged(packetID: UInt16)
    /// An acknowledgement of something this client never sends (PUBREC, PUBREL, PUBCOMP,
    /// UNSUBACK): the type, to name in an error.
    case unexpected(type: UInt8)
}

/// An application message the broker delivers.
public struct Publish: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: UInt8
    /// Set on a redelivery: the broker sent this message before and got no acknowledgement.
    public var duplicate: Bool
    public var retain: Bool
    /// Present for QoS 1 and 2 (the id the PUBACK names), nil for QoS 0.
    public var packetID: UInt16?
    /// nil for a message within the client's `packetBytesMax`. Else the size of its whole payload:
    /// `payload` holds only its first `PacketReader.oversizedHeadBytesMax` bytes, and the rest was
    /// read from the connection and discarded. Such a message can never be read whole; it is still
    /// delivered (with a ticket, for QoS 1) so that the application acknowledges it and the broker
    /// stops sending it.
    public var oversizedPayloadBytes: Int?

    public init(
        topic: String, payload: [UInt8], qos: UInt8, duplicate: Bool = false, retain: Bool = false,
        packetID: UInt16?, oversizedPayloadBytes: Int? = nil
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.duplicate = duplicate
        self.retain = retain
        self.packetID = packetID
        self.oversizedPayloadBytes = oversizedPayloadBytes
    }
}

/// Bytes the broker sent that are not MQTT 3.1.1 as this client speaks it.
public struct MQTTProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Packets a client sends, as bytes.
public enum OutboundPacket {
    /// CONNECT with protocol level 4 (3.1.1). `cleanSession` false keeps the subscription and the
    /// unacknowledged QoS 1 messages on the broker while the client is away.
    public static func connect(
        clientID: String, cleanSession: Bool, keepAliveSeconds: UInt16, username: String?,
        password: [UInt8]?
    ) -> [UInt8] {
        var body: [UInt8] = []
        appendString(&body, Array("MQTT".utf8))
        body.append(4)
        var flags: UInt8 = cleanSession ? 0x02 : 0
        if username != nil { flags |= 0x80 }
        if password != nil { flags |= 0x40 }
        body.append(flags)
        body.append(UInt8(keepAliveSeconds >> 8))
        body.append(UInt8(keepAliveSeconds & 0xFF))
        appendString(&body, Array(clientID.utf8))
        if let username { appendString(&body, Array(username.utf8)) }
        if let password { appendString(&body, password) }
        return frame(type: 1, flags: 0, body)
    }

    /// SUBSCRIBE to topic filters, each at `qos` (the flags nibble is fixed at 0b0010 by the standard).
    public static func subscribe(packetID: UInt16, filters: [String], qos: UInt8) -> [UInt8] {
        var body: [UInt8] = [UInt8(packetID >> 8), UInt8(packetID & 0xFF)]
        for filter in filters {
            appendString(&body, Array(filter.utf8))
            body.append(qos)
        }
        return frame(type: 8, flags: 0x2, body)
    }

    public static func publishAcknowledgement(packetID: UInt16) -> [UInt8] {
        [0x40, 0x02, UInt8(packetID >> 8), UInt8(packetID & 0xFF)]
    }

    public static let pingRequest: [UInt8] = [0xC0, 0x00]
    public static let disconnect: [UInt8] = [0xE0, 0x00]

    /// PUBLISH: the client's QoS 1 messages (commands to phones), and tests playing the phone.
    public static func publish(_ message: Publish) -> [UInt8] {
        var body: [UInt8] = []
        appendString(&body, Array(message.topic.utf8))
        if message.qos > 0, let id = message.packetID {
            body.append(UInt8(id >> 8))
            body.append(UInt8(id & 0xFF))
        }
        body += message.payload
        let flags = (message.duplicate ? 0x8 : 0) | (message.qos << 1) | (message.retain ? 1 : 0)
        return frame(type: 3, flags: flags, body)
    }

    static func appendString(_ bytes: inout [UInt8], _ string: [UInt8]) {
        precondition(string.count <= 0xFFFF, "an MQTT string is at most 65535 bytes")
        bytes.append(UInt8(string.count >> 8))
        bytes.append(UInt8(string.count & 0xFF))
        bytes += string
    }

    static func frame(type: UInt8, flags: UInt8, _ body: [UInt8]) -> [UInt8] {
        precondition(body.count <= PacketReader.remainingLengthMax)
        var bytes: [UInt8] = [type << 4 | flags]
        var length = body.count
        repeat {
            var digit = UInt8(length & 0x7F)
            length >>= 7
            if length > 0 { digit |= 0x80 }
            bytes.append(digit)
        } while length > 0
        return bytes + body
    }
}

/// Splits the bytes of a connection into packets, whatever the pieces they arrive in.
public struct PacketReader: Sendable {
    /// The largest remaining length the standard's 4-byte encoding can say (256 MiB - 1).
    public static let remainingLengthMax = 268_435_455

    /// A packet larger than this is never buffered: an OwnTracks location is a few hundred bytes,
    /// a card with a photo tens of kilobytes. A PUBLISH beyond it is read past (its topic, packet
    /// id and first bytes kept, the rest discarded as it arrives) and handed on marked
    /// `oversizedPayloadBytes`, so that it can be acknowledged: dropping the connection instead
    /// would make a persistent session redeliver it on every reconnection, and nothing behind it
    /// would ever arrive. Any other packet beyond it is an error (the connection drops).
    public let packetBytesMax: Int
    /// The first payload bytes kept of an oversized PUBLISH: enough to tell two such messages on
    /// the same topic apart, and to show what the message was.
    public static let oversizedHeadBytesMax = 256
    private var buffer: [UInt8] = []
    private var start = 0
    /// Bytes of an oversized PUBLISH still to come, which `append` drops instead of buffering.
    private var discardBytesRemaining = 0

    public init(packetBytesMax: Int = 1 << 20) {
        precondition(packetBytesMax >= 16)
        self.packetBytesMax = packetBytesMax
    }

    public mutating func append(_ bytes: some Collection<UInt8>) {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        }
        let discarded = min(discardBytesRemaining, bytes.count)
        discardBytesRemaining -= discarded
        buffer += bytes.dropFirst(discarded)
    }

    /// Bytes held and not yet returned as packets: at most `packetBytesMax` (or an oversized
    /// PUBLISH's kept bytes, when larger) plus what one `append` brought, whatever the size of the
    /// packets that pass.
    public var bufferedBytes: Int { buffer.count - start }

    /// The next whole packet, or nil until more bytes arrive.
    public mutating func next() throws(MQTTProtocolError) -> InboundPacket? {
        let available = buffer.count - start
        guard available >= 2 else { return nil }
        var length = 0
        var multiplier = 1
        var index = start + 1
        while true {
            guard index < buffer.count else { return nil }
            let digit = Int(buffer[index])
            length += (digit & 0x7F) * multiplier
            index += 1
            if digit & 0x80 == 0 { break }
            multiplier *= 128
            guard multiplier <= 128 * 128 * 128 else {
                throw MQTTProtocolError("a remaining length longer than 4 bytes")
            }
        }
        guard length <= packetBytesMax else {
            guard buffer[start] >> 4 == 3 else {
                throw MQTTProtocolError(
                    "a packet of \(length) bytes, more than the \(packetBytesMax) accepted")
            }
            return try oversizedPublish(bodyStart: index, length: length)
        }
        guard buffer.count - index >= length else { return nil }
        let header = buffer[start]
        let body = Array(buffer[index..<(index + length)])
        consume(upTo: index + length)
        return try Self.decode(header: header, body)
    }

    /// An oversized PUBLISH whose body starts at `bodyStart`, once its topic, packet id and head
    /// are here (at most 2 + 65535 + 2 + `oversizedHeadBytesMax` bytes); the rest of its `length`
    /// bytes is dropped, here and by the `append`s to come.
    private mutating func oversizedPublish(bodyStart: Int, length: Int) throws(MQTTProtocolError)
        -> InboundPacket?
    {
        let flags = buffer[start] & 0x0F
        guard buffer.count - bodyStart >= 2 else { return nil }
        let topicLength = Int(buffer[bodyStart]) << 8 | Int(buffer[bodyStart + 1])
        let packetIDBytes = (flags >> 1) & 0x3 > 0 ? 2 : 0
        let keptBytes = min(length, 2 + topicLength + packetIDBytes + Self.oversizedHeadBytesMax)
        guard buffer.count - bodyStart >= keptBytes else { return nil }
        var publish = try Self.decodePublish(
            flags: flags, Array(buffer[bodyStart..<(bodyStart + keptBytes)]))
        publish.oversizedPayloadBytes = length - (2 + topicLength + packetIDBytes)
        let held = min(buffer.count - bodyStart, length)
        discardBytesRemaining = length - held
        consume(upTo: bodyStart + held)
        return .publish(publish)
    }

    private mutating func consume(upTo end: Int) {
        start = end
        if start > 65536 {
            buffer.removeFirst(start)
            start = 0
        }
    }

    static func decode(header: UInt8, _ body: [UInt8]) throws(MQTTProtocolError) -> InboundPacket {
        let type = header >> 4
        switch type {
        case 2:
            guard body.count == 2, body[0] & 0xFE == 0 else { throw MQTTProtocolError("a malformed CONNACK") }
            return .connectAcknowledged(sessionPresent: body[0] & 1 == 1, returnCode: body[1])
        case 3:
            return .publish(try decodePublish(flags: header & 0x0F, body))
        case 9:
            guard body.count >= 3 else { throw MQTTProtocolError("a malformed SUBACK") }
            return .subscribeAcknowledged(
                packetID: UInt16(body[0]) << 8 | UInt16(body[1]), granted: Array(body[2...]))
        case 13:
            guard body.isEmpty else { throw MQTTProtocolError("a malformed PINGRESP") }
            return .pingResponse
        case 4:
            guard body.count == 2 else { throw MQTTProtocolError("a malformed PUBACK") }
            return .publishAcknowledged(packetID: UInt16(body[0]) << 8 | UInt16(body[1]))
        case 5, 6, 7, 11:
            return .unexpected(type: type)
        default:
            throw MQTTProtocolError("packet type \(type), which a broker never sends to a client")
        }
    }

    static func decodePublish(flags: UInt8, _ body: [UInt8]) throws(MQTTProtocolError) -> Publish {
        let qos = (flags >> 1) & 0x3
        guard qos < 3 else { throw MQTTProtocolError("a PUBLISH with QoS 3") }
        guard body.count >= 2 else { throw MQTTProtocolError("a PUBLISH without a topic") }
        let topicLength = Int(body[0]) << 8 | Int(body[1])
        var index = 2 + topicLength
        guard body.count >= index + (qos > 0 ? 2 : 0) else {
            throw MQTTProtocolError("a PUBLISH shorter than its topic and packet id")
        }
        guard let topic = String(validating: body[2..<index], as: UTF8.self) else {
            throw MQTTProtocolError("a PUBLISH whose topic is not UTF-8")
        }
        var packetID: UInt16?
        if qos > 0 {
            packetID = UInt16(body[index]) << 8 | UInt16(body[index + 1])
            index += 2
        }
        return Publish(
            topic: topic, payload: Array(body[index...]), qos: qos, duplicate: flags & 0x8 != 0,
            retain: flags & 1 != 0, packetID: packetID)
    }
}
