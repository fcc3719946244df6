// libcurl's headers include <sys/socket.h>, so in this module the socket constants (SOCK_STREAM,
// SOCK_CLOEXEC) are declared through CCurl's clang module: a release build (whole module) finds
// them only where CCurl is imported.
import CCurl

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking HTTP/1.1 client connection over POSIX sockets that stays open across requests.
/// One thread uses a connection at a time; open one per thread for concurrency.
public final class HTTPConnection {
    public let address: String
    /// Resend once on a new connection when a kept-alive one turns out closed before any byte of
    /// the answer arrived: almost always the server's idle timeout, so the request was not
    /// processed. A server that crashed mid-request looks the same, so with non-idempotent
    /// requests the server must tolerate the duplicate, or pass `reconnect: false`.
    public let reconnect: Bool
    /// Each send and receive waits at most this long.
    public let timeoutSeconds: Int
    /// How many TCP or unix connections this object has opened.
    public private(set) var connectsCount = 0

    private var fd: Int32 = -1
    private var buffer: [UInt8] = []
    private var bufferStart = 0
    private static let lineBytesMax = 64 << 10
    private static let readChunkBytes = 64 << 10
    private static let reserveBytesMax = 64 << 20

    public init(address: String, reconnect: Bool = true, timeoutSeconds: Int = 30) {
        self.address = address
        self.reconnect = reconnect
        self.timeoutSeconds = timeoutSeconds
    }

    deinit { close() }

    public var isConnected: Bool { fd >= 0 }

    /// Sends `request` and reads its response, connecting first if needed.
    public func send(_ request: HTTPClientRequest) throws(HTTPClientError) -> HTTPClientResponse {
        let reused = isConnected
        do {
            return try exchange(request)
        } catch let error where reused && reconnect && error.looksLikeIdleClose {
            close()
            return try exchange(request)
        }
    }

    public func send(
        _ method: String, _ target: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) throws(HTTPClientError) -> HTTPClientResponse {
        try send(HTTPClientRequest(method: method, target: target, headers: headers, body: body))
    }

    /// Writes bytes as they are, connecting first if needed: for tests of malformed or cut requests.
    public func writeRaw(_ bytes: [UInt8]) throws(HTTPClientError) {
        if !isConnected { try connect() }
        try write(bytes)
    }

