import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One Server-Sent Events message as a client parses it: the fields of the lines before a blank
/// line. A comment line (`: heartbeat`) makes a message of its own here, so tests can see it.
public struct ServerSentEvent: Equatable, CustomStringConvertible {
    public var event: String?
    public var id: String?
    public var data: String?
    public var retry: String?
    public var comment: String?

    public var isHeartbeat: Bool { comment == " heartbeat" }
    public var description: String {
        [
            event.map { "event: \($0)" }, id.map { "id: \($0)" }, data.map { "data: \($0)" },
            retry.map { "retry: \($0)" }, comment.map { ":\($0)" },
        ].compactMap { $0 }.joined(separator: " | ")
    }
}

/// A `GET` of an event stream on a bare socket: the answer's head, then its chunked body decoded
/// and parsed into messages one at a time, as they arrive. Reads block (up to the socket's timeout);
/// nothing here sleeps.
public final class EventStreamClient {
    public let client: RawClient
    public private(set) var status = 0
    /// Header names in lower case.
    public private(set) var headers: [String: String] = [:]
    private var raw: [UInt8] = []
    private var rawStart = 0
    private var body: [UInt8] = []
    private var bodyStart = 0
    /// The chunked body's last chunk came.
    public private(set) var ended = false

    /// Connects to `address` (`127.0.0.1:PORT`) and sends the request with `requestHeaders`.
    public init(
        address: String, target: String, requestHeaders: [(String, String)], timeoutSeconds: Int = 60
    ) throws {
        client = try RawClient(address: address, timeoutSeconds: timeoutSeconds)
        let lines = requestHeaders.map { "\($0.0): \($0.1)\r\n" }.joined()
        client.write("GET \(target) HTTP/1.1\r\nHost: test\r\n\(lines)\r\n")
        guard let head = line(through: "\r\n\r\n") else {
            throw RawClientError(call: "read head", errno: errno)
        }
        let parts = head.split(separator: "\r\n")
        status = Int(parts.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        for field in parts.dropFirst() {
            guard let colon = field.firstIndex(of: ":") else { continue }
            headers[field[..<colon].lowercased()] = field[field.index(after: colon)...]
                .trimmingCharacters(in: .whitespaces)
        }
    }

    /// For a refused stream: the rest of the answer, framed by Content-Length.
    public func errorBody() -> String {
        guard let length = headers["content-length"].flatMap({ Int($0) }) else { return "" }
        var bytes: [UInt8] = []
        while bytes.count < length, let byte = nextRawByte() { bytes.append(byte) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The next message, or nil once the stream ended (its last chunk, or the connection closed)
    /// or a read timed out.
    public func next() -> ServerSentEvent? {
        var message = ServerSentEvent()
        var hasField = false
        while let line = bodyLine() {
            if line.isEmpty {
                if hasField { return message }
                continue
            }
            hasField = true
            if line.hasPrefix(":") {
                message.comment = String(line.dropFirst())
                continue
            }
            let name = line.prefix { $0 != ":" }
            var value = line.dropFirst(name.count).dropFirst()
            if value.hasPrefix(" ") { value = value.dropFirst() }
            switch name {
            case "event": message.event = String(value)
            case "id": message.id = String(value)
            case "data": message.data = (message.data.map { $0 + "\n" } ?? "") + value
            case "retry": message.retry = String(value)
            default: break
            }
        }
        return nil
    }

    /// The next message that is not a heartbeat.
    public func nextSkippingHeartbeats() -> ServerSentEvent? {
        while let message = next() {
            if !message.isHeartbeat { return message }
        }
        return nil
    }

    /// Reads until the stream ends; true when the server closed it (not a read timeout).
    public func readsToEnd() -> Bool {
        while next() != nil {}
        return ended || client.isClosedByServer
    }

    // MARK: bytes

    private func bodyLine() -> String? {
        while true {
            if let newline = body[bodyStart...].firstIndex(of: 0x0A) {
                let text = String(decoding: body[bodyStart..<newline], as: UTF8.self)
                bodyStart = newline + 1
                return text
            }
            guard readChunk() else { return nil }
        }
    }

    /// Appends the next chunk of the body; false at its end or the connection's.
    private func readChunk() -> Bool {
        guard !ended, let sizeLine = line(through: "\r\n"),
            let size = Int(String(sizeLine.prefix { $0.isHexDigit }), radix: 16)
        else { return false }
        if size == 0 {
            ended = true
            return false
        }
        if bodyStart > 0 {
            body.removeFirst(bodyStart)
            bodyStart = 0
        }
        for _ in 0..<size {
            guard let byte = nextRawByte() else { return false }
            body.append(byte)
        }
        return line(through: "\r\n") == "\r\n"
    }

    private func line(through marker: String) -> String? {
        let mark = Array(marker.utf8)
        var bytes: [UInt8] = []
        while let byte = nextRawByte() {
            bytes.append(byte)
            if bytes.count >= mark.count && bytes.suffix(mark.count).elementsEqual(mark) {
                return String(decoding: bytes, as: UTF8.self)
            }
        }
        return nil
    }

    private func nextRawByte() -> UInt8? {
        if rawStart == raw.count {
            var piece = [UInt8](repeating: 0, count: 4096)
            let count = recv(client.fd, &piece, piece.count, 0)
            guard count > 0 else { return nil }
            raw = Array(piece[..<count])
            rawStart = 0
        }
        defer { rawStart += 1 }
        return raw[rawStart]
    }
}
