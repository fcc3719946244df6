import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A server on 127.0.0.1 that answers each request it reads with the next step of a script, one
/// connection at a time: the exact bytes of an answer (chunked, close-delimited, malformed, cut
/// short) are the test's, which a real server would never send on demand.
final class ScriptedServer: Sendable {
    enum Step: Sendable {
        /// Writes these bytes and keeps the connection for the next request.
        case reply(String)
        /// Writes these bytes, then closes the connection (with no `Connection: close` said).
        case replyThenClose(String)
        /// Reads the request and never answers; the connection ends when the client closes it.
        case hold
    }

    /// A request as the server read it; its body is decoded from Content-Length or chunked framing.
    struct Received: Sendable, Equatable {
        var connection: Int
        var requestLine: String
        var headers: [String]
        var body: [UInt8]

        func header(_ name: String) -> String? {
            let prefix = name.lowercased() + ":"
            return headers.first { $0.lowercased().hasPrefix(prefix) }.map {
                String($0.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces)
            }
        }
    }

    let port: Int
    var address: String { "127.0.0.1:\(port)" }
    private let listenFD: Int32
    private let steps: Mutex<[Step]>
    private let received = Mutex<[Received]>([])
    private let connectionsAccepted = Mutex(0)
    private let finished = Mutex(false)

    var requests: [Received] { received.withLock { $0 } }
    var connections: Int { connectionsAccepted.withLock { $0 } }

    init(_ script: [Step]) throws {
        steps = Mutex(script)
        let listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        self.listenFD = listenFD
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listenFD, $0, size) == 0 && listen(listenFD, 8) == 0
                    && getsockname(listenFD, $0, &size) == 0
            }
        }
        guard bound else { throw ScriptError("bind or listen: errno \(errno)") }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in serve() }.start()
    }

    /// Stops accepting; a connection being served ends when its client closes it.
    func stop() {
        shutdown(listenFD, Int32(SHUT_RDWR))
    }

    deinit { close(listenFD) }

    private func serve() {
        while true {
            let fd = accept(listenFD, nil, nil)
            guard fd >= 0 else { return }
            let connection = connectionsAccepted.withLock {
                $0 += 1
                return $0
            }
            var reader = RequestReader(fd: fd)
            connectionLoop: while let request = reader.next(connection: connection) {
                received.withLock { $0.append(request) }
                let step = steps.withLock { $0.isEmpty ? Step.hold : $0.removeFirst() }
                switch step {
                case .reply(let bytes): writeAll(fd, bytes)
                case .replyThenClose(let bytes):
                    writeAll(fd, bytes)
                    break connectionLoop
                case .hold: continue
                }
            }
            close(fd)
        }
    }

    private func writeAll(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes {
                send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent <= 0 { return }
            offset += sent
        }
    }
}

struct ScriptError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Reads HTTP/1.1 requests off one connection.
private struct RequestReader {
    let fd: Int32
    var buffer: [UInt8] = []

    init(fd: Int32) { self.fd = fd }

    /// Reads more bytes; false once the peer has closed.
    mutating func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &chunk, chunk.count, 0)
        guard count > 0 else { return false }
        buffer += chunk[..<count]
        return true
    }

    mutating func line() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let end = newline > 0 && buffer[newline - 1] == UInt8(ascii: "\r") ? newline - 1 : newline
                let text = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(newline + 1)
                return text
            }
            guard fill() else { return nil }
        }
    }

    mutating func bytes(_ count: Int) -> [UInt8]? {
        while buffer.count < count { guard fill() else { return nil } }
        defer { buffer.removeFirst(count) }
        return Array(buffer[..<count])
    }

    mutating func next(connection: Int) -> ScriptedServer.Received? {
        guard let requestLine = line() else { return nil }
        var request = ScriptedServer.Received(
            connection: connection, requestLine: requestLine, headers: [], body: [])
        while let header = line(), !header.isEmpty { request.headers.append(header) }
        if request.header("Transfer-Encoding")?.lowercased() == "chunked" {
            while let sizeLine = line(), let size = Int(sizeLine, radix: 16) {
                if size == 0 {
                    _ = line()
                    break
                }
                guard let chunk = bytes(size) else { return nil }
                request.body += chunk
                _ = line()
            }
        } else if let length = request.header("Content-Length").flatMap({ Int($0) }) {
            guard let body = bytes(length) else { return nil }
            request.body = body
        }
        return request
    }
}