    /// Reads one response from the connection.
    public func readResponse(toMethod method: String = "GET") throws(HTTPClientError) -> HTTPClientResponse {
        let statusLine = try readLine(responseBytesRead: 0)
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw .malformedResponse("status line '\(statusLine)'")
        }
        var headers: [(name: String, value: String)] = []
        while true {
            let line = try readLine(responseBytesRead: 1)
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else {
                throw .malformedResponse("header line '\(line)'")
            }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingSpaces()))
        }
        var response = HTTPClientResponse(status: status, headers: headers, body: [])
        let noBody = method == "HEAD" || status == 204 || status == 304 || (100..<200).contains(status)
        if noBody {
            response.body = []
        } else if response.header("Transfer-Encoding")?.lowercased().contains("chunked") == true {
            response.body = try readChunkedBody()
        } else if let length = response.header("Content-Length").flatMap({ Int($0) }), length >= 0 {
            response.body = try readExactly(length)
        } else {
            response.body = try readToEnd()
        }
        if response.header("Connection")?.lowercased() == "close" { close() }
        return response
    }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        buffer = []
        bufferStart = 0
    }

    private func exchange(_ request: HTTPClientRequest) throws(HTTPClientError) -> HTTPClientResponse {
        if !isConnected { try connect() }
        do {
            try write(serialize(request))
        } catch {
            // The server may have answered early (a 413 before the whole body) and closed.
            if let response = try? readResponse(toMethod: request.method) { return response }
            close()
            throw error
        }
        do {
            return try readResponse(toMethod: request.method)
        } catch {
            close()
            throw error
        }
    }

    private func serialize(_ request: HTTPClientRequest) -> [UInt8] {
        var head = "\(request.method) \(request.target) HTTP/1.1\r\n"
        let names = Set(request.headers.map { $0.name.lowercased() })
        if !names.contains("host") {
            head += "Host: \(address.hasPrefix("unix:") ? "localhost" : address)\r\n"
        }
        for (name, value) in request.headers { head += "\(name): \(value)\r\n" }
        var bytes: [UInt8]
        if let chunkBytes = request.chunkBytes {
            head += "Transfer-Encoding: chunked\r\n\r\n"
            bytes = Array(head.utf8)
            var offset = 0
            while offset < request.body.count {
                let end = min(offset + chunkBytes, request.body.count)
                bytes += Array("\(String(end - offset, radix: 16))\r\n".utf8)
                bytes += request.body[offset..<end]
                bytes += Array("\r\n".utf8)
                offset = end
            }
            bytes += Array("0\r\n\r\n".utf8)
        } else {
            if !request.body.isEmpty || !["GET", "HEAD", "DELETE"].contains(request.method) {
                head += "Content-Length: \(request.body.count)\r\n"
            }
            bytes = Array((head + "\r\n").utf8) + request.body
        }
        return bytes
    }

    private func connect() throws(HTTPClientError) {
        let (family, storage, length) = try socketAddress()
        let socketFD = socket(family, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard socketFD >= 0 else { throw .connectFailed(address, errno: errno) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(socketFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socketFD, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if family == AF_INET {
            var one: Int32 = 1
            setsockopt(socketFD, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = storage
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socketFD, $0, length) }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(socketFD)
            throw .connectFailed(self.address, errno: code)
        }
        fd = socketFD
        connectsCount += 1
    }

    private func socketAddress() throws(HTTPClientError) -> (Int32, sockaddr_storage, socklen_t) {
        var storage = sockaddr_storage()
        if address.hasPrefix("unix:") {
            let path = Array(address.utf8.dropFirst(5))
            let ok = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_un.self, capacity: 1) { sun in
                    sun.pointee.sun_family = sa_family_t(AF_UNIX)
                    return withUnsafeMutableBytes(of: &sun.pointee.sun_path) { bytes in
                        guard path.count < bytes.count else { return false }
                        bytes.copyBytes(from: path)
                        return true
                    }
                }
            }
            guard ok else { throw .badAddress(address) }
            return (AF_UNIX, storage, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
        guard let colon = address.lastIndex(of: ":"),
            let port = UInt16(address[address.index(after: colon)...])
        else { throw .badAddress(address) }
        let host = address[..<colon] == "localhost" ? "127.0.0.1" : String(address[..<colon])
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &sin.sin_addr) == 1 else { throw .badAddress(address) }
        withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee = sin }
        }
        return (AF_INET, storage, socklen_t(MemoryLayout<sockaddr_in>.size))
    }

    private func write(_ bytes: [UInt8]) throws(HTTPClientError) {
        var offset = 0
        while offset < bytes.count {
            // MSG_NOSIGNAL: a closed peer must be an error here, not SIGPIPE killing the process.
            let sent = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 {
                if errno == EINTR { continue }
                throw .writeFailed(errno: errno)
            }
            offset += sent
        }
    }

    /// Appends at least one byte to the buffer, or reports why it cannot. Receives straight into
    /// the buffer's spare capacity: a large answer (a history page is 2.5 MB) is read in 64 KiB
    /// pieces, and a zeroed chunk copied over each time showed in the read benchmark's latency.
    private func fill(responseBytesRead: Int, expecting expectedBytes: Int = 0) throws(HTTPClientError) {
        if bufferStart > 0 {
            buffer.removeFirst(bufferStart)
            bufferStart = 0
        }
        // Room for the whole answer and one more piece, so that the buffer never grows by copying.
        // Bounded: the length comes from the peer.
        let expected = min(expectedBytes, Self.reserveBytesMax)
        if expected > buffer.count { buffer.reserveCapacity(expected + Self.readChunkBytes) }
        while true {
            var received = 0
            buffer.append(addingCapacity: Self.readChunkBytes) { span in
                span.withUnsafeMutableBufferPointer { free, initialized in
                    received = recv(fd, free.baseAddress!, free.count, 0)
                    initialized = max(received, 0)
                }
            }
            if received > 0 { return }
            if received == 0 { throw .connectionClosed(bytesRead: responseBytesRead) }
            if errno == EINTR { continue }
            if errno == ECONNRESET && responseBytesRead == 0 { throw .connectionClosed(bytesRead: 0) }
            throw .readFailed(errno: errno)
        }
    }

    private func readLine(responseBytesRead: Int) throws(HTTPClientError) -> String {
        var searchFrom = bufferStart
        while true {
            if let newline = buffer[searchFrom...].firstIndex(of: UInt8(ascii: "\n")) {
                var end = newline
                if end > bufferStart && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let line = String(decoding: buffer[bufferStart..<end], as: UTF8.self)
                bufferStart = newline + 1
                return line
            }
            guard buffer.count - bufferStart < Self.lineBytesMax else {
                throw .malformedResponse("a line longer than \(Self.lineBytesMax) bytes")
            }
            let consumed = buffer.count - bufferStart
            try fill(responseBytesRead: responseBytesRead + consumed)
            searchFrom = bufferStart + consumed
        }
    }

    private func readExactly(_ count: Int) throws(HTTPClientError) -> [UInt8] {
        while buffer.count - bufferStart < count {
            try fill(responseBytesRead: 1, expecting: count)
        }
        if bufferStart == 0 && buffer.count == count {
            // The whole buffer is the body (the usual case for a large answer): hand it over.
            defer { buffer = [] }
            return buffer
        }
        let bytes = Array(buffer[bufferStart..<bufferStart + count])
        bufferStart += count
        return bytes
    }

    private func readToEnd() throws(HTTPClientError) -> [UInt8] {
        do {
            while true { try fill(responseBytesRead: 1) }
        } catch .connectionClosed {
            let bytes = Array(buffer[bufferStart...])
            close()
            return bytes
        }
    }

    private func readChunkedBody() throws(HTTPClientError) -> [UInt8] {
        var body: [UInt8] = []
        while true {
            let sizeLine = try readLine(responseBytesRead: 1)
            let sizeText = sizeLine.split(separator: ";").first.map(String.init) ?? ""
            guard let size = Int(sizeText.trimmingSpaces(), radix: 16) else {
                throw .malformedResponse("chunk size '\(sizeLine)'")
            }
            if size == 0 { break }
            body += try readExactly(size)
            guard try readLine(responseBytesRead: 1).isEmpty else {
                throw .malformedResponse("chunk without CRLF")
            }
        }
        while try !readLine(responseBytesRead: 1).isEmpty {}  // trailers
        return body
    }
}

extension HTTPClientError {
    /// Closed before any byte of the answer: typically the server dropped an idle connection.
    fileprivate var looksLikeIdleClose: Bool {
        switch self {
        case .connectionClosed(bytesRead: 0), .writeFailed(errno: EPIPE), .writeFailed(errno: ECONNRESET):
            true
        default: false
        }
    }
}

extension StringProtocol {
    fileprivate func trimmingSpaces() -> String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
