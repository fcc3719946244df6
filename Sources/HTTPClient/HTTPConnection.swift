import CCurl

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking HTTP/1.1 client connection that stays open across requests: one libcurl easy handle,
/// kept from request to request so that its connection is kept alive. One thread uses a connection
/// at a time; open one per thread for concurrency.
public final class HTTPConnection {
    public let address: String
    /// Resend on a new connection when a kept-alive one turns out closed before any byte of the
    /// answer arrived (libcurl does this): almost always the server's idle timeout, so the request
    /// was not processed. A server that crashed mid-request looks the same, so with non-idempotent
    /// requests the server must tolerate the duplicate, or pass `reconnect: false`: then every
    /// request goes on a connection of its own, and none is ever sent twice.
    public let reconnect: Bool
    /// Connecting, and each wait for the next byte of the answer, gives up after this long.
    public let timeoutSeconds: Int
    /// How many TCP or unix connections this object has opened.
    public private(set) var connectsCount = 0

    private let endpoint: Result<Endpoint, HTTPClientError>
    private let state = CurlEasy(bodyBytesMax: Int.max, lowercaseHeaderNames: false)
    private var easy: UnsafeMutableRawPointer?

    public init(address: String, reconnect: Bool = true, timeoutSeconds: Int = 30) {
        self.address = address
        self.reconnect = reconnect
        self.timeoutSeconds = timeoutSeconds
        self.endpoint = Endpoint.parse(address)
    }

    deinit { close() }

    /// Whether a connection is open, kept alive for the next request.
    public var isConnected: Bool { state.socketsOpen > 0 }

    /// Sends `request` and reads its response, connecting first if needed.
    public func send(_ request: HTTPClientRequest) throws(HTTPClientError) -> HTTPClientResponse {
        let endpoint = try endpoint.get()
        if easy == nil {
            guard let made = curl_easy_init() else { throw .transferFailed("curl_easy_init failed") }
            easy = made
        }
        let easy = easy!
        // Every option from scratch; the handle keeps its connection across the reset.
        curl_easy_reset(easy)
        state.clearAnswer()
        state.attach(easy, headers: headerLines(request), closeCallback: true)
        setTarget(easy, endpoint, request.target)
        let result = request.body.withUnsafeBytes { body in
            setMethod(easy, request, body: body)
            return curl_easy_perform(easy)
        }
        var connects = 0
        _ = findmy_curl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connects)
        connectsCount += connects
        guard result == CURLE_OK else { throw error(result, easy) }
        var response = HTTPClientResponse(status: CurlEasy.status(easy), headers: state.headerLines, body: [])
        swap(&response.body, &state.body)
        return response
    }

    /// Sends `request` and hands the response body to `bodySink` piece by piece as it arrives,
    /// without collecting it: a download of any size in constant memory. The response's `body` is
    /// empty.
    public func send(
        _ request: HTTPClientRequest, bodySink: @escaping (UnsafeRawBufferPointer) -> Void
    ) throws(HTTPClientError) -> HTTPClientResponse {
        state.bodySink = bodySink
        defer { state.bodySink = nil }
        return try send(request)
    }

    public func send(
        _ method: String, _ target: String, headers: [(name: String, value: String)] = [], body: [UInt8] = []
    ) throws(HTTPClientError) -> HTTPClientResponse {
        try send(HTTPClientRequest(method: method, target: target, headers: headers, body: body))
    }

    /// Closes the connection, if one is open; the next request opens a new one.
    public func close() {
        if let easy { curl_easy_cleanup(easy) }
        easy = nil
    }

    /// The caller's headers, and libcurl's defaults our callers never meant removed: its `Accept`,
    /// the form `Content-Type` it gives a POST, and `Expect: 100-continue` (a wait for a large body).
    private func headerLines(_ request: HTTPClientRequest) -> [String] {
        // libcurl reads "Name:" as "remove Name", and sends "Name;" as the name with an empty value.
        var lines = request.headers.map { $0.value.isEmpty ? "\($0.name);" : "\($0.name): \($0.value)" }
        let names = Set(request.headers.map { $0.name.lowercased() })
        for name in ["Accept", "Content-Type", "Expect"] where !names.contains(name.lowercased()) {
            lines.append(name + ":")
        }
        if request.chunkBytes != nil { lines.append("Transfer-Encoding: chunked") }
        return lines
    }

    private func setTarget(_ easy: UnsafeMutableRawPointer, _ endpoint: Endpoint, _ target: String) {
        _ = findmy_curl_easy_setopt_string(
            easy, CURLOPT_URL, "\(endpoint.scheme)://\(endpoint.authority)\(target)")
        // The target goes as the caller wrote it: no "/../" folded away.
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_PATH_AS_IS, 1)
        if let path = endpoint.unixPath {
            _ = findmy_curl_easy_setopt_string(easy, CURLOPT_UNIX_SOCKET_PATH, path)
        } else if !endpoint.anyHost {
            // A server listening on 127.0.0.1 only is not tried at ::1 first.
            _ = findmy_curl_easy_setopt_long(easy, CURLOPT_IPRESOLVE, Int(CURL_IPRESOLVE_V4))
        }
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, timeoutSeconds)
        // An idle timeout rather than one for the whole exchange: a large answer that keeps coming
        // is not cut off, a server that goes quiet is.
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, 1)
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_LOW_SPEED_TIME, timeoutSeconds)
        if !reconnect { _ = findmy_curl_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1) }
    }

    /// The method and the body: none on a GET, HEAD or DELETE without one; else with Content-Length,
    /// or chunked. `body` must stay valid until the transfer ends (libcurl reads it then).
    private func setMethod(
        _ easy: UnsafeMutableRawPointer, _ request: HTTPClientRequest, body: UnsafeRawBufferPointer
    ) {
        let method = request.method
        if body.isEmpty && request.chunkBytes == nil && ["GET", "HEAD", "DELETE"].contains(method) {
            switch method {
            case "GET": _ = findmy_curl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1)
            case "HEAD": _ = findmy_curl_easy_setopt_long(easy, CURLOPT_NOBODY, 1)
            default: _ = findmy_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)
            }
            return
        }
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
        if method != "POST" { _ = findmy_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method) }
        if let chunkBytes = request.chunkBytes {
            // Each read of the callback goes as one chunk.
            state.upload = body
            state.uploadOffset = 0
            state.uploadPieceBytesMax = chunkBytes
            _ = findmy_curl_easy_setopt_callback(easy, CURLOPT_READFUNCTION, curlReadUpload)
            _ = findmy_curl_easy_setopt_pointer(
                easy, CURLOPT_READDATA, Unmanaged.passUnretained(state).toOpaque())
        } else {
            _ = findmy_curl_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            // Any non-null pointer does for zero bytes.
            _ = findmy_curl_easy_setopt_pointer(
                easy, CURLOPT_POSTFIELDS, body.baseAddress ?? UnsafeRawPointer(bitPattern: 1))
        }
    }

    /// The typed error of a failed exchange; the connection is closed (libcurl does not keep one
    /// that failed).
    private func error(_ result: CURLcode, _ easy: UnsafeMutableRawPointer) -> HTTPClientError {
        var osErrno = 0
        _ = findmy_curl_easy_getinfo_long(easy, CURLINFO_OS_ERRNO, &osErrno)
        let code = Int32(osErrno)
        switch result {
        case CURLE_COULDNT_CONNECT:
            return .connectFailed(
                address, errno: code != 0 ? code : ((try? endpoint.get())?.unixSocketErrno() ?? 0))
        case CURLE_OPERATION_TIMEDOUT: return .timedOut(seconds: timeoutSeconds)
        case CURLE_GOT_NOTHING: return .connectionClosed(bytesRead: 0)
        case CURLE_PARTIAL_FILE: return .connectionClosed(bytesRead: state.bytesReceived)
        case CURLE_SEND_ERROR where code != 0: return .writeFailed(errno: code)
        case CURLE_RECV_ERROR where code == ECONNRESET && state.bytesReceived == 0:
            return .connectionClosed(bytesRead: 0)
        case CURLE_RECV_ERROR where code != 0: return .readFailed(errno: code)
        case CURLE_WEIRD_SERVER_REPLY, CURLE_UNSUPPORTED_PROTOCOL, CURLE_RECV_ERROR,
            CURLE_BAD_CONTENT_ENCODING:
            return .malformedResponse(state.failureText(result))
        default: return .transferFailed(state.failureText(result))
        }
    }
}

