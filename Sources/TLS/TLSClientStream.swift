import CTLS

#if canImport(Glibc)
    import Glibc
#endif

/// Why a TLS connection could not be made or used, in words a person can act on.
public struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The client side of TLS (1.2 or later) over a socket someone else connected and will close:
/// the handshake, the server's certificate checked against the system's CA store (or one CA file)
/// and against the host name or IP address the caller dialled, then blocking reads and writes.
/// Through OpenSSL's libssl (`SSL_connect`, `SSL_read`, `SSL_write`), loaded by CTLS on the
/// first connection; nothing else in findmy touches it.
///
/// The socket stays blocking; a receive timeout on it (SO_RCVTIMEO) bounds how long a stalled peer
/// can hold a read. `SSL_MODE_AUTO_RETRY` is cleared so that a read woken by a record that carries
/// no application data (a TLS 1.3 session ticket) returns "nothing yet" instead of blocking until
/// the next message: a caller polling the socket can go back to its other work. OpenSSL writes
/// with write(2), not send(2) with MSG_NOSIGNAL: a process using this must ignore SIGPIPE (findmy
/// serve does), or a peer that hung up would end it.
public final class TLSClientStream: @unchecked Sendable {
    private let context: OpaquePointer
    private let ssl: OpaquePointer
    private var closed = false

    /// Connects TLS over `socket` (already connected to `host`). `caFile`: PEM certificates to
    /// trust instead of the system's store (a private CA). Throws when the handshake fails or the
    /// certificate is not trusted or not for `host`.
    public init(socket: Int32, host: String, caFile: String?) throws(TLSError) {
        try Self.loadLibrary()
        findmy_err_clear_error()
        guard let context = findmy_ssl_ctx_new_client() else {
            throw TLSError("TLS: cannot make a context: \(Self.errorQueue())")
        }
        self.context = context
        guard let ssl = Self.configured(context, socket: socket, host: host, caFile: caFile) else {
            let why = Self.errorQueue()
            findmy_ssl_ctx_free(context)
            throw TLSError(caFile.map { "TLS: cannot use the CA file '\($0)': \(why)" } ?? "TLS: \(why)")
        }
        self.ssl = ssl
        let result = findmy_ssl_connect(ssl)
        guard result == 1 else {
            let verification = findmy_ssl_get_verify_result(ssl)
            let why: String
            if verification != Int(FINDMY_X509_V_OK) {
                let reason = String(cString: findmy_x509_verify_cert_error_string(verification))
                why =
                    "the broker's certificate is not trusted for '\(host)': \(reason) ("
                    + (caFile.map { "checked against the CA file '\($0)'" }
                        ?? "checked against the system's CA store")
                    + "; the URL's host must be a name or address the certificate lists)"
            } else {
                why = "the TLS handshake with '\(host)' failed: \(Self.failure(ssl, result))"
            }
            // Every stored property is set, so deinit runs after this throw: it frees both.
            closed = true
            findmy_ssl_free(ssl)
            findmy_ssl_ctx_free(context)
            throw TLSError(why)
        }
    }

    deinit { close() }

