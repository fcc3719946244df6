import CCurl

#if canImport(Glibc)
    import Glibc
#endif

// What both clients of this module do with a libcurl easy handle: the header list, the callbacks
// that collect the answer, the address check at connect time, and the text of a failure. HTTP2Client
// makes one per request on its multi handle; HTTPConnection keeps one per connection object, whose
// handle (and so its connection) lives across requests.

/// The state libcurl's callbacks of one easy handle fill in, reached through their context pointer.
/// Used by one thread at a time: the client's thread, or the caller of a blocking `perform`.
final class CurlEasy: @unchecked Sendable {
    /// A response body larger than this is cut off and the request fails.
    let bodyBytesMax: Int
    /// Header names as HTTP/2 sends them (lower case), or as the server wrote them.
    let lowercaseHeaderNames: Bool
    var body: [UInt8] = []
    /// When set, the body goes here piece by piece as it arrives instead of into `body` (a
    /// download larger than memory); `bodyBytesMax` does not apply to it.
    var bodySink: ((UnsafeRawBufferPointer) -> Void)?
    /// The status of the last status line seen.
    var statusFromLine = 0
    var headerLines: [(name: String, value: String)] = []
    /// Bytes of the answer received so far, status line and headers included.
    var bytesReceived = 0
    var overflowed = false
    /// Every address a connection is opened to must pass it (checked after resolution).
    var addressPolicy: AddressPolicy?
    /// Set by the socket callback when the policy refused an address: what the failure says.
    var refusedAddress: (address: String, kind: String)?
    /// Sockets opened through this handle's callback, and how many of them are still open (counted
    /// only where the close callback is installed: see `attach`).
    var socketsOpened = 0
    var socketsOpen = 0
    /// A body sent in pieces through the read callback (a chunked upload): valid while the
    /// transfer runs, each read handing out at most `uploadPieceBytesMax` bytes (one chunk).
    var upload = UnsafeRawBufferPointer(start: nil, count: 0)
    var uploadOffset = 0
    var uploadPieceBytesMax = 0
    private var headerList: UnsafeMutablePointer<curl_slist>? = nil
    /// libcurl writes its error text here (CURLOPT_ERRORBUFFER): memory of our own, not an
    /// array's, whose storage may not be pointed at beyond a closure.
    let errorBuffer: UnsafeMutablePointer<CChar> = {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        buffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        return buffer
    }()
    /// At most this many header lines are kept: a hostile server cannot grow the list without end.
    static let headerLinesMax = 100
    /// A Content-Length up to this many bytes is reserved in the body ahead: the length comes from
    /// the peer.
    static let reserveBytesMax = 64 << 20

    static let globalInit: Bool = {
        // libcurl is opened here, by the first request, not at start (CCurl's shim.h). Without it
        // no request can go out at all: the text says which library to install.
        if let failure = findmy_curl_load() { fatalError(String(cString: failure)) }
        precondition(curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK, "curl_global_init failed")
        return true
    }()

    init(bodyBytesMax: Int, lowercaseHeaderNames: Bool, addressPolicy: AddressPolicy? = nil) {
        _ = Self.globalInit
        self.bodyBytesMax = bodyBytesMax
        self.lowercaseHeaderNames = lowercaseHeaderNames
        self.addressPolicy = addressPolicy
    }

    deinit {
        curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    /// Forgets the previous answer, before the next request on the same handle.
    func clearAnswer() {
        upload = UnsafeRawBufferPointer(start: nil, count: 0)
        statusFromLine = 0
        body = []
        headerLines = []
        bytesReceived = 0
        overflowed = false
        refusedAddress = nil
        errorBuffer[0] = 0
    }

    /// Points `easy`'s callbacks at this state and sets the options every request shares: no
    /// signals, no redirects, `headers` (`name: value` lines) with libcurl's own defaults that our
    /// callers never meant removed. `closeCallback`: count closed sockets too, which is safe only when
    /// this state outlives every connection the handle opens (libcurl calls the close callback of the
    /// handle that opened a connection, even after that handle's request has ended).
    func attach(_ easy: UnsafeMutableRawPointer, headers: [String], closeCallback: Bool) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        curl_slist_free_all(headerList)
        headerList = nil
        for line in headers { headerList = curl_slist_append(headerList, line) }
        _ = findmy_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList)
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = findmy_curl_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 0)
        _ = findmy_curl_easy_setopt_opensocket(easy, curlOpenSocket)
        _ = findmy_curl_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, context)
        if closeCallback {
            _ = findmy_curl_easy_setopt_closesocket(easy, curlCloseSocket)
            _ = findmy_curl_easy_setopt_pointer(easy, CURLOPT_CLOSESOCKETDATA, context)
        }
        _ = findmy_curl_easy_setopt_callback(easy, CURLOPT_WRITEFUNCTION, curlWrite)
        _ = findmy_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context)
        _ = findmy_curl_easy_setopt_callback(easy, CURLOPT_HEADERFUNCTION, curlHeader)
        _ = findmy_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context)
        _ = findmy_curl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer)
    }

    /// Why a transfer that ended with `result` failed, in words: the refused address, the body
    /// limit, or libcurl's text with its detail.
    func failureText(_ result: CURLcode) -> String {
        if let refused = refusedAddress {
            return "refused: \(refused.address) is not a public address (\(refused.kind)); the server sends"
                + " only to public addresses unless its operator allows others"
        }
        if overflowed { return "response over \(bodyBytesMax) bytes" }
        let detail = String(cString: errorBuffer)
        let text = String(cString: curl_easy_strerror(result))
        return detail.isEmpty ? text : "\(text): \(detail)"
    }

    /// The answer's status code once the transfer has ended.
    static func status(_ easy: UnsafeMutableRawPointer) -> Int {
        var status = 0
        _ = findmy_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        return status
    }
}

