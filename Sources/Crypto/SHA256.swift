import CCrypto

/// SHA-256 through libcrypto's one-shot `EVP_Digest`.
public enum SHA256 {
    public static let digestByteCount = 32

    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let contiguous = Array(bytes)
        var digest = [UInt8](repeating: 0, count: digestByteCount)
        var digestLength: UInt32 = 0
        let ok = contiguous.withUnsafeBytes { input in
            digest.withUnsafeMutableBufferPointer { output in
                EVP_Digest(
                    input.baseAddress, input.count, output.baseAddress, &digestLength, EVP_sha256(), nil)
            }
        }
        // Fails only when libcrypto cannot allocate or the provider is missing: nothing to recover.
        precondition(ok == 1 && digestLength == UInt32(digestByteCount), "EVP_Digest(SHA-256) failed")
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
