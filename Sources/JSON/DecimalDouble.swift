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
/// the smallest on, so k can be searched for. Left to `description`: values outside
/// [0.001, 10^15), powers of two (their rounding interval is lopsided), and exact ties between two
/// multiples that both read back. At most 22 bytes: a sign, a point, 20 digits (0.00 then 17).
/// Tested against `description` on a million values.
package enum DecimalDouble {
    /// Writes `value` as `description` would and returns the byte count; nil when the value is not
    /// one this fast path handles (then nothing is written).
    package static func write(_ value: Double, into output: UnsafeMutablePointer<UInt8>) -> Int? {
        var unused = -1
        return write(value, into: output, fractionDigitsGuess: &unused)
    }

    /// `write`, trying `guess` fraction digits (and one fewer) before the bisection: when the guess
    /// is right, two probes instead of the bisection's four or five. A column of a large export
    /// keeps its count from row to row (coordinates their 7 digits, accuracies none or one), so
    /// each column's last count is its next guess. On return `guess` is the count written (or as
    /// it was when nothing was written). Out of 0 ... 19, no guess is tried.
    package static func write(
        _ value: Double, into output: UnsafeMutablePointer<UInt8>, fractionDigitsGuess guess: inout Int
    ) -> Int? {
        let magnitude = value.magnitude
        guard magnitude >= 1e-3, magnitude < 1e15, magnitude.significandBitPattern != 0 else { return nil }
        let significand = UInt64(magnitude.significandBitPattern) | (1 << 52)
        let shift = 52 - Int(magnitude.exponent)  // 3 ... 62 in this range
        // The search keeps: every k below `low` does not read back; `found` holds the digits at
        // k = high + 1, the smallest k known to read back (none yet while nil).
        var low = 0
        var high = powersOfTen.count - 1
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
        guard let digits = found, low < powersOfTen.count else { return nil }
        let fractionDigits = low
        guess = fractionDigits
        var count = 0
        if value < 0 {
            output[0] = UInt8(ascii: "-")
            count = 1
        }
        let divisor = powersOfTen[fractionDigits]
        count += Digits.write(digits / divisor, into: output + count)
        output[count] = UInt8(ascii: ".")
        count += 1
        if fractionDigits == 0 {
            output[count] = UInt8(ascii: "0")
            return count + 1
        }
        Digits.write(digits % divisor, count: fractionDigits, into: output + count)
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
        let scale = powersOfTen[k]
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

    /// 10^0 ... 10^19.
    static let powersOfTen: [UInt64] = (0...19).map { exponent in
        var power: UInt64 = 1
        for _ in 0..<exponent { power *= 10 }
        return power
    }
}
