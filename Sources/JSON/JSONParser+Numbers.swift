/// 10^0 ... 10^22: every one is exact in a Double, which is what the Clinger fast path needs.
@usableFromInline
let exactPowersOfTen: [Double] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
]

extension JSONParser {
    /// Parses `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` starting at `index`.
    ///
    /// Integer literals that fit Int64 become `.integer`. Other numbers are correctly rounded:
    /// when the decimal mantissa is below 2^53 and the power of ten is within 10^±22, both are exact
    /// Doubles and one IEEE multiply or divide rounds correctly (Clinger's fast path); anything
    /// else goes to the C library's correctly rounded conversion.
    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        let negative = base[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        var mantissa: UInt64 = 0
        var mantissaOverflowed = false
        var exponent10 = 0
        var isInteger = true

        guard index < count, isDigit(base[index]) else { throw failExpecting("a digit after '-' in number") }
        if base[index] == UInt8(ascii: "0") {
            index += 1
            if index < count, isDigit(base[index]) {
                throw fail(.invalidNumber, "leading zeros are not allowed in numbers", at: start)
            }
        } else {
            while index < count, isDigit(base[index]) {
                accumulate(base[index], into: &mantissa, overflowed: &mantissaOverflowed)
                index += 1
            }
        }
        if index < count, base[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < count, isDigit(base[index]) else {
                throw failExpecting("a digit after '.' in number")
            }
            while index < count, isDigit(base[index]) {
                accumulate(base[index], into: &mantissa, overflowed: &mantissaOverflowed)
                exponent10 -= 1
                index += 1
            }
        }
        if index < count, base[index] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            index += 1
            var exponentNegative = false
            if index < count, base[index] == UInt8(ascii: "+") || base[index] == UInt8(ascii: "-") {
                exponentNegative = base[index] == UInt8(ascii: "-")
                index += 1
            }
            guard index < count, isDigit(base[index]) else {
                throw failExpecting("a digit in the exponent of a number")
            }
            var exponent = 0
            while index < count, isDigit(base[index]) {
                // Saturate: past 10^±100000 every Double is zero or out of range anyway.
                exponent = min(exponent * 10 + Int(base[index] &- UInt8(ascii: "0")), 100_000)
                index += 1
            }
            exponent10 += exponentNegative ? -exponent : exponent
        }

        if isInteger && !mantissaOverflowed {
            if !negative && mantissa <= UInt64(Int64.max) { return .integer(Int64(mantissa)) }
            if negative && mantissa != 0 && mantissa <= UInt64(Int64.max) + 1 {
                return .integer(Int64(truncatingIfNeeded: 0 &- mantissa))
            }
        }
        if !mantissaOverflowed && mantissa <= 1 << 53 && exponent10 >= -22 && exponent10 <= 22 {
            var magnitude = Double(mantissa)
            if exponent10 < 0 {
                magnitude /= exactPowersOfTen[-exponent10]
            } else {
                magnitude *= exactPowersOfTen[exponent10]
            }
            return .double(negative ? -magnitude : magnitude)
        }
        return .double(try slowDouble(from: start))
    }

    /// `JSONNumber.shortDecimal` at `index`.
    @inline(__always)
    mutating func shortDecimal() -> Double? {
        JSONNumber.shortDecimal(base, count: count, at: &index)
    }

    @inline(__always)
    private func isDigit(_ byte: UInt8) -> Bool {
        byte &- UInt8(ascii: "0") < 10
    }

    @inline(__always)
    private func accumulate(_ digit: UInt8, into mantissa: inout UInt64, overflowed: inout Bool) {
        if mantissa <= (UInt64.max - 9) / 10 {
            mantissa = mantissa * 10 + UInt64(digit &- UInt8(ascii: "0"))
        } else {
            overflowed = true
        }
    }

    /// Converts the already validated literal `start..<index`. Swift's `Double(_:)` calls the C
    /// library's strtod on a NUL-terminated copy, in the C locale: plain `strtod` follows
    /// LC_NUMERIC and would stop at the '.' under a locale whose decimal point is ','.
    private func slowDouble(from start: Int) throws(JSONParseError) -> Double {
        let literal = String(
            decoding: UnsafeBufferPointer(start: base + start, count: index - start), as: UTF8.self)
        guard let value = Double(literal) else {
            preconditionFailure("a literal the JSON grammar accepted was refused by strtod: \(literal)")
        }
        guard value.isFinite else {
            throw fail(.numberOutOfRange, "number \(literal) is outside the range of a double", at: start)
        }
        return value
    }

}

/// Number literals read without a `JSONParser`, by exactly its rules.
public enum JSONNumber {
    /// The number at `index` (below `count`) in the bytes at `base` when it is a short plain
    /// decimal, `-?(0|[1-9][0-9]*)(.[0-9]+)?` with at most 15 digits and no exponent, as the
    /// `Double` `JSONParser.parseNumber` makes of it (then `index` is past it); nil, `index`
    /// unchanged, for anything else. Such a mantissa is below 2^53 and its power of ten at most
    /// 10^15, both exact: one division (or none) rounds correctly, which is the Clinger path
    /// `parseNumber` takes (an integer literal becomes `.integer`, whose Double is the same exact
    /// value). Coordinates, accuracies and speeds are such numbers. Public for a decoder that reads
    /// a body's bytes itself (Overland's `LocationReader`), and inlined there.
    @inlinable @inline(__always)
    public static func shortDecimal(_ base: UnsafePointer<UInt8>, count: Int, at index: inout Int) -> Double?
    {
        @inline(__always) func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }
        var at = index
        let negative = base[at] == UInt8(ascii: "-")
        if negative { at += 1 }
        let start = at
        var mantissa: UInt64 = 0
        guard at < count, isDigit(base[at]) else { return nil }
        if base[at] == UInt8(ascii: "0") {
            at += 1
        } else {
            while at < count, isDigit(base[at]) {
                mantissa = mantissa &* 10 &+ UInt64(base[at] &- UInt8(ascii: "0"))
                at += 1
            }
        }
        var digits = at - start
        var fractionDigits = 0
        if at < count, base[at] == UInt8(ascii: ".") {
            at += 1
            let fractionStart = at
            while at < count, isDigit(base[at]) {
                mantissa = mantissa &* 10 &+ UInt64(base[at] &- UInt8(ascii: "0"))
                at += 1
            }
            fractionDigits = at - fractionStart
            guard fractionDigits > 0 else { return nil }
            digits += fractionDigits
        }
        // More digits (a leading zero's), an exponent, or a long mantissa: parseNumber decides.
        guard digits <= 15, at == count || (!isDigit(base[at]) && base[at] | 0x20 != UInt8(ascii: "e")) else {
            return nil
        }
        var magnitude = Double(mantissa)
        if fractionDigits > 0 { magnitude /= exactPowersOfTen[fractionDigits] }
        index = at
        return negative ? -magnitude : magnitude
    }
}
