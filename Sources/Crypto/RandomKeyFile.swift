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
        try writePrivate(path, bytes)
        return bytes
    }
}
