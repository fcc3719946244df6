import CCrypto

extension SHA256 {
    /// SHA-256 of bytes handed over a piece at a time (a file read a buffer at a time), through
    /// libcrypto's EVP_DigestUpdate: the whole input is never in memory. `finish()` once.
    public final class Stream {
        private let context: OpaquePointer
        private var finished = false

        public init() {
            // Fails only when libcrypto cannot allocate or the provider is missing: nothing to recover.
            guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new failed") }
            self.context = context
            let started = EVP_DigestInit_ex(context, EVP_sha256(), nil)
            precondition(started == 1, "EVP_DigestInit_ex(SHA-256) failed")
        }

        deinit { EVP_MD_CTX_free(context) }

        public func update(_ bytes: UnsafeRawBufferPointer) {
            precondition(!finished, "SHA256.Stream updated after finish()")
            guard !bytes.isEmpty else { return }
            let updated = EVP_DigestUpdate(context, bytes.baseAddress, bytes.count)
            precondition(updated == 1, "EVP_DigestUpdate failed")
        }

        /// The digest of everything updated so far; the stream takes no more input.
        public func finish() -> [UInt8] {
            precondition(!finished, "SHA256.Stream finished twice")
            finished = true
            var digest = [UInt8](repeating: 0, count: digestByteCount)
            var digestLength: UInt32 = 0
            let ok = digest.withUnsafeMutableBufferPointer { output in
                EVP_DigestFinal_ex(context, output.baseAddress, &digestLength)
            }
            precondition(
                ok == 1 && digestLength == UInt32(digestByteCount), "EVP_DigestFinal_ex(SHA-256) failed")
            return digest
        }
    }
}
