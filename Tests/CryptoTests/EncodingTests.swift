import Crypto
import Testing

/// Hex and base64url went from Swift loops to libsodium: the same answers, byte for byte, as the
/// Swift encoders they replaced (kept below as the reference), on every length and on junk.
@Test func hexAndBase64URLMatchTheReferenceOnRandomBytes() {
    var generator = SystemRandomNumberGenerator()
    for length in 0...100 {
        for _ in 0..<20 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let base64 = Base64URL.encode(bytes)
            #expect(base64 == ReferenceBase64URL.encode(bytes))
            #expect(Base64URL.decode(base64) == bytes)
            let hex = Hex.encode(bytes)
            #expect(hex == ReferenceHex.encode(bytes))
            #expect(Hex.decode(hex) == bytes)
            #expect(Hex.decode(hex.uppercased()) == bytes)
        }
    }
}

@Test func hexAndBase64URLRefuseWhatTheReferenceRefuses() {
    var generator = SystemRandomNumberGenerator()
    let base64Alphabet = Array("ABCXYZabcxyz0189-_+/= \n\u{0}é".utf8)
    let hexAlphabet = Array("0123456789abcdefABCDEFgG- \u{0}xé\u{FFFD}".utf8)
    for _ in 0..<20_000 {
        let length = Int.random(in: 0...9, using: &generator)
        let base64 = String(
            decoding: (0..<length).map { _ in base64Alphabet.randomElement(using: &generator)! },
            as: UTF8.self)
        #expect(Base64URL.decode(base64) == ReferenceBase64URL.decode(base64), "\(Array(base64.utf8))")
        let hex = String(
            decoding: (0..<length).map { _ in hexAlphabet.randomElement(using: &generator)! }, as: UTF8.self)
        #expect(Hex.decode(hex) == ReferenceHex.decode(hex), "\(Array(hex.utf8))")
    }
    #expect(Base64URL.decode("Zm9v\u{0}") == nil)
    // Bytes above 0x7F that libsodium alone would read as letters of the alphabet.
    #expect(Base64URL.decode("z\u{FFFD}") == nil)
    #expect(Base64URL.decode("Zm9vYmFy\u{FFFD}\u{FFFD}") == nil)
    #expect(Hex.decode("00\u{0}0") == nil)
}

/// Base64 with the URL- and filename-safe alphabet (RFC 4648 §5), without padding: tokens travel
/// in URLs and headers, where '+', '/' and '=' need escaping.
enum ReferenceBase64URL {
    private static let alphabet = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let chunk = min(3, bytes.count - index)
            var group = UInt32(bytes[index]) << 16
            if chunk > 1 { group |= UInt32(bytes[index + 1]) << 8 }
            if chunk > 2 { group |= UInt32(bytes[index + 2]) }
            for position in 0...chunk {
                output.append(alphabet[Int(group >> UInt32(18 - 6 * position) & 0x3F)])
            }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Nil for characters outside the alphabet, padding, or a length no encoding produces.
    static func decode(_ text: String) -> [UInt8]? {
        var sextets: [UInt8] = []
        for byte in text.utf8 {
            guard let value = alphabet.firstIndex(of: byte) else { return nil }
            sextets.append(UInt8(value))
        }
        guard sextets.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        var index = 0
        while index < sextets.count {
            let chunk = min(4, sextets.count - index)
            var group: UInt32 = 0
            for position in 0..<4 {
                group = group << 6 | (position < chunk ? UInt32(sextets[index + position]) : 0)
            }
            for position in 0..<(chunk - 1) {
                output.append(UInt8(truncatingIfNeeded: group >> UInt32(16 - 8 * position)))
            }
            index += 4
        }
        // Reject non-canonical encodings: unused low bits of the last character must be zero.
        guard encode(output) == text else { return nil }
        return output
    }
}

/// Lowercase hexadecimal, as digests are shown in logs and CLI output.
enum ReferenceHex {
    static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            output.append(digits[Int(byte >> 4)])
            output.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Nil for odd lengths or non-hex characters; either case is accepted.
    static func decode(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var output: [UInt8] = []
        output.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            output.append(high << 4 | low)
            index += 2
        }
        return output
    }
}
