#if canImport(Glibc)
    import Glibc
#endif

/// Why the server could not start, worded so the operator knows what to change.
public enum HTTPServerError: Error, Equatable, CustomStringConvertible {
    /// The listen address is not `IPv4:port`, `localhost:port` or `unix:/absolute/path`.
    case badListenAddress(String, reason: String)
    /// Another process holds the port or answers on the socket path.
    case addressInUse(String)
    /// A system call on the listening socket failed; `errno` as reported.
    case socketFailed(String, call: String, errno: Int32)
    /// libmicrohttpd refused to start; it gives its reason to the server's log sink.
    case daemonFailed(String)

    public var description: String {
        switch self {
        case .badListenAddress(let address, let reason):
            "bad listen address '\(address)': \(reason); use e.g. 127.0.0.1:8080 or unix:/run/findmy/http.sock"
        case .addressInUse(let address):
            "\(address) is already in use by another process; stop it or choose another address "
                + "(port 0 picks a free port)"
        case .socketFailed(let address, let call, let code):
            "\(call) for \(address) failed: \(String(cString: strerror(code)))"
                + (code == EACCES
                    ? " (ports below 1024 need privileges; the socket's directory must be writable)" : "")
        case .daemonFailed(let address):
            "libmicrohttpd could not start on \(address); its reason is in the log"
        }
    }
}