    /// libssl is loaded on the first TLS connection, not at start: a process that never makes
    /// one does not map it (docs/benchmarks.md, "The agent").
    private static func loadLibrary() throws(TLSError) {
        var why = [CChar](repeating: 0, count: 512)
        guard findmy_tls_load(&why, why.count) == 1 else {
            throw TLSError(
                "TLS: "
                    + String(decoding: why.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }

    private static func configured(_ context: OpaquePointer, socket: Int32, host: String, caFile: String?)
        -> OpaquePointer?
    {
        guard findmy_ssl_ctx_set_min_tls12(context) == 1 else { return nil }
        findmy_ssl_ctx_verify_peer(context)
        if let caFile {
            guard findmy_ssl_ctx_load_ca_file(context, caFile) == 1 else { return nil }
        } else {
            guard findmy_ssl_ctx_set_default_verify_paths(context) == 1 else { return nil }
        }
        guard let ssl = findmy_ssl_new(context) else { return nil }
        findmy_ssl_clear_auto_retry(ssl)
        // SSL_set1_host checks an IP literal against the certificate's IP addresses (OpenSSL 3)
        // and a name against its DNS names; only a name goes into SNI (RFC 6066 forbids literals).
        let isAddress = Self.isIPAddress(host)
        guard findmy_ssl_set1_host(ssl, host) == 1, isAddress || findmy_ssl_set_server_name(ssl, host) == 1,
            findmy_ssl_set_fd(ssl, socket) == 1
        else {
            findmy_ssl_free(ssl)
            return nil
        }
        return ssl
    }

    /// Bytes OpenSSL decrypted already and holds: a poll of the socket would not see them.
    public var hasBufferedBytes: Bool { !closed && findmy_ssl_pending(ssl) > 0 }

    /// Reads what is there, blocking only for the rest of a record under way. nil: nothing to
    /// read yet (the record carried no data, or the socket's receive timeout passed); 0: the
    /// peer closed the connection.
    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> Int? {
        precondition(!closed, "receive on a closed TLS stream")
        findmy_err_clear_error()
        let count = findmy_ssl_read(ssl, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))
        if count > 0 { return Int(count) }
        let savedErrno = errno
        switch findmy_ssl_get_error(ssl, count) {
        case Int32(FINDMY_SSL_ERROR_WANT_READ), Int32(FINDMY_SSL_ERROR_WANT_WRITE): return nil
        case Int32(FINDMY_SSL_ERROR_ZERO_RETURN): return 0
        case Int32(FINDMY_SSL_ERROR_SYSCALL) where savedErrno == EAGAIN || savedErrno == EINTR: return nil
        case Int32(FINDMY_SSL_ERROR_SYSCALL) where findmy_err_peek_error() == 0 && savedErrno == 0: return 0
        default: throw TLSError("TLS read: \(Self.failure(ssl, count, errno: savedErrno))")
        }
    }

    /// Writes every byte (blocking).
    public func send(_ bytes: [UInt8]) throws(TLSError) {
        precondition(!closed, "send on a closed TLS stream")
        var sent = 0
        while sent < bytes.count {
            findmy_err_clear_error()
            let count = bytes.withUnsafeBytes {
                findmy_ssl_write(ssl, $0.baseAddress! + sent, Int32(min(bytes.count - sent, Int(Int32.max))))
            }
            if count > 0 {
                sent += Int(count)
                continue
            }
            let savedErrno = errno
            switch findmy_ssl_get_error(ssl, count) {
            case Int32(FINDMY_SSL_ERROR_WANT_READ), Int32(FINDMY_SSL_ERROR_WANT_WRITE): continue
            case Int32(FINDMY_SSL_ERROR_SYSCALL) where savedErrno == EINTR: continue
            default: throw TLSError("TLS write: \(Self.failure(ssl, count, errno: savedErrno))")
            }
        }
    }

    /// Sends the close notification (best effort, not waiting for the peer's) and frees the
    /// connection. The socket is the caller's to close. Idempotent.
    public func close() {
        guard !closed else { return }
        closed = true
        findmy_ssl_shutdown(ssl)
        findmy_ssl_free(ssl)
        findmy_ssl_ctx_free(context)
    }

    private static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    private static func failure(_ ssl: OpaquePointer, _ result: Int32, errno savedErrno: Int32 = errno)
        -> String
    {
        let code = findmy_ssl_get_error(ssl, result)
        let queued = errorQueue()
        if !queued.isEmpty { return queued }
        if code == Int32(FINDMY_SSL_ERROR_SYSCALL) {
            return savedErrno == 0 ? "the connection was closed" : String(cString: strerror(savedErrno))
        }
        return "SSL error \(code)"
    }

    /// OpenSSL's queued errors as text, oldest first, emptying the queue.
    private static func errorQueue() -> String {
        var reasons: [String] = []
        while true {
            let code = findmy_err_get_error()
            if code == 0 { break }
            var text = [CChar](repeating: 0, count: 256)
            findmy_err_error_string_n(code, &text, text.count)
            reasons.append(
                String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return reasons.joined(separator: "; ")
    }
}
