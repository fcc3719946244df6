import CCrypto

/// SHA-256 as libcrypto's default provider implements it, fetched once. `EVP_sha256()` in
/// `EVP_DigestInit_ex` fetches it again on every call (OpenSSL 3's implicit fetch: a lock and a
/// lookup in the method store, crypto(7) "Performance"), which cost more than hashing a token
/// itself. A fetched `EVP_MD` is immutable and may be used from any thread.
nonisolated(unsafe) private let sha256Method: OpaquePointer = {
    guard let method = EVP_MD_fetch(nil, "SHA256", nil) else {
        preconditionFailure("libcrypto has no SHA256 (EVP_MD_fetch failed)")
    }
    return method
}()

/// SHA-256 through libcrypto's EVP interface.
public enum SHA256 {
    public static let digestByteCount = 32

    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        if let digest = bytes.withContiguousStorageIfAvailable({
            hash(concatenating: [UnsafeRawBufferPointer($0)])
        }) {
            return digest
        }
        return Array(bytes).withUnsafeBytes { hash(concatenating: [$0]) }
    }

    /// SHA-256 of `parts` one after the other, read where they are: a request body of hundreds of
    /// kilobytes is hashed with its prefix without being copied next to it first.
    public static func hash(concatenating parts: [UnsafeRawBufferPointer]) -> [UInt8] {
        // Fails only when libcrypto cannot allocate or the provider is missing: nothing to recover.
        guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        // The calls are kept out of `precondition`, which -Ounchecked would drop with them.
        let started = EVP_DigestInit_ex2(context, sha256Method, nil)
        precondition(started == 1, "EVP_DigestInit_ex2(SHA-256) failed")
        for part in parts where !part.isEmpty {
            let updated = EVP_DigestUpdate(context, part.baseAddress, part.count)
            precondition(updated == 1, "EVP_DigestUpdate failed")
        }
        var digest = [UInt8](repeating: 0, count: digestByteCount)
        var digestLength: UInt32 = 0
        let ok = digest.withUnsafeMutableBufferPointer { output in
            EVP_DigestFinal_ex(context, output.baseAddress, &digestLength)
        }
        precondition(ok == 1 && digestLength == UInt32(digestByteCount), "EVP_DigestFinal_ex(SHA-256) failed")
        return digest
    }
}

/// Comparison whose time does not depend on where the inputs differ, for secrets such as token
/// hashes; `CRYPTO_memcmp` cannot be turned into an early-exit loop by the optimiser. Lengths are
/// not secret: unequal lengths return false at once.
public func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
    guard lhs.count == rhs.count else { return false }
    if lhs.isEmpty { return true }
    return lhs.withUnsafeBytes { left in
        rhs.withUnsafeBytes { right in
            CRYPTO_memcmp(left.baseAddress, right.baseAddress, left.count) == 0
        }
    }
}

/// `constantTimeEqual` of two secrets' UTF-8 bytes (CSRF tokens, cookie values).
public func constantTimeEqual(_ lhs: String, _ rhs: String) -> Bool {
    constantTimeEqual(Array(lhs.utf8), Array(rhs.utf8))
}
