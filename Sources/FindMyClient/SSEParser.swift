// Server-Sent Events (the WHATWG HTML standard's "event stream interpretation"), as a pure value:
// bytes in, events out. The command stream is read through it; no I/O here.
//
// Grammar: a stream is lines ended by LF, CRLF or CR (a CRLF split between two reads is one end).
// A line starting with ':' is a comment. Otherwise `field: value` (one optional space after the
// colon is dropped; a line without a colon is a field with an empty value). Fields: `event` sets
// the type, `data` appends its value and a LF to the data buffer, `id` (without NUL) sets the last
// event id, `retry` (digits only) sets the reconnection time; others are ignored. An empty line
// dispatches: nothing when the data buffer is empty, else an event of the type (default
// `message`) with the data minus its last LF. A UTF-8 byte order mark at the very start is skipped.

/// One dispatched event.
public struct SSEEvent: Sendable, Equatable {
    public var type: String
    public var data: String
    /// The last event id as of this event (the stream's, kept across events), nil when none was set.
    public var lastEventID: String?

    public init(type: String, data: String, lastEventID: String?) {
        self.type = type
        self.data = data
        self.lastEventID = lastEventID
    }
}

public struct SSEParser: Sendable {
    public enum Failure: Error, Equatable {
        /// A line longer than `lineBytesMax`: not a stream we can read, so the caller reconnects.
        case lineTooLong(bytes: Int)
    }

    /// A line may be at most this long; a command's data is well under 2 KiB.
    public let lineBytesMax: Int
    /// The last `id` field seen (what a reconnection sends as `Last-Event-ID`).
    public private(set) var lastEventID: String?
    /// The last `retry` field seen, in milliseconds.
    public private(set) var retryMillis: Int?

    private var line: [UInt8] = []
    private var eventType = ""
    private var data = ""
    private var hasData = false
    private var afterCR = false
    private var atStart = true

    public init(lineBytesMax: Int = 1 << 20) {
        self.lineBytesMax = lineBytesMax
    }

    /// Reads `bytes` (any piece of the stream) and returns the events they complete, in order.
    public mutating func feed(_ bytes: some Sequence<UInt8>) throws(Failure) -> [SSEEvent] {
        var events: [SSEEvent] = []
        for byte in bytes {
            if afterCR {
                afterCR = false
                if byte == 0x0A { continue }
            }
            switch byte {
            case 0x0A:
                if let event = endLine() { events.append(event) }
            case 0x0D:
                afterCR = true
                if let event = endLine() { events.append(event) }
            default:
                guard line.count < lineBytesMax else { throw .lineTooLong(bytes: line.count + 1) }
                line.append(byte)
            }
        }
        return events
    }

    private mutating func endLine() -> SSEEvent? {
        var bytes = line[...]
        line.removeAll(keepingCapacity: true)
        if atStart {
            atStart = false
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        }
        if bytes.isEmpty { return dispatch() }
        if bytes.first == UInt8(ascii: ":") { return nil }
        let field: String
        var value: String
        if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
            field = String(decoding: bytes[..<colon], as: UTF8.self)
            var rest = bytes[(colon + 1)...]
            if rest.first == UInt8(ascii: " ") { rest = rest.dropFirst() }
            value = String(decoding: rest, as: UTF8.self)
        } else {
            field = String(decoding: bytes, as: UTF8.self)
            value = ""
        }
        switch field {
        case "event": eventType = value
        case "data":
            data += value
            data += "\n"
            hasData = true
        case "id" where !value.utf8.contains(0): lastEventID = value
        case "retry" where !value.isEmpty && value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }):
            retryMillis = Int(value)
        default: value = ""
        }
        return nil
    }

    private mutating func dispatch() -> SSEEvent? {
        defer {
            eventType = ""
            data = ""
            hasData = false
        }
        guard hasData else { return nil }
        return SSEEvent(
            type: eventType.isEmpty ? "message" : eventType, data: String(data.dropLast()),
            lastEventID: lastEventID)
    }
}
