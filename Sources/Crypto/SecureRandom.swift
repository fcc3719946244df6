import CCrypto

/// Random bytes from libcrypto's `RAND_bytes`, a CSPRNG seeded by the kernel's getrandom(2).
/// (Swift's Glibc module does not export getrandom, and the C boundary stays in CCrypto.)
public enum SecureRandom {
    /// Traps when no secure randomness is available (RAND_bytes fails only when it cannot seed from
    /// the kernel): a token made from anything weaker would be a silent security hole.
    public static func bytes(count: Int) -> [UInt8] {
        precondition(count >= 0, "count must not be negative")
        var bytes = [UInt8](repeating: 0, count: count)
        // RAND_bytes takes an Int32 length; chunk so any count works.
        let chunkByteCountMax = 1 << 30
        bytes.withUnsafeMutableBytes { buffer in
            var filled = 0
            while filled < buffer.count {
                let chunk = min(chunkByteCountMax, buffer.count - filled)
                let ok = RAND_bytes(
                    buffer.baseAddress!.assumingMemoryBound(to: UInt8.self) + filled, Int32(chunk))
                guard ok == 1 else { fatalError("RAND_bytes failed: no secure randomness available") }
                filled += chunk
            }
        }
        return bytes
    }
}

/// Bearer tokens for devices and sessions.
public enum Token {
    /// 256 bits: far beyond guessing, and the same size as the SHA-256 we store instead of it.
    public static let randomByteCount = 32

    /// A URL-safe base64 string (43 characters, no padding) of 32 random bytes.
    public static func generate() -> String {
        Base64URL.encode(SecureRandom.bytes(count: randomByteCount))
    }
}
