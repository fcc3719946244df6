/// The byte rules both JSON readers (`JSONParser` over a whole buffer, `JSONStreamReader` over a
/// stream) apply inside strings, so that the two accept and refuse exactly the same text.
enum UTF8Rules {
    /// A multi-byte UTF-8 sequence by its lead byte (RFC 3629: no overlong forms, no surrogates,
    /// nothing above U+10FFFF): its length and the range its second byte must fall in (the later
    /// bytes are plain continuation bytes). nil for a byte no sequence starts with.
    @inline(__always)
    static func sequence(lead: UInt8) -> (length: Int, second: ClosedRange<UInt8>)? {
        switch lead {
        case 0xC2...0xDF: (2, 0x80...0xBF)
        case 0xE0: (3, 0xA0...0xBF)
        case 0xED: (3, 0x80...0x9F)
        case 0xE1...0xEF: (3, 0x80...0xBF)
        case 0xF0: (4, 0x90...0xBF)
        case 0xF4: (4, 0x80...0x8F)
        case 0xF1...0xF3: (4, 0x80...0xBF)
        default: nil
        }
    }

    /// The value of one hexadecimal digit of a `\u` escape, either case; nil for another byte.
    @inline(__always)
    static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
