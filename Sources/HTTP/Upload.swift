#if canImport(Glibc)
    import Glibc
#endif

/// Where an upload route's body was written, and how long it is.
public struct BodyFile: Sendable {
    /// An absolute or directory-relative path in the route's directory: a new file, mode 0600.
    public var path: String
    public var bytes: Int64

    public init(path: String, bytes: Int64) {
        self.path = path
        self.bytes = bytes
    }
}

/// One route added with `Router.addUpload`.
struct UploadRoute: Sendable {
    let directory: String
    let bytesMax: Int64
    let admit: @Sendable (HTTPRequest) -> HTTPResponse?
    let handler: Router.Handler

    /// The handler, wrapped so that the file goes once it has answered. A handler that renamed the
    /// file away leaves nothing to remove (ENOENT, ignored); the name is 128 random bits, so no
    /// other file takes it meanwhile.
    var removingHandler: Router.Handler {
        { [handler] request in
            defer { if let path = request.bodyFile?.path { unlink(path) } }
            return handler(request)
        }
    }

    /// `Router.respond` on this route: the request's body written to a new file first, unless the
    /// caller gave one, and `admit` and `bytesMax` applied as the server does.
    func respondInProcess(to request: HTTPRequest) -> HTTPResponse {
        if let refusal = admit(request) { return refusal }
        if request.bodyFile != nil { return handler(request) }
        if Int64(request.body.count) > bytesMax { return tooLarge() }
        let file: UploadFile
        switch UploadFile.create(in: directory) {
        case .created(let created): file = created
        case .refused(let refusal): return refusal
        }
        let failure = request.body.withUnsafeBytes { file.append($0) } ?? file.finish()
        if let failure {
            file.remove()
            return failure
        }
        var request = request
        request.bodyFile = BodyFile(path: file.path, bytes: file.bytes)
        request.body = []
        return removingHandler(request)
    }

    func tooLarge() -> HTTPResponse {
        .error(
            status: 413, code: "too_large",
            message: "the upload is larger than this route's limit of \(bytesMax) bytes; send a smaller file")
    }
}

/// A body being written to its file, on the event-loop thread that reads the connection. Writes
/// go to the page cache; the file is not synced (a handler that keeps it syncs it).
final class UploadFile {
    let path: String
    private(set) var bytes: Int64 = 0
    private var fd: Int32

    enum Creation {
        case created(UploadFile)
        case refused(HTTPResponse)
    }

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    /// A new file, `O_CREAT | O_EXCL`, mode 0600, named `upload-` and 32 random hex digits, or the
    /// 500 to answer when the directory refuses it.
    static func create(in directory: String) -> Creation {
        var code: Int32 = 0
        // A name taken already (EEXIST) is practically impossible; a few tries cost nothing.
        for _ in 0..<4 {
            var generator = SystemRandomNumberGenerator()
            let name =
                "upload-" + hex(generator.next() as UInt64) + hex(generator.next() as UInt64)
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 { return .created(UploadFile(path: path, fd: fd)) }
            code = errno
            if code != EEXIST { break }
        }
        return .refused(storageFailure("could not create a file in \(directory)", code))
    }

    /// Appends every byte, or the answer to give if the file refused them (the caller removes it).
    func append(_ data: UnsafeRawBufferPointer) -> HTTPResponse? {
        var offset = 0
        while offset < data.count {
            let written = write(fd, data.baseAddress! + offset, data.count - offset)
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                return Self.storageFailure("could not write the upload to \(path)", code)
            }
            offset += written
        }
        bytes += Int64(data.count)
        return nil
    }

    /// Closes the file once the body is complete; the answer to give if closing failed.
    func finish() -> HTTPResponse? {
        guard fd >= 0 else { return nil }
        let closed = close(fd)
        let code = errno
        fd = -1
        return closed == 0 ? nil : Self.storageFailure("could not close \(path)", code)
    }

    /// Closes the file if open and deletes it: a body refused, failed or abandoned.
    func remove() {
        if fd >= 0 { close(fd) }
        fd = -1
        unlink(path)
    }

    /// 507 when the disk or quota is full (the client may retry later), 500 otherwise.
    private static func storageFailure(_ what: String, _ code: Int32) -> HTTPResponse {
        let full = code == ENOSPC || code == EDQUOT
        return .error(
            status: full ? 507 : 500, code: "upload_not_stored",
            message: "\(what): \(String(cString: strerror(code))); the upload was not kept"
                + (full ? ", free some space and send it again" : ""))
    }

    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
