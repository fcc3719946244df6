import CCrypto

/// HMAC-SHA256 and HKDF-SHA256 (RFC 5869), through libcrypto's one-shot `HMAC`.
public enum HKDF {
    public static func hmacSHA256(key: [UInt8], _ data: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let result = HMAC(EVP_sha256(), key, Int32(key.count), data, data.count, &output, &length)
        precondition(result != nil && length == 32, "HMAC-SHA256 failed")
        return output
    }

    /// HKDF-Extract then HKDF-Expand to `length` bytes (at most 32: one block is all Web Push needs).
    public static func sha256(salt: [UInt8], inputKey: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
        precondition(length > 0 && length <= 32, "one HKDF-SHA256 block")
        let pseudoRandomKey = hmacSHA256(key: salt, inputKey)
        return Array(hmacSHA256(key: pseudoRandomKey, info + [1]).prefix(length))
    }
}

/// AES-128-GCM with a 12-byte nonce and a 16-byte tag appended to the ciphertext.
public enum AES128GCM {
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) -> [UInt8] {
        precondition(key.count == 16 && nonce.count == 12)
        guard let context = EVP_CIPHER_CTX_new() else { fatalError("EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }
        precondition(EVP_EncryptInit_ex(context, EVP_aes_128_gcm(), nil, key, nonce) == 1)
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        precondition(EVP_EncryptUpdate(context, &output, &length, plaintext, Int32(plaintext.count)) == 1)
        var final: Int32 = 0
        output.withUnsafeMutableBufferPointer { buffer in
            precondition(EVP_EncryptFinal_ex(context, buffer.baseAddress! + Int(length), &final) == 1)
            precondition(
                EVP_CIPHER_CTX_ctrl(
                    context, EVP_CTRL_GCM_GET_TAG, 16, buffer.baseAddress! + Int(length + final)) == 1)
        }
        return Array(output.prefix(Int(length + final) + 16))
    }

    /// Nil when the tag does not verify.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8]) -> [UInt8]? {
        precondition(key.count == 16 && nonce.count == 12)
        guard sealed.count >= 16 else { return nil }
        guard let context = EVP_CIPHER_CTX_new() else { fatalError("EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }
        precondition(EVP_DecryptInit_ex(context, EVP_aes_128_gcm(), nil, key, nonce) == 1)
        let ciphertext = Array(sealed.dropLast(16))
        var tag = Array(sealed.suffix(16))
        var output = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var length: Int32 = 0
        guard EVP_DecryptUpdate(context, &output, &length, ciphertext, Int32(ciphertext.count)) == 1,
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1
        else { return nil }
        var final: Int32 = 0
        let ok = output.withUnsafeMutableBufferPointer {
            EVP_DecryptFinal_ex(context, $0.baseAddress! + Int(length), &final) == 1
        }
        ERR_clear_error()
        return ok ? Array(output.prefix(Int(length + final))) : nil
    }
}

/// Web Push message encryption (RFC 8291) in the `aes128gcm` content coding (RFC 8188), as one
/// record: what a push service relays to the browser or UnifiedPush distributor, which alone holds
/// the private half of `p256dh`.
///
///   body   = salt(16) || rs(u32 big-endian) || idlen(u8 = 65) || keyid(the sender's ephemeral
///            public point, 65) || record
///   record = AES-128-GCM(CEK, NONCE, plaintext || 0x02 || 0x00 * padding)   (0x02: last record)
///   IKM    = HKDF(salt = auth, ikm = ECDH(ephemeral, ua_public),
///                 info = "WebPush: info" 0x00 || ua_public || as_public, 32)
///   CEK    = HKDF(salt, IKM, "Content-Encoding: aes128gcm" 0x00, 16)
///   NONCE  = HKDF(salt, IKM, "Content-Encoding: nonce" 0x00, 12)
public enum WebPushEncryption {
    /// The largest plaintext one push may carry: RFC 8291 §4 lets a push service refuse a body over
    /// 4096 bytes; the header is 86 bytes, the tag 16 and the delimiter 1.
    public static let plaintextBytesMax = 4096 - 86 - 16 - 1
    public static let authSecretBytes = 16
    public static let publicPointBytes = 65

    /// Whether `point` is an uncompressed P-256 public key on the curve (a subscription's `p256dh`).
    public static func isPublicPoint(_ point: [UInt8]) -> Bool {
        guard point.count == publicPointBytes, point[0] == 4 else { return false }
        guard let key = findmy_p256_from_raw(point, point.count, nil, 0) else { return false }
        EVP_PKEY_free(key)
        return true
    }

    public enum Failure: Error, Equatable, Sendable {
        /// The subscription's `p256dh` is not a P-256 point, or its `auth` not 16 bytes.
        case badSubscriptionKeys
        case tooLarge
    }

    /// The body for one push. `ephemeral` and `salt` are fresh per message; tests pass RFC 8291's.
    public static func encrypt(
        _ plaintext: [UInt8], receiverPoint: [UInt8], authSecret: [UInt8], paddingBytes: Int = 0,
        ephemeral: PrivateKey = .generateP256(), salt: [UInt8] = SecureRandom.bytes(count: 16)
    ) throws(Failure) -> [UInt8] {
        guard authSecret.count == authSecretBytes, receiverPoint.count == publicPointBytes else {
            throw .badSubscriptionKeys
        }
        guard plaintext.count + paddingBytes <= plaintextBytesMax, paddingBytes >= 0 else { throw .tooLarge }
        precondition(salt.count == 16)
        let senderPoint = ephemeral.publicPoint
        guard let shared = ephemeral.sharedSecret(peerPoint: receiverPoint) else {
            throw .badSubscriptionKeys
        }
        let (key, nonce) = contentKeys(
            shared: shared, authSecret: authSecret, receiverPoint: receiverPoint, senderPoint: senderPoint,
            salt: salt)
        let record = plaintext + [2] + [UInt8](repeating: 0, count: paddingBytes)
        let recordSize = UInt32(4096)
        var body = salt
        body += [
            UInt8(recordSize >> 24), UInt8(recordSize >> 16 & 0xFF), UInt8(recordSize >> 8 & 0xFF),
            UInt8(recordSize & 0xFF),
        ]
        body.append(UInt8(senderPoint.count))
        body += senderPoint
        body += AES128GCM.seal(record, key: key, nonce: nonce)
        return body
    }

    /// The receiver's side, for tests: the plaintext of a one-record body, or nil.
    public static func decrypt(_ body: [UInt8], receiver: PrivateKey, authSecret: [UInt8]) -> [UInt8]? {
        guard body.count > 21 + publicPointBytes + 16, body[20] == UInt8(publicPointBytes) else { return nil }
        let salt = Array(body[0..<16])
        let senderPoint = Array(body[21..<(21 + publicPointBytes)])
        guard let shared = receiver.sharedSecret(peerPoint: senderPoint) else { return nil }
        let (key, nonce) = contentKeys(
            shared: shared, authSecret: authSecret, receiverPoint: receiver.publicPoint,
            senderPoint: senderPoint, salt: salt)
        guard var record = AES128GCM.open(Array(body[(21 + publicPointBytes)...]), key: key, nonce: nonce)
        else { return nil }
        while record.last == 0 { record.removeLast() }
        guard record.last == 2 else { return nil }
        record.removeLast()
        return record
    }

    private static func contentKeys(
        shared: [UInt8], authSecret: [UInt8], receiverPoint: [UInt8], senderPoint: [UInt8], salt: [UInt8]
    ) -> (key: [UInt8], nonce: [UInt8]) {
        let info = Array("WebPush: info".utf8) + [0] + receiverPoint + senderPoint
        let inputKey = HKDF.sha256(salt: authSecret, inputKey: shared, info: info, length: 32)
        let key = HKDF.sha256(
            salt: salt, inputKey: inputKey, info: Array("Content-Encoding: aes128gcm".utf8) + [0], length: 16)
        let nonce = HKDF.sha256(
            salt: salt, inputKey: inputKey, info: Array("Content-Encoding: nonce".utf8) + [0], length: 12)
        return (key, nonce)
    }
}
