import CSodium

/// Base64 with the URL- and filename-safe alphabet (RFC 4648 §5), without padding: tokens travel
/// in URLs and headers, where '+', '/' and '=' need escaping. Through libsodium's
/// `sodium_bin2base64` and `sodium_base642bin` (`sodium_base64_VARIANT_URLSAFE_NO_PADDING`), whose
/// table lookups take the same time for every character.
public enum Base64URL {
    private static let variant = sodium_base64_VARIANT_URLSAFE_NO_PADDING

    public static func encode(_ bytes: [UInt8]) -> String { sodiumBase64Encode(bytes, variant) }

    /// Nil for characters outside the alphabet, padding, or a length no encoding produces; and for a
    /// non-canonical encoding, whose last character has unused low bits set.
    public static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        if input.isEmpty { return [] }
        guard let bytes = sodiumBase64Decode(input, ignoring: nil, variant) else { return nil }
        // libsodium reads a byte above 0x7F as a sign-extended char and maps some of them into the
        // alphabet; the canonical form of what was decoded is ASCII, so a round trip refuses them.
        guard encode(bytes) == text else { return nil }
        return bytes
    }
}

/// Base64 with the standard alphabet and padding (RFC 4648 §4): HTTP Basic credentials and the
/// payloads of apps that use it (OwnTracks' encrypted messages). Through libsodium's
/// `sodium_base642bin` (`sodium_base64_VARIANT_ORIGINAL`), constant time per character.
public enum Base64 {
    private static let variant = sodium_base64_VARIANT_ORIGINAL

    public static func encode(_ bytes: [UInt8]) -> String { sodiumBase64Encode(bytes, variant) }

    /// Nil for characters outside the alphabet, missing padding or a length no encoding produces.
    /// Line breaks and spaces (some encoders wrap lines) are ignored.
    public static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        if input.isEmpty { return [] }
        guard input.allSatisfy({ $0 < 0x80 }) else { return nil }
        return sodiumBase64Decode(input, ignoring: " \r\n", variant)
    }
}

/// `sodium_bin2base64` in `variant`; the length libsodium wants includes the terminating NUL.
private func sodiumBase64Encode(_ bytes: [UInt8], _ variant: Int32) -> String {
    if bytes.isEmpty { return "" }
    let capacity = sodium_base64_encoded_len(bytes.count, variant)
    var output = [CChar](repeating: 0, count: capacity)
    bytes.withUnsafeBufferPointer { input in
        _ = sodium_bin2base64(&output, capacity, input.baseAddress, input.count, variant)
    }
    return String(decoding: output.prefix(capacity - 1).map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// `sodium_base642bin` in `variant`, skipping the characters of `ignoring`; nil when libsodium refuses.
private func sodiumBase64Decode(_ input: [UInt8], ignoring: String?, _ variant: Int32) -> [UInt8]? {
    var output = [UInt8](repeating: 0, count: input.count / 4 * 3 + 3)
    var count = 0
    let result = input.withUnsafeBufferPointer { input in
        input.withMemoryRebound(to: CChar.self) { characters in
            sodium_base642bin(
                &output, output.count, characters.baseAddress, characters.count, ignoring, &count, nil,
                variant)
        }
    }
    guard result == 0 else { return nil }
    return Array(output.prefix(count))
}

/// Lowercase hexadecimal, as digests are shown in logs and CLI output. Through libsodium's
/// `sodium_bin2hex` and `sodium_hex2bin`, which take the same time for every digit.
public enum Hex {
    public static func encode(_ bytes: [UInt8]) -> String {
        if bytes.isEmpty { return "" }
        let capacity = bytes.count * 2 + 1
        var output = [CChar](repeating: 0, count: capacity)
        bytes.withUnsafeBufferPointer { input in
            _ = sodium_bin2hex(&output, capacity, input.baseAddress, input.count)
        }
        return String(decoding: output.prefix(capacity - 1).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Nil for odd lengths or non-hex characters; either case is accepted.
    public static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        if input.isEmpty { return [] }
        var output = [UInt8](repeating: 0, count: (input.count + 1) / 2)
        var count = 0
        let result = input.withUnsafeBufferPointer { input in
            input.withMemoryRebound(to: CChar.self) { characters in
                sodium_hex2bin(
                    &output, output.count, characters.baseAddress, characters.count, nil, &count, nil)
            }
        }
        guard result == 0 else { return nil }
        return Array(output.prefix(count))
    }
}
