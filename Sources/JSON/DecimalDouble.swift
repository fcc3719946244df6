/// Writes the doubles of a large answer (six per fix, 8,640 fixes in a history page) without the
/// `String` of `Double.description`, in exactly the form `description` gives them.
///
/// `description` prints the shortest decimal that reads back as the same double (of several, the
/// closest); between 1e-4 and 2^53 in plain notation with at least one fraction digit. For such a
/// value that decimal has k fraction digits for the smallest k at which the multiple of 10^-k
/// nearest to the value reads back as the value. With the value as M * 2^-s (M the 53-bit
/// significand), that is exact integer arithmetic on M * 10^k: the nearest multiple is within half
/// an ulp (2^-s-1), i.e. twice its distance, in units of 2^-s * 10^-k, is under 10^k (or equal,
/// when M is even: ties read back to the even significand). Reading back works for every k from
/// the smallest on, so k can be searched for. A whole number below 10^15 (zero included) is
/// written as its digits and `.0` before any search. Left to `description`: other values outside
/// [0.001, 10^15), other powers of two (their rounding interval is lopsided), and exact ties
/// between two multiples that both read back. At most 22 bytes: a sign, a point, 20 digits (0.00 then 17).
/// Tested against `description` on a million values.
package enum DecimalDouble {
    /// Writes `value` as `description` would and returns the byte count; nil when the value is not
    /// one this fast path handles (then nothing is written).
    package static func write(_ value: Double, into output: UnsafeMutablePointer<UInt8>) -> Int? {
        var unused = -1
        return write(value, into: output, fractionDigitsGuess: &unused)
    }

    /// `write`, trying `guess` fraction digits before the bisection (`nearbyDigits`): when the guess
    /// is right, one probe instead of the bisection's four or five. A column of a large export
    /// keeps its count from row to row (coordinates their 7 digits, accuracies none or one), so
    /// each column's last count is its next guess. On return `guess` is the count written (or as
    /// it was when nothing was written). Out of 0 ... 19, no guess is tried.
    package static func write(
        _ value: Double, into output: UnsafeMutablePointer<UInt8>, fractionDigitsGuess guess: inout Int
    ) -> Int? {
        let magnitude = value.magnitude
        guard magnitude < 1e15 else { return nil }
        // The integer part, exact below 10^15 (one instruction, where `rounded(.towardZero)` is a
        // call into libm): the whole number itself, or the digits before the point.
        let truncated = Int64(magnitude)
        let whole = UInt64(bitPattern: truncated)
        // A whole number is its digits and `.0` (zero too, and the powers of two the search below
        // leaves to `description`): accuracies, battery-like values, a still phone's speed.
        if Double(truncated) == magnitude {
            var count = 0
            if value.sign == .minus {
                output[0] = UInt8(ascii: "-")
                count = 1
            }
            count += Digits.write(whole, into: output + count)
            output[count] = UInt8(ascii: ".")
            output[count + 1] = UInt8(ascii: "0")
            guess = 0
            return count + 2
        }
        guard magnitude >= 1e-3, magnitude.significandBitPattern != 0 else { return nil }
        if let (digits, k) = nearbyDigits(magnitude, guess) {
            guess = k
            return writeDigits(digits, fractionDigits: k, whole: whole, negative: value < 0, into: output)
        }
        let significand = UInt64(magnitude.significandBitPattern) | (1 << 52)
        // The unbiased exponent from the bits (the number is normal in this range): `exponent`
        // is a call into the standard library.
        let shift = 52 - (Int(magnitude.exponentBitPattern) - 1023)  // 3 ... 62 in this range
        // The search keeps: every k below `low` does not read back; `found` holds the digits at
        // k = high + 1, the smallest k known to read back (none yet while nil).
        var low = 0
        var high = powersOfTenCount - 1
        var found: UInt64? = nil
        var tie = false
        func probe(_ k: Int) {
            switch nearestReadingBack(significand, shift: shift, fractionDigits: k) {
            case .tie: tie = true
            case .readsBack(let digits):
                found = digits
                high = k - 1
            case .doesNot:
                low = k + 1
            }
        }
        if guess >= low && guess <= high {
            probe(guess)
            if found != nil && guess - 1 >= low { probe(guess - 1) }
        }
        // Bisection for the smallest k at which the nearest multiple of 10^-k reads back. (Guessing
        // 15 significant digits first and stepping up was measured: no faster.)
        while !tie && low <= high { probe((low + high) / 2) }
        guard !tie else { return nil }
        guard let digits = found, low < powersOfTenCount else { return nil }
        guess = low
        return writeDigits(digits, fractionDigits: low, whole: whole, negative: value < 0, into: output)
    }

    /// The digits of `magnitude` (not a whole number) and its count of fraction digits k, found
    /// in floating point from `guess` (a few instructions a probe, where the exact search takes a
    /// few hundred), or nil when that cannot be sure of it; then the exact search decides. From
    /// the guess (at least 1): when it reads back, its trailing zeros dropped; otherwise up until
    /// one reads back. A column that keeps its precision costs one probe, one that changes it by a
    /// digit or two (a coordinate ending in 0, a speed of 20.4 after 8.23) one to three.
    ///
    /// Why it is exact when it answers: with k in 1 ... 15 and x = magnitude * 10^k below 2^40,
    /// the product's rounding error is under x * 2^-53 < 2^-13, so when the computed x is within
    /// 0.499 of the integer d it rounds to, the exact product is within 0.5 of d: d is the nearest
    /// multiple, as `nearestReadingBack` finds it, and not a tie. d and 10^k are exact doubles, so
    /// `d / 10^k` is the correctly rounded quotient: equal to the value exactly when d * 10^-k reads
    /// back as it. The answer is the smallest k that reads back: stepping up, the first that does;
    /// stepping down, the multiples of 10^-k that read back lie within the value's rounding
    /// interval, under an ulp wide, which is under 2^-12 * 10^-k here (x < 2^40): so at most one
    /// does, and a shorter decimal that reads back is that one with its last digit 0. Not every
    /// digit can be dropped: the value would be whole.
    @inline(__always)
    static func nearbyDigits(_ magnitude: Double, _ guess: Int) -> (UInt64, Int)? {
        var k = min(max(guess, 1), 15)
        switch floatProbe(magnitude, k) {
        case .tie: return nil
        case .readsBack(var digits):
            while k > 1 && digits % 10 == 0 {
                digits /= 10
                k -= 1
            }
            return (digits, k)
        case .doesNot:
            while k < 15 {
                k += 1
                switch floatProbe(magnitude, k) {
                case .tie: return nil
                case .doesNot: continue
                case .readsBack(let digits): return (digits, k)
                }
            }
            return nil
        }
    }

    /// Whether the multiple of 10^-k nearest to `magnitude` reads back as it, found in floating
    /// point (`nearbyDigits` says why it is exact); `.tie` stands for "not sure" here: the product
    /// is 2^40 or more, or too near a half.
    @inline(__always)
    static func floatProbe(_ magnitude: Double, _ k: Int) -> Probe {
        let scale = Double(powerOfTen(k))
        let product = magnitude * scale
        guard product < 0x1p40 else { return .tie }
        // Rounded by a conversion (one instruction) rather than `rounded()` (a call to libm's
        // `round`): a product within 2^-12 of a half is refused by the margin below anyway. Signed:
        // below 2^40, and a signed conversion each way is one instruction, an unsigned one several.
        let digits = Int64(product + 0.5)
        let nearest = Double(digits)
        guard (product - nearest).magnitude < 0.499 else { return .tie }
        return nearest / scale == magnitude ? .readsBack(UInt64(digits)) : .doesNot
    }

    /// `digits` * 10^-fractionDigits, and its sign: the integer part, a point, the fraction
    /// zero-padded to `fractionDigits` (`0` when there is none). `whole` is the value's integer
    /// part, truncated: the digits' integer part is it, or one more when the digits rounded up to
    /// the next whole (0.99999999 at 7 digits), which a multiplication tells without a division.
    /// (Writing the digits as one run and moving the fraction on for the point was measured: more
    /// instructions, no less CPU.)
    @inline(__always)
    static func writeDigits(
        _ digits: UInt64, fractionDigits: Int, whole: UInt64, negative: Bool,
        into output: UnsafeMutablePointer<UInt8>
    ) -> Int {
        var count = 0
        if negative {
            output[0] = UInt8(ascii: "-")
            count = 1
        }
        let divisor = powerOfTen(fractionDigits)
        var integer = whole
        var fraction = digits &- whole &* divisor
        if fraction >= divisor {
            integer += 1
            fraction -= divisor
        }
        count += Digits.write(integer, into: output + count)
        output[count] = UInt8(ascii: ".")
        count += 1
        if fractionDigits == 0 {
            output[count] = UInt8(ascii: "0")
            return count + 1
        }
        Digits.write(fraction, count: fractionDigits, into: output + count)
        return count + fractionDigits
    }

    enum Probe {
        case readsBack(UInt64)
        case doesNot
        case tie
    }

    /// Whether the multiple of 10^-k nearest to `significand` * 2^-shift reads back as that double.
    @inline(__always)
    static func nearestReadingBack(_ significand: UInt64, shift: Int, fractionDigits k: Int) -> Probe {
        let scale = powerOfTen(k)
        // significand * 10^k as a 128-bit product (< 2^117); shift is 3 ... 62, so the part below
        // the binary point is in the low word.
        let (high, low) = significand.multipliedFullWidth(by: scale)
        let unit: UInt64 = 1 << shift
        let below = low & (unit - 1)
        let half = unit >> 1
        if below == half {
            // Exactly half way between two multiples: both read back or neither does.
            return unit > scale || (unit == scale && significand & 1 != 0) ? .doesNot : .tie
        }
        var digits = (high << (64 - shift)) | (low >> shift)
        var distance = below
        if below > half {
            digits &+= 1  // wraps only in a probe far below the answer, never read
            distance = unit - below
        }
        let twice = distance << 1  // distance < 2^62
        if twice < scale || (twice == scale && significand & 1 == 0) { return .readsBack(digits) }
        return .doesNot
    }

    /// 10^0 ... 10^19: `powerOfTen`'s range.
    static let powersOfTenCount = 20

    /// 10^k for k in 0 ... 19, from a switch the compiler makes a table of: a `static let` array
    /// cost a `swift_once` per probe (two per double, six doubles per fix of a history page).
    @inline(__always)
    static func powerOfTen(_ k: Int) -> UInt64 {
        switch k {
        case 0: 1
        case 1: 10
        case 2: 100
        case 3: 1_000
        case 4: 10_000
        case 5: 100_000
        case 6: 1_000_000
        case 7: 10_000_000
        case 8: 100_000_000
        case 9: 1_000_000_000
        case 10: 10_000_000_000
        case 11: 100_000_000_000
        case 12: 1_000_000_000_000
        case 13: 10_000_000_000_000
        case 14: 100_000_000_000_000
        case 15: 1_000_000_000_000_000
        case 16: 10_000_000_000_000_000
        case 17: 100_000_000_000_000_000
        case 18: 1_000_000_000_000_000_000
        case 19: 10_000_000_000_000_000_000
        default: preconditionFailure("10^\(k) does not fit 64 bits")
        }
    }
}
