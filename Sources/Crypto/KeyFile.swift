#if canImport(Glibc)
    import Glibc
#endif

/// Why a key file named in the configuration was not used. The messages name the file and what
/// to do, never its contents.
public enum KeyFileError: Error, Equatable, Sendable, CustomStringConvertible {
    case unreadable(path: String, errno: Int32)
    /// Group or others may read or write it, or it belongs to another user: a provider key lets
    /// whoever holds it push to every device of the app.
    case tooOpen(path: String, mode: UInt32)
    case notOwned(path: String, owner: UInt32)
    case notAKey(path: String, expected: String)
    case tooLarge(path: String)
    case cannotWrite(path: String, errno: Int32)

    public var description: String {
        switch self {
        case .unreadable(let path, let code):
            "cannot read key file \(path): \(String(cString: strerror(code)))"
        case .tooOpen(let path, let mode):
            "key file \(path) has mode \(String(mode & 0o777, radix: 8)); it must be readable by its owner only: "
                + "chmod 600 \(path)"
        case .notOwned(let path, let owner):
            "key file \(path) belongs to uid \(owner), not to the user findmy runs as (\(geteuid())): "
                + "chown it to that user"
        case .notAKey(let path, let expected):
            "key file \(path) does not hold \(expected)"
        case .tooLarge(let path):
            "key file \(path) is over \(KeyFile.bytesMax) bytes: is it the right file?"
        case .cannotWrite(let path, let code):
            "cannot write key file \(path): \(String(cString: strerror(code)))"
        }
    }
}

/// Reading and writing secret key files, with the rule that they are the owner's alone.
public enum KeyFile {
    /// A service-account JSON is about 2.4 KB, a `.p8` about 250 bytes.
    public static let bytesMax = 64 * 1024

    /// The bytes of `path` once it is checked to be a regular file owned by this process's
    /// user and neither readable nor writable by group or others. Checked on the open descriptor
    /// (fstat), so the file checked is the file read.
    public static func readPrivate(_ path: String) throws(KeyFileError) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .unreadable(path: path, errno: errno) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .unreadable(path: path, errno: errno) }
        guard status.st_uid == geteuid() else { throw .notOwned(path: path, owner: status.st_uid) }
        guard status.st_mode & 0o077 == 0 else { throw .tooOpen(path: path, mode: status.st_mode) }
        guard Int(status.st_size) <= bytesMax else { throw .tooLarge(path: path) }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes {
                read(descriptor, $0.baseAddress! + filled, $0.count - filled)
            }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw .unreadable(path: path, errno: count < 0 ? errno : EIO) }
            filled += count
        }
        return bytes
    }

    /// A P-256 private key from `path`, or a new one written there with mode 0600 when the file
    /// does not exist (the server's VAPID key, made on first start). Written to a temporary name,
    /// synced and renamed, so a crash never leaves half a key.
    public static func loadOrCreateP256(_ path: String) throws(KeyFileError) -> PrivateKey {
        if access(path, F_OK) == 0 {
            let text = try readPrivate(path)
            guard let key = PrivateKey.pem(text), key.kind == .p256 else {
                throw .notAKey(path: path, expected: "a P-256 private key in PEM")
            }
            return key
        }
        let key = PrivateKey.generateP256()
        let text = key.pemText()
        try writePrivate(path, text)
        return key
    }

    /// Writes `bytes` to `path` with mode 0600: to a temporary name, synced and renamed, so that a
    /// crash never leaves half a key.
    static func writePrivate(_ path: String, _ bytes: [UInt8]) throws(KeyFileError) {
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .cannotWrite(path: temporary, errno: errno) }
        var written = 0
        var failure: Int32 = 0
        // O_CREAT's mode is masked by the umask, which may only remove bits; fchmod states it.
        if fchmod(descriptor, 0o600) != 0 { failure = errno }
        while failure == 0 && written < bytes.count {
            let count = bytes.withUnsafeBytes {
                write(descriptor, $0.baseAddress! + written, $0.count - written)
            }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { failure = count < 0 ? errno : EIO } else { written += count }
        }
        if failure == 0 && fsync(descriptor) != 0 { failure = errno }
        close(descriptor)
        if failure == 0 && rename(temporary, path) != 0 { failure = errno }
        guard failure == 0 else {
            unlink(temporary)
            throw .cannotWrite(path: path, errno: failure)
        }
    }
}