/// Where a connection goes: a TCP address (an IPv4 literal or localhost), a unix socket, or a
/// server's URL (`http://` or `https://`, any host name, verified TLS).
private struct Endpoint {
    /// The URL's host and port; `localhost` for a unix socket.
    var authority: String
    var unixPath: String?
    var scheme = "http"
    /// A URL's host: resolved as the system does (IPv6 too), not IPv4 only.
    var anyHost = false

    /// Why a unix socket cannot be connected to, for when libcurl leaves its errno unset (it does for
    /// a unix socket): no such file, no access, or (when both are fine) nobody listening.
    func unixSocketErrno() -> Int32 {
        guard let unixPath else { return 0 }
        var info = stat()
        if stat(unixPath, &info) != 0 || access(unixPath, W_OK) != 0 { return errno }
        return ECONNREFUSED
    }

    /// The longest unix socket path sockaddr_un holds, with its terminating zero.
    static let unixPathBytesMax = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    static func parse(_ address: String) -> Result<Endpoint, HTTPClientError> {
        for scheme in ["http", "https"] where address.lowercased().hasPrefix(scheme + "://") {
            var authority = address.dropFirst(scheme.count + 3)
            while authority.hasSuffix("/") { authority = authority.dropLast() }
            guard !authority.isEmpty, !authority.contains("/"), !authority.contains("@") else {
                return .failure(.badAddress(address))
            }
            return .success(
                Endpoint(authority: String(authority), unixPath: nil, scheme: scheme, anyHost: true))
        }
        if address.hasPrefix("unix:") {
            let path = String(address.dropFirst(5))
            guard !path.isEmpty, path.utf8.count <= unixPathBytesMax else {
                return .failure(.badAddress(address))
            }
            return .success(Endpoint(authority: "localhost", unixPath: path))
        }
        guard let colon = address.lastIndex(of: ":"), UInt16(address[address.index(after: colon)...]) != nil
        else { return .failure(.badAddress(address)) }
        let host = String(address[..<colon])
        var ipv4 = in_addr()
        guard host == "localhost" || inet_pton(AF_INET, host, &ipv4) == 1 else {
            return .failure(.badAddress(address))
        }
        return .success(Endpoint(authority: address, unixPath: nil))
    }
}
