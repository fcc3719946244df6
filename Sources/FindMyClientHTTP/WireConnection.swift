// One connection to a findmy server: a TCP socket, with TLS through TLS's TLSClientStream for
// `https://` (the certificate checked against the system's CA store, or one CA file, and against
// the URL's host). Blocking reads and writes, each wait bounded: a read waits in slices of a second
// so that a stream can be stopped, and gives up after the idle timeout.
import TLS
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Where requests go: the scheme, host and port of a URL.
struct Origin: Hashable, Sendable {
    var secure: Bool
    /// A name, an IPv4 address, or an IPv6 address without its brackets.
    var host: String
    var port: UInt16

    /// The `Host` header: the port only when it is not the scheme's.
    var authority: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? name : "\(name):\(port)"
    }

    /// `http(s)://host[:port]/target` as the origin and the request target.
    static func split(_ url: String) throws(TransportError) -> (origin: Origin, target: String) {
        let lowered = url.lowercased()
        let secure = lowered.hasPrefix("https://")
        guard secure || lowered.hasPrefix("http://") else { throw .badURL(url) }
        let rest = url.dropFirst(secure ? 8 : 7)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        let target = rest[slash...].isEmpty ? "/" : String(rest[slash...])
        var host = Substring(authority)
        var port = secure ? 443 : 80
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { throw .badURL(url) }
            let after = host[host.index(after: close)...]
            host = host[host.index(after: host.startIndex)..<close]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let number = Int(after.dropFirst()) else { throw .badURL(url) }
                port = number
            }
        } else if let colon = host.lastIndex(of: ":") {
            guard let number = Int(host[host.index(after: colon)...]) else { throw .badURL(url) }
            port = number
            host = host[..<colon]
        }
        guard !host.isEmpty, !host.contains("@"), (1...65535).contains(port) else { throw .badURL(url) }
        return (Origin(secure: secure, host: String(host), port: UInt16(port)), target)
    }
}

final class WireConnection {
    let origin: Origin
    let timeoutSeconds: Int
    private let socket: Int32
    private let tls: TLSClientStream?
    private var closed = false

    /// Resolves the host, connects to the first address that answers within the timeout, and for
    /// `https` makes TLS with its certificate checked (`caFile`: trust only that CA file).
    init(_ origin: Origin, timeoutSeconds: Int, caFile: String?) throws(TransportError) {
        self.origin = origin
        self.timeoutSeconds = timeoutSeconds
        socket = try Self.connect(origin, timeoutSeconds: timeoutSeconds)
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        // Bounds a read or write that blocks for the rest of a TLS record, and a write to a peer
        // that stopped reading.
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        guard origin.secure else {
            tls = nil
            return
        }
        do {
            tls = try TLSClientStream(socket: socket, host: origin.host, caFile: caFile)
        } catch {
            Glibc.close(socket)
            throw .tls(error.description)
        }
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        tls?.close()
        Glibc.close(socket)
    }

    /// Writes every byte.
    func write(_ bytes: [UInt8]) throws(TransportError) {
        if let tls {
            do { try tls.send(bytes) } catch { throw .tls(error.description) }
            return
        }
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(socket, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            }
            if count > 0 {
                sent += count
            } else if count < 0 && errno == EINTR {
                continue
            } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                throw .timedOut(seconds: timeoutSeconds)
            } else {
                throw .writeFailed(errno: errno)
            }
        }
    }

    /// Reads what arrives into `buffer`: its count, 0 when the peer closed the connection. Waits at
    /// most the idle timeout for a byte, asking `shouldStop` about once a second (nil when it says
    /// stop).
    func read(into buffer: UnsafeMutableRawBufferPointer, shouldStop: () -> Bool) throws(TransportError)
        -> Int?
    {
        var waitedMillis = 0
        while true {
            if shouldStop() { return nil }
            if !(tls?.hasBufferedBytes ?? false) {
                var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
                let ready = poll(&descriptor, 1, 1000)
                if ready == 0 || (ready < 0 && errno == EINTR) {
                    waitedMillis += 1000
                    if waitedMillis >= timeoutSeconds * 1000 { throw .timedOut(seconds: timeoutSeconds) }
                    continue
                }
            }
            if let tls {
                let count: Int?
                do { count = try tls.receive(into: buffer) } catch { throw .tls(error.description) }
                // nil: a record without data (a TLS 1.3 session ticket): wait again.
                if let count { return count }
                continue
            }
            let count = recv(socket, buffer.baseAddress, buffer.count, 0)
            if count >= 0 { return count }
            if errno == EINTR || errno == EAGAIN { continue }
            if errno == ECONNRESET { return 0 }
            throw .readFailed(errno: errno)
        }
    }

    private static func connect(_ origin: Origin, timeoutSeconds: Int) throws(TransportError) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(origin.host, String(origin.port), &hints, &list)
        guard resolved == 0, let list else {
            throw .resolveFailed(origin.host, String(cString: gai_strerror(resolved)))
        }
        defer { freeaddrinfo(list) }
        var lastErrno: Int32 = 0
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let address = entry {
            entry = address.pointee.ai_next
            let fd = Glibc.socket(
                address.pointee.ai_family, address.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue),
                address.pointee.ai_protocol)
            guard fd >= 0 else {
                lastErrno = errno
                continue
            }
            let failure = connectWithin(fd, address.pointee, timeoutSeconds: timeoutSeconds)
            if failure == 0 { return fd }
            lastErrno = failure
            Glibc.close(fd)
        }
        if lastErrno == ETIMEDOUT { throw .timedOut(seconds: timeoutSeconds) }
        throw .connectFailed(origin.authority, errno: lastErrno)
    }

    /// 0 when connected, else the errno (ETIMEDOUT after `timeoutSeconds`).
    private static func connectWithin(_ fd: Int32, _ address: addrinfo, timeoutSeconds: Int) -> Int32 {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        if Glibc.connect(fd, address.ai_addr, address.ai_addrlen) == 0 { return 0 }
        guard errno == EINPROGRESS else { return errno }
        let deadline = monotonicMicros() + Int64(timeoutSeconds) * 1_000_000
        while true {
            let left = deadline - monotonicMicros()
            if left <= 0 { return ETIMEDOUT }
            var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(1000, left / 1000 + 1)))
            if ready > 0 { break }
        }
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
        return error
    }
}