private func curlWrite(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    let easy = Unmanaged<CurlEasy>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    if let sink = easy.bodySink {
        easy.bytesReceived += length
        sink(UnsafeRawBufferPointer(start: data, count: length))
        return length
    }
    guard easy.body.count + length <= easy.bodyBytesMax else {
        easy.overflowed = true
        return 0
    }
    easy.bytesReceived += length
    data!.withMemoryRebound(to: UInt8.self, capacity: length) {
        easy.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}

/// Hands libcurl the next piece of `upload`; 0 at its end.
func curlReadUpload(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    let easy = Unmanaged<CurlEasy>.fromOpaque(context!).takeUnretainedValue()
    let length = min(size * count, easy.uploadPieceBytesMax, easy.upload.count - easy.uploadOffset)
    guard length > 0 else { return 0 }
    UnsafeMutableRawPointer(buffer!).copyMemory(
        from: easy.upload.baseAddress! + easy.uploadOffset, byteCount: length)
    easy.uploadOffset += length
    return length
}

private func curlHeader(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ context: UnsafeMutableRawPointer?
) -> Int {
    let easy = Unmanaged<CurlEasy>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    easy.bytesReceived += length
    let line = data!.withMemoryRebound(to: UInt8.self, capacity: length) {
        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
    }
    // A status line starts a new header block (an informational 1xx, then the final one).
    if line.hasPrefix("HTTP/") {
        easy.headerLines.removeAll()
        let fields = line.split(separator: " ", maxSplits: 2)
        easy.statusFromLine = fields.count > 1 ? Int(fields[1]) ?? 0 : 0
        return length
    }
    guard let colon = line.firstIndex(of: ":") else { return length }
    let written = line[..<colon]
    let name = easy.lowercaseHeaderNames ? written.lowercased() : String(written)
    let value = line[line.index(after: colon)...].trimmingCharacters(in: " \t\r\n")
    if easy.headerLines.count < CurlEasy.headerLinesMax { easy.headerLines.append((name, value)) }
    // Room for the whole body at once, so that a large answer (a history page is 2.5 MB) does not
    // grow by copying.
    if name.lowercased() == "content-length", let bytes = Int(value), bytes > easy.body.capacity {
        easy.body.reserveCapacity(min(bytes, CurlEasy.reserveBytesMax, easy.bodyBytesMax))
    }
    return length
}

/// Opens the socket of a connection only when the address passes the policy; a refused one fails
/// that connection attempt (libcurl tries the name's other addresses, if any). Close-on-exec, so that
/// a child started meanwhile does not hold the connection open.
private func curlOpenSocket(
    _ context: UnsafeMutableRawPointer?, _ purpose: curlsocktype,
    _ address: UnsafeMutablePointer<curl_sockaddr>?
) -> curl_socket_t {
    let easy = Unmanaged<CurlEasy>.fromOpaque(context!).takeUnretainedValue()
    let target = address!.pointee
    if let policy = easy.addressPolicy {
        guard
            let ip = IPAddress(
                socketAddress: findmy_curl_sockaddr_address(address!), length: Int(target.addrlen))
        else {
            easy.refusedAddress = ("a socket", "non-IP")
            return CURL_SOCKET_BAD
        }
        if let kind = policy.refusal(ip) {
            easy.refusedAddress = (ip.description, kind)
            return CURL_SOCKET_BAD
        }
    }
    // libcurl names TCP as the protocol of a unix socket too, which socket(2) refuses for AF_UNIX.
    let proto = target.family == AF_UNIX ? 0 : target.protocol
    let socketFD = socket(target.family, target.socktype | Int32(SOCK_CLOEXEC.rawValue), proto)
    if socketFD >= 0 {
        easy.socketsOpened += 1
        easy.socketsOpen += 1
    }
    return socketFD
}

private func curlCloseSocket(_ context: UnsafeMutableRawPointer?, _ socketFD: curl_socket_t) -> Int32 {
    let easy = Unmanaged<CurlEasy>.fromOpaque(context!).takeUnretainedValue()
    easy.socketsOpen -= 1
    return close(socketFD)
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var slice = self[...]
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
