import CSodium

/// libsodium's `crypto_secretbox` (XSalsa20-Poly1305), in the wire form OwnTracks uses:
/// nonce (24 bytes) ‖ MAC (16) ‖ ciphertext, the output of `crypto_secretbox_easy` after its nonce.
public enum SecretBox {
    public static let keyBytes = Int(crypto_secretbox_KEYBYTES)
    public static let nonceBytes = Int(crypto_secretbox_NONCEBYTES)
    public static let macBytes = Int(crypto_secretbox_MACBYTES)
    /// `sodium_init` before the first random nonce; safe to call again and from several threads.
    private static let initialised: Bool = sodium_init() >= 0

    /// nonce ‖ MAC ‖ ciphertext of `plaintext`, with a fresh random nonce. `key` is `keyBytes` long.
    public static func seal(_ plaintext: [UInt8], key: [UInt8]) -> [UInt8] {
        precondition(key.count == keyBytes, "secretbox keys are \(keyBytes) bytes")
        precondition(initialised, "sodium_init failed")
        var nonce = [UInt8](repeating: 0, count: nonceBytes)
        randombytes_buf(&nonce, nonceBytes)
        var sealed = [UInt8](repeating: 0, count: macBytes + plaintext.count)
        _ = crypto_secretbox_easy(&sealed, plaintext, UInt64(plaintext.count), nonce, key)
        return nonce + sealed
    }

    /// The plaintext of nonce ‖ MAC ‖ ciphertext, or nil when it is too short or its MAC does not
    /// verify under `key` (a wrong key, or altered bytes).
    public static func open(_ box: [UInt8], key: [UInt8]) -> [UInt8]? {
        precondition(key.count == keyBytes, "secretbox keys are \(keyBytes) bytes")
        guard box.count >= nonceBytes + macBytes else { return nil }
        let nonce = Array(box.prefix(nonceBytes))
        let sealed = Array(box.dropFirst(nonceBytes))
        var plaintext = [UInt8](repeating: 0, count: sealed.count - macBytes)
        guard crypto_secretbox_open_easy(&plaintext, sealed, UInt64(sealed.count), nonce, key) == 0 else {
            return nil
        }
        return plaintext
    }
}
