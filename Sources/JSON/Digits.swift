/// Decimal digits into a byte buffer, for every number the JSON writer writes: integers,
/// doubles' digits (`DecimalDouble`) and times (`RFC3339.write`).
enum Digits {
    /// `value` in decimal without padding; returns the byte count (at most 20).
    @inline(__always)
    static func write(_ value: UInt64, into output: UnsafeMutablePointer<UInt8>) -> Int {
        let length = count(value)
        write(value, count: length, into: output)
        return length
    }

    /// The number of decimal digits of `value` (1 for 0).
    @inline(__always)
    static func count(_ value: UInt64) -> Int {
        // Two digits a step: half the divisions (by a constant: a multiplication) of one a step.
        var length = 1
        var probe = value
        while probe >= 100 {
            length += 2
            probe /= 100
        }
        if probe >= 10 { length += 1 }
        return length
    }

    /// `value` and its sign in decimal; returns the byte count (at most 20: Int64.min).
    @inline(__always)
    static func write(_ value: Int64, into output: UnsafeMutablePointer<UInt8>) -> Int {
        guard value < 0 else { return write(value.magnitude, into: output) }
        output[0] = UInt8(ascii: "-")
        return 1 + write(value.magnitude, into: output + 1)
    }

    /// The last `count` decimal digits of `value`, zero-padded, two at a time.
    @inline(__always)
    static func write(_ value: UInt64, count: Int, into output: UnsafeMutablePointer<UInt8>) {
        var rest = value
        var position = count
        while position >= 2 {
            position -= 2
            writePair(Int(rest % 100), into: output + position)
            rest /= 100
        }
        if position == 1 { output[0] = UInt8(ascii: "0") + UInt8(rest % 10) }
    }

    /// `value` (0-99) as two digits, from a table.
    @inline(__always)
    static func writePair(_ value: Int, into output: UnsafeMutablePointer<UInt8>) {
        let pairs: StaticString =
            "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
        output[0] = pairs.utf8Start[2 * value]
        output[1] = pairs.utf8Start[2 * value + 1]
    }
}
