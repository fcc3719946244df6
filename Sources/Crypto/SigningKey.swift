import CCrypto

/// A private key held by libcrypto (`EVP_PKEY`): the push providers' signing keys (an APNs `.p8`
/// P-256 key, an FCM service account's RSA key, the server's VAPID key) and the ephemeral P-256
/// keys of Web Push encryption. Immutable once made; OpenSSL allows concurrent signing with one
/// key as long as each operation has its own context, which every method here creates.
public final class PrivateKey: @unchecked Sendable {
    public enum Kind: Sendable, Equatable {
        case p256
        case rsa
    }

    let key: OpaquePointer
    public let kind: Kind

    private init(_ key: OpaquePointer, kind: Kind) {
        self.key = key
        self.kind = kind
    }

    deinit { EVP_PKEY_free(key) }

    /// A key from PEM text: PKCS#8 (`BEGIN PRIVATE KEY`, as Apple's `.p8` files and Google's
    /// service accounts hold it) or the traditional EC and RSA forms. Nil for anything else, and for
    /// an EC key on a curve other than P-256.
    public static func pem(_ text: [UInt8]) -> PrivateKey? {
        guard !text.isEmpty, text.count < Int(Int32.max) else { return nil }
        guard
            let key = text.withUnsafeBufferPointer({ findmy_pkey_from_pem($0.baseAddress, Int32($0.count)) })
        else { return nil }
        if findmy_pkey_is_p256(key) == 1 { return PrivateKey(key, kind: .p256) }
        if findmy_pkey_is_rsa(key) == 1 { return PrivateKey(key, kind: .rsa) }
        EVP_PKEY_free(key)
        return nil
    }

    /// A fresh P-256 key pair.
    public static func generateP256() -> PrivateKey {
        guard let key = findmy_p256_generate() else { fatalError("P-256 key generation failed") }
        return PrivateKey(key, kind: .p256)
    }

    /// A P-256 key from its private scalar (32 bytes) and uncompressed public point (65 bytes),
    /// as test vectors give them. Nil when they do not form a valid key.
    public static func p256(scalar: [UInt8], publicPoint: [UInt8]) -> PrivateKey? {
        guard scalar.count == 32, publicPoint.count == 65 else { return nil }
        guard let key = findmy_p256_from_raw(publicPoint, publicPoint.count, scalar, scalar.count) else {
            return nil
        }
        return PrivateKey(key, kind: .p256)
    }

    /// PKCS#8 PEM text, to store a generated key.
    public func pemText() -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        let length = findmy_pkey_to_pem(key, &buffer, Int32(buffer.count))
        precondition(length > 0, "PEM_write_bio_PrivateKey failed")
        return Array(buffer.prefix(Int(length)))
    }

    /// The uncompressed public point, 0x04 || X || Y (65 bytes). P-256 keys only.
    public var publicPoint: [UInt8] {
        precondition(kind == .p256, "only P-256 keys have a public point")
        var point = [UInt8](repeating: 0, count: 65)
        let length = findmy_p256_public_point(key, &point, point.count)
        precondition(length == 65, "a P-256 public point is 65 bytes")
        return point
    }

    /// ES256 (ECDSA P-256 with SHA-256) over `message`, as JWS wants it: the raw R || S, 64
    /// bytes. OpenSSL signs in DER (a SEQUENCE of two INTEGERs of varying length); a JWT with a DER
    /// signature is refused by APNs and every JOSE library.
    public func signES256(_ message: [UInt8]) -> [UInt8] {
        precondition(kind == .p256, "ES256 needs a P-256 key")
        let der = digestSign(message)
        var raw = [UInt8](repeating: 0, count: 64)
        let ok = der.withUnsafeBufferPointer { findmy_ecdsa_der_to_raw($0.baseAddress, $0.count, &raw, 32) }
        precondition(ok == 1, "OpenSSL gave an ECDSA signature that is not DER")
        return raw
    }

    /// RS256 (RSASSA-PKCS1-v1_5 with SHA-256) over `message`.
    public func signRS256(_ message: [UInt8]) -> [UInt8] {
        precondition(kind == .rsa, "RS256 needs an RSA key")
        return digestSign(message)
    }

    /// Whether `signature` (raw R || S) is this key's ES256 signature of `message`.
    public func verifyES256(_ message: [UInt8], signature: [UInt8]) -> Bool {
        precondition(kind == .p256, "ES256 needs a P-256 key")
        guard signature.count == 64 else { return false }
        var der = [UInt8](repeating: 0, count: 80)
        let length = findmy_ecdsa_raw_to_der(signature, 32, &der, Int32(der.count))
        guard length > 0 else { return false }
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        let result = EVP_DigestVerify(context, der, Int(length), message, message.count)
        ERR_clear_error()
        return result == 1
    }

    /// ECDH with the peer's public point: the shared X coordinate (32 bytes). Nil when the point
    /// is not on P-256.
    public func sharedSecret(peerPoint: [UInt8]) -> [UInt8]? {
        precondition(kind == .p256, "ECDH needs a P-256 key")
        guard peerPoint.count == 65, let peer = findmy_p256_from_raw(peerPoint, peerPoint.count, nil, 0)
        else {
            return nil
        }
        defer { EVP_PKEY_free(peer) }
        guard let context = EVP_PKEY_CTX_new(key, nil) else { fatalError("EVP_PKEY_CTX_new failed") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, peer) == 1 else {
            ERR_clear_error()
            return nil
        }
        var secret = [UInt8](repeating: 0, count: 32)
        var length = secret.count
        guard EVP_PKEY_derive(context, &secret, &length) == 1, length == 32 else {
            ERR_clear_error()
            return nil
        }
        return secret
    }

    private func digestSign(_ message: [UInt8]) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        precondition(
            EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1, "EVP_DigestSignInit failed")
        var length = 0
        precondition(
            EVP_DigestSign(context, nil, &length, message, message.count) == 1, "EVP_DigestSign failed")
        var signature = [UInt8](repeating: 0, count: length)
        precondition(
            EVP_DigestSign(context, &signature, &length, message, message.count) == 1, "EVP_DigestSign failed"
        )
        return Array(signature.prefix(length))
    }
}
