// One HTTP/1.1 exchange on a WireConnection: the request written with Content-Length, the answer's
// status line and headers read, then its body as the server frames it (Content-Length, chunked, or
// until the connection closes), handed over piece by piece as it arrives.
import FindMyClient

#if canImport(Glibc)
    import Glibc
#endif

/// Why no answer came, in words a person can act on.
public enum TransportError: Error, Equatable, CustomStringConvertible {
    case badURL(String)
    case resolveFailed(String, String)
    case connectFailed(String, errno: Int32)
    case tls(String)
    case writeFailed(errno: Int32)
    case readFailed(errno: Int32)
    /// The server closed the connection before the whole answer arrived; `bytesRead` of it did.
    case connectionClosed(bytesRead: Int)
    case malformedAnswer(String)
    /// Connecting, or a wait for the next byte of the answer, took longer than this.
    case timedOut(seconds: Int)

    public var description: String {
        switch self {
        case .badURL(let url): "bad server URL '\(url)': use http(s)://host[:port]/..."
        case .resolveFailed(let host, let why): "cannot resolve \(host): \(why)"
        case .connectFailed(let address, let code):
            "cannot connect to \(address): \(errnoText(code)); is the server running there?"
        case .tls(let why): why
        case .writeFailed(let code): "sending the request failed: \(errnoText(code))"
        case .readFailed(let code): "reading the answer failed: \(errnoText(code))"
        case .connectionClosed(let bytesRead):
            "the server closed the connection after \(bytesRead) bytes of the answer"
        case .malformedAnswer(let why): "the server sent a malformed answer: \(why)"
        case .timedOut(let seconds): "the server did not answer within \(seconds) s"
        }
    }
}

struct HTTPExchange {
    /// The status line and headers may take at most this many bytes.
    static let headBytesMax = 64 << 10

    let connection: WireConnection
    private var buffer: [UInt8] = []
    private var position = 0
    /// Bytes of the answer read so far (to tell a kept connection the server had closed).
    private(set) var bytesRead = 0
    /// The connection may carry the next request once this exchange is over.
    private(set) var reusable = false

    init(_ connection: WireConnection) { self.connection = connection }

    /// The request as it goes on the wire: the caller's headers, `Host`, and the body's length.
    static func requestBytes(_ request: ClientRequest, target: String, authority: String) -> [UInt8] {
        var head = "\(request.method) \(target) HTTP/1.1\r\nHost: \(authority)\r\n"
        for header in request.headers { head += "\(header.name): \(header.value)\r\n" }
        if !request.body.isEmpty || !["GET", "HEAD", "DELETE"].contains(request.method) {
            head += "Content-Length: \(request.body.count)\r\n"
        }
        return Array((head + "\r\n").utf8) + request.body
    }

    /// Sends the request, reads the answer's head (`onHead`) and body (`onBody`, each piece as it
    /// arrives). Returns false when `shouldStop` ended it early.
    mutating func run(
        _ bytes: [UInt8], onHead: (ClientResponse) -> Void, onBody: ([UInt8]) -> Void,
        shouldStop: () -> Bool
    ) throws(TransportError) -> Bool {
        try connection.write(bytes)
        var head: ClientResponse
        repeat {
            guard let next = try readHead(shouldStop) else { return false }
            head = next
        } while (100...199).contains(head.status)
        onHead(head)
        // Token lists, not substrings: String's substring search would link the whole
        // _StringProcessing and _RegexParser runtime into the agent (0.8 MB of code, resident).
        let keepAlive = !head.headerTokens("Connection").contains("close")
        if head.status == 204 || head.status == 304 {
            reusable = keepAlive
            return true
        }
        if head.headerTokens("Transfer-Encoding").last == "chunked" {
            guard try readChunked(onBody, shouldStop) else { return false }
        } else if let lengthText = head.header("Content-Length") {
            guard let length = Int(lengthText.filter { $0 != " " }), length >= 0 else {
                throw .malformedAnswer("Content-Length '\(lengthText)'")
            }
            guard try readExactly(length, onBody, shouldStop) else { return false }
        } else {
            // Framed by the end of the connection.
            while let piece = try readSome(shouldStop) {
                if piece.isEmpty { return true }
                onBody(piece)
            }
            return false
        }
        reusable = keepAlive
        return true
    }

