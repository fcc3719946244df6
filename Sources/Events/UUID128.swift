/// A UUID as 16 bytes, without Foundation: batch ids and device UUIDs as the log stores them.
public struct UUID128: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The 16 bytes in the order of the canonical text form.
    public var high: UInt64
    public var low: UInt64

    public static let zero = UUID128(high: 0, low: 0)

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    public init(bytes: some Collection<UInt8>) {
        precondition(bytes.count == 16, "a UUID is 16 bytes")
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, byte) in bytes.enumerated() {
            if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
        }
        self.init(high: high, low: low)
    }

    /// Parses the canonical 8-4-4-4-12 hexadecimal form, either case. Returns nil otherwise.
    public init?(_ text: some StringProtocol) {
        var nibbles: [UInt8] = []
        nibbles.reserveCapacity(32)
        var position = 0
        for byte in text.utf8 {
            defer { position += 1 }
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard byte == UInt8(ascii: "-") else { return nil }
                continue
            }
            guard let nibble = hexValue(byte) else { return nil }
            nibbles.append(nibble)
        }
        guard position == 36, nibbles.count == 32 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<16 { bytes[index] = nibbles[2 * index] << 4 | nibbles[2 * index + 1] }
        self.init(bytes: bytes)
    }

    public var bytes: [UInt8] {
        (0..<16).map { index in
            index < 8
                ? UInt8(truncatingIfNeeded: high >> (56 - 8 * index))
                : UInt8(truncatingIfNeeded: low >> (56 - 8 * (index - 8)))
        }
    }

    public var description: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    public static func < (lhs: UUID128, rhs: UUID128) -> Bool {
        (lhs.high, lhs.low) < (rhs.high, rhs.low)
    }

    /// A random version-4 UUID.
    public static func random<G: RandomNumberGenerator>(using generator: inout G) -> UUID128 {
        let high = (generator.next() & ~0xF000) | 0x4000
        let low = (generator.next() & ~(UInt64(0xC) << 60)) | (UInt64(0x8) << 60)
        return UUID128(high: high, low: low)
    }

    public static func random() -> UUID128 {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}
