#if canImport(Glibc)
    import Glibc
#endif

/// We create and bind the listening socket ourselves rather than let libmicrohttpd do it, because
/// MHD_start_daemon only says "failed" while bind(2) says why (port in use, no permission).
enum ListenAddress: Equatable {
    case ipv4(in_addr_t, port: UInt16)
    case unix(path: String)

    static let backlogConnectionsMax: Int32 = 512

    init(parsing text: String) throws(HTTPServerError) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst("unix:".count))
            guard path.hasPrefix("/") else {
                throw .badListenAddress(text, reason: "the socket path must be absolute")
            }
            guard path.utf8.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else {
                throw .badListenAddress(
                    text, reason: "the socket path is longer than the system allows (107 bytes)")
            }
            self = .unix(path: path)
            return
        }
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
            throw .badListenAddress(text, reason: "expected host:port with a port from 0 to 65535")
        }
        let host = text[..<colon] == "localhost" ? "127.0.0.1" : String(text[..<colon])
        var address = in_addr()
        guard inet_pton(AF_INET, host, &address) == 1 else {
            throw .badListenAddress(text, reason: "'\(host)' is not an IPv4 address")
        }
        self = .ipv4(address.s_addr, port: port)
    }
}

/// A bound, listening socket; the caller owns the descriptor.
func openListeningSocket(_ address: ListenAddress, text: String) throws(HTTPServerError) -> Int32 {
    switch address {
    case .ipv4(let host, let port):
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .socketFailed(text, call: "socket", errno: errno) }
        // Lets a restarted server bind while old connections sit in TIME_WAIT; Linux still
        // refuses a second live listener on the port.
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = port.bigEndian
        sin.sin_addr.s_addr = host
        let bound = withUnsafePointer(to: &sin) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        return try finishListening(fd, bound: bound, text: text)
    case .unix(let path):
        try removeStaleSocket(path, text: text)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .socketFailed(text, call: "socket", errno: errno) }
        var sun = unixSocketAddress(path)
        let bound = withUnsafePointer(to: &sun) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        // Owner only: the socket is the admin's door. Done before listen(2), so nobody can
        // connect through looser default permissions in between.
        if bound == 0, chmod(path, 0o600) != 0 {
            let code = errno
            close(fd)
            unlink(path)
            throw .socketFailed(text, call: "chmod", errno: code)
        }
        return try finishListening(fd, bound: bound, text: text)
    }
}

private func finishListening(_ fd: Int32, bound: Int32, text: String) throws(HTTPServerError) -> Int32 {
    if bound != 0 {
        let code = errno
        close(fd)
        throw code == EADDRINUSE ? .addressInUse(text) : .socketFailed(text, call: "bind", errno: code)
    }
    guard listen(fd, ListenAddress.backlogConnectionsMax) == 0 else {
        let code = errno
        close(fd)
        throw .socketFailed(text, call: "listen", errno: code)
    }
    return fd
}

/// A socket file left by a server that crashed blocks bind(2). Remove it only if it is a socket
/// nobody answers on: a live server keeps its socket, and a regular file is not ours to delete.
private func removeStaleSocket(_ path: String, text: String) throws(HTTPServerError) {
    var status = stat()
    guard lstat(path, &status) == 0 else { return }
    guard status.st_mode & S_IFMT == S_IFSOCK else {
        throw .badListenAddress(text, reason: "\(path) exists and is not a socket; move it away")
    }
    let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
    guard probe >= 0 else { throw .socketFailed(text, call: "socket", errno: errno) }
    defer { close(probe) }
    var sun = unixSocketAddress(path)
    let connected = withUnsafePointer(to: &sun) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    guard connected != 0 else { throw .addressInUse(text) }
    unlink(path)
}

func unixSocketAddress(_ path: String) -> sockaddr_un {
    var sun = sockaddr_un()
    sun.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &sun.sun_path) { buffer in
        buffer.copyBytes(from: path.utf8.prefix(buffer.count - 1))
    }
    return sun
}

/// `203.0.113.7:51234` for IPv4, `[2001:db8::1]:51234` for IPv6, `unix` for a unix-socket peer.
func formatAddress(_ address: UnsafePointer<sockaddr>?) -> String {
    guard let address else { return "unknown" }
    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    switch Int32(address.pointee.sa_family) {
    case AF_INET:
        return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
            var host = sin.pointee.sin_addr
            inet_ntop(AF_INET, &host, &text, socklen_t(text.count))
            return "\(decodeNulTerminated(text)):\(UInt16(bigEndian: sin.pointee.sin_port))"
        }
    case AF_INET6:
        return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
            var host = sin6.pointee.sin6_addr
            inet_ntop(AF_INET6, &host, &text, socklen_t(text.count))
            return "[\(decodeNulTerminated(text))]:\(UInt16(bigEndian: sin6.pointee.sin6_port))"
        }
    case AF_UNIX: return "unix"
    default: return "unknown"
    }
}

private func decodeNulTerminated(_ chars: [CChar]) -> String {
    String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