    private mutating func readHead(_ shouldStop: () -> Bool) throws(TransportError) -> ClientResponse? {
        var lines: [String] = []
        while true {
            guard let line = try readLine(shouldStop, limit: Self.headBytesMax) else { return nil }
            if line.isEmpty {
                if lines.isEmpty { continue }
                break
            }
            lines.append(line)
        }
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw .malformedAnswer("status line '\(statusLine.prefix(80))'")
        }
        var headers: [ClientHeader] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else {
                throw .malformedAnswer("header line '\(line.prefix(80))'")
            }
            let value = line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" }
            headers.append(ClientHeader(String(line[..<colon]), String(value)))
        }
        return ClientResponse(status: status, headers: headers)
    }

    private mutating func readChunked(_ onBody: ([UInt8]) -> Void, _ shouldStop: () -> Bool)
        throws(TransportError) -> Bool
    {
        while true {
            guard let sizeLine = try readLine(shouldStop, limit: 1024) else { return false }
            let digits = sizeLine.prefix { $0 != ";" }.filter { $0 != " " }
            guard let size = Int(digits, radix: 16), size >= 0 else {
                throw .malformedAnswer("chunk size '\(sizeLine.prefix(40))'")
            }
            if size == 0 {
                // Trailers, up to the empty line.
                while true {
                    guard let trailer = try readLine(shouldStop, limit: Self.headBytesMax) else {
                        return false
                    }
                    if trailer.isEmpty { return true }
                }
            }
            guard try readExactly(size, onBody, shouldStop),
                let end = try readLine(shouldStop, limit: 2)
            else { return false }
            guard end.isEmpty else { throw .malformedAnswer("no line end after a chunk") }
        }
    }

    private mutating func readExactly(_ count: Int, _ onBody: ([UInt8]) -> Void, _ shouldStop: () -> Bool)
        throws(TransportError) -> Bool
    {
        var left = count
        while left > 0 {
            if position == buffer.count {
                guard try fill(shouldStop) else { return false }
            }
            let take = min(left, buffer.count - position)
            onBody(Array(buffer[position..<position + take]))
            position += take
            left -= take
        }
        return true
    }

    /// What is buffered, else one read: empty when the connection closed, nil when stopped.
    private mutating func readSome(_ shouldStop: () -> Bool) throws(TransportError) -> [UInt8]? {
        if position == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            position = 0
            var chunk = [UInt8](repeating: 0, count: 16 << 10)
            var result: Result<Int?, TransportError> = .success(nil)
            let connection = self.connection
            chunk.withUnsafeMutableBytes { raw in result = Self.read(connection, into: raw, shouldStop) }
            guard let count = try result.get() else { return nil }
            bytesRead += count
            return Array(chunk[..<count])
        }
        defer { position = buffer.count }
        return Array(buffer[position...])
    }

    /// The connection's read as a value (the buffer closures rethrow untyped errors).
    private static func read(
        _ connection: WireConnection, into raw: UnsafeMutableRawBufferPointer, _ shouldStop: () -> Bool
    ) -> Result<Int?, TransportError> {
        do {
            return .success(try connection.read(into: raw, shouldStop: shouldStop))
        } catch {
            return .failure(error)
        }
    }

    /// A line ended by CRLF (or LF), without its end; nil when stopped.
    private mutating func readLine(_ shouldStop: () -> Bool, limit: Int) throws(TransportError) -> String? {
        var scanned = position
        while true {
            if let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
                var end = newline
                if end > position && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let line = String(decoding: buffer[position..<end], as: UTF8.self)
                position = newline + 1
                return line
            }
            let offset = buffer.count - position
            guard offset <= limit else { throw .malformedAnswer("a line longer than \(limit) bytes") }
            guard try fill(shouldStop) else { return nil }
            scanned = position + offset
        }
    }

    /// Reads more into the buffer (keeping what is not consumed); false when stopped. A closed
    /// connection is an error here: the answer is not whole.
    private mutating func fill(_ shouldStop: () -> Bool) throws(TransportError) -> Bool {
        if position > 0 {
            buffer.removeFirst(position)
            position = 0
        }
        let old = buffer.count
        buffer.append(contentsOf: repeatElement(0, count: 16 << 10))
        var result: Result<Int?, TransportError> = .success(nil)
        let connection = self.connection
        buffer.withUnsafeMutableBytes { raw in
            result = Self.read(
                connection, into: UnsafeMutableRawBufferPointer(rebasing: raw[old...]), shouldStop)
        }
        let count = try? result.get()
        buffer.removeLast(buffer.count - old - (count ?? 0))
        guard let count = try result.get() else { return false }
        guard count > 0 else { throw .connectionClosed(bytesRead: bytesRead) }
        bytesRead += count
        return true
    }
}

func errnoText(_ code: Int32) -> String {
    String(cString: strerror(code))
}
