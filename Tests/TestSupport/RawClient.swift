import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP client on a bare socket, for what `HTTPConnection` would never send (conflicting framing
/// headers, a request trickled byte by byte or cut short), from a chosen source address, and to see
/// exactly when the server closes the connection.
public final class RawClient {
    public private(set) var fd: Int32

    /// Connects to 127.0.0.1:`port`, from `sourceAddress` when given (any 127/8 address works on
    /// Linux's loopback, so a test can be two clients). Reads give up after `timeoutSeconds`.
    public init(port: Int, sourceAddress: String? = nil, timeoutSeconds: Int = 10) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw RawClientError(call: "socket", errno: errno) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if let sourceAddress {
            var source = Self.address(sourceAddress, port: 0)
            let bound = withUnsafePointer(to: &source) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                let code = errno
                Glibc.close(fd)
                throw RawClientError(call: "bind", errno: code)
            }
        }
        var server = Self.address("127.0.0.1", port: UInt16(port))
        let connected = withUnsafePointer(to: &server) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let code = errno
            Glibc.close(fd)
            throw RawClientError(call: "connect", errno: code)
        }
    }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    private static func address(_ text: String, port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, text, &address.sin_addr)
        return address
    }

    /// The client's own port, as the server sees it.
    public var localPort: Int {
        var address = sockaddr_in()
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// False once the server has closed the connection (EPIPE, ECONNRESET).
    @discardableResult
    public func write(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            == bytes.count
    }

    /// Sends every byte (several sends if the kernel takes fewer); false once the server has
    /// closed the connection.
    @discardableResult
    public func write(bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Reads until the server closes the connection or the read times out. `closed` is true when
    /// the connection ended (EOF or a reset), false on a timeout: the server kept it open.
    public func readToClose() -> (text: String, closed: Bool) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 {
                received += buffer[..<count]
                continue
            }
            let closed = count == 0 || errno == ECONNRESET
            return (String(decoding: received, as: UTF8.self), closed)
        }
    }

    /// Reads until `marker` has arrived (or the connection ends); what was read.
    public func read(through marker: String) -> String {
        var received: [UInt8] = []
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1 {
            received.append(byte)
            if received.count >= marker.utf8.count
                && received.suffix(marker.utf8.count).elementsEqual(marker.utf8)
            {
                break
            }
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// Whether the server has closed this connection, without waiting: a pending EOF or reset.
    public var isClosedByServer: Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }
}

public struct RawClientError: Error {
    public let call: String
    public let errno: Int32
}

extension RawClient {
    /// Connects to `address`, `127.0.0.1:PORT` as a test server gives it.
    public convenience init(address: String, timeoutSeconds: Int = 10) throws {
        guard address.hasPrefix("127.0.0.1:"), let port = Int(address.dropFirst("127.0.0.1:".count)) else {
            throw RawClientError(call: "connect to \(address)", errno: EINVAL)
        }
        try self.init(port: port, timeoutSeconds: timeoutSeconds)
    }

    /// Reads one answer framed by Content-Length (or, without one, by the close): its status and
    /// body. Nil when the connection ends before a whole answer.
    public func readResponse() -> (status: Int, bodyText: String)? {
        let head = read(through: "\r\n\r\n")
        guard head.hasSuffix("\r\n\r\n") else { return nil }
        let lines = head.split(separator: "\r\n")
        guard let statusLine = lines.first,
            let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "")
        else { return nil }
        precondition(
            !lines.contains { $0.lowercased().hasPrefix("transfer-encoding:") },
            "RawClient reads answers framed by Content-Length or by the close")
        let length = lines.first { $0.lowercased().hasPrefix("content-length:") }.flatMap {
            Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
        }
        guard let length else { return (status, readToClose().text) }
        var body = [UInt8](repeating: 0, count: length)
        var received = 0
        while received < length {
            let count = body.withUnsafeMutableBytes {
                recv(fd, $0.baseAddress! + received, length - received, 0)
            }
            guard count > 0 else { return nil }
            received += count
        }
        return (status, String(decoding: body, as: UTF8.self))
    }
}
