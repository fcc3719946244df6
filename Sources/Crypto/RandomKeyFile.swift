#if canImport(Glibc)
    import Glibc
#endif

extension KeyFile {
    /// `count` random bytes from `path`, or new ones written there with mode 0600 when the file does
    /// not exist (a server key made on first start, such as the geofence webhooks' signing key).
    /// Written to a temporary name, synced and renamed, so a crash never leaves half a key.
    public static func loadOrCreateRandom(_ path: String, count: Int) throws(KeyFileError) -> [UInt8] {
        if access(path, F_OK) == 0 {
            let bytes = try readPrivate(path)
            guard bytes.count == count else { throw .notAKey(path: path, expected: "\(count) random bytes") }
            return bytes
        }
        let bytes = SecureRandom.bytes(count: count)
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .cannotWrite(path: temporary, errno: errno) }
        var written = 0
        var failure: Int32 = 0
        // O_CREAT's mode is masked by the umask, which may only remove bits; fchmod states it.
        if fchmod(descriptor, 0o600) != 0 { failure = errno }
        while failure == 0 && written < bytes.count {
            let result = bytes.withUnsafeBytes {
                write(descriptor, $0.baseAddress! + written, $0.count - written)
            }
            if result < 0 && errno == EINTR { continue }
            if result <= 0 { failure = result < 0 ? errno : EIO } else { written += result }
        }
        if failure == 0 && fsync(descriptor) != 0 { failure = errno }
        close(descriptor)
        if failure == 0 && rename(temporary, path) != 0 { failure = errno }
        guard failure == 0 else {
            unlink(temporary)
            throw .cannotWrite(path: path, errno: failure)
        }
        return bytes
    }
}
