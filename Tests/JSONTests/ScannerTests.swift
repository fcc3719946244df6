import Testing

@testable import JSON

/// `JSONScanner.number` (with its short-decimal path) and `RFC3339.parseMicros` over a buffer must
/// give exactly what the tree parser and the array form give: the direct decoders rely on it.
@Suite struct ScannerTests {
    /// The Double the tree parser makes of `text`, or nil when it refuses it.
    func treeNumber(_ text: String) -> Double? {
        switch try? JSONParser.parse(text) {
        case .integer(let integer)?: Double(integer)
        case .double(let double)?: double
        default: nil
        }
    }

    func scannerNumber(_ text: String) -> (value: Double?, offset: Int) {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { buffer in
            var scanner = JSONScanner(buffer)
            let value = scanner.number()
            return (value, scanner.offset)
        }
    }

    func agree(_ text: String) {
        let tree = treeNumber(text)
        let (scanned, offset) = scannerNumber(text)
        if let tree {
            #expect(
                scanned?.bitPattern == tree.bitPattern, "\(text): \(String(describing: scanned)) vs \(tree)")
            // Past the number (and the whitespace the tree allows after it).
            let trailing = text.utf8.reversed().prefix { $0 == UInt8(ascii: " ") }.count
            #expect(offset == text.utf8.count - trailing, "\(text)")
        } else if let scanned {
            // A prefix was a number (the tree refuses what follows it): it must be what the tree
            // makes of that prefix.
            let prefix = String(text.utf8.prefix(offset))!
            #expect(treeNumber(prefix)?.bitPattern == scanned.bitPattern, "\(text)")
        }
    }

    @Test(arguments: [
        "0", "-0", "0.0", "-0.0", "1", "-1", "0.81", "13.3888599", "52.5170365", "-180", "359.9",
        "123456789012345", "-123456789012345", "1234567890123456", "0.123456789012345", "0.1234567890123456",
        "9007199254740993", "99999999999999999999", "1e3", "1E-2", "2.5e-320", "1e400", "01", "-", "2.",
        ".5", "+1", "1.e5", "00", "-01.5", "0.5x", "12 ", "7,", "1.7976931348623157e308", "4.9e-324",
    ])
    func numbersAgreeWithTheTree(_ text: String) {
        agree(text)
    }

    @Test func randomDecimalsAgreeWithTheTree() {
        var generator = SeededGenerator(seed: 13)
        for _ in 0..<100_000 {
            let integerDigits = Int.random(in: 0...10, using: &generator)
            let fractionDigits = Int.random(in: 0...9, using: &generator)
            var text = Bool.random(using: &generator) ? "-" : ""
            text += integerDigits == 0 ? "0" : String(Int.random(in: 1...9, using: &generator))
            for _ in 1..<max(1, integerDigits) { text += String(Int.random(in: 0...9, using: &generator)) }
            if fractionDigits > 0 {
                text += "."
                for _ in 0..<fractionDigits { text += String(Int.random(in: 0...9, using: &generator)) }
            }
            agree(text)
        }
    }

    @Test(arguments: [
        "2026-12-01T08:00:00Z", "2026-12-01T08:00:00.123Z", "2026-12-01t08:00:00+01:00",
        "2026-02-30T08:00:00Z",
        "2026-12-01T08:00:00", "", "2026-12-01T08:00:00.1234567891Z", "0000-01-01T00:00:00Z",
    ])
    func timesFromABufferAreTheArrayForm(_ text: String) {
        let bytes = Array(text.utf8)
        let fromArray = Result { () throws(RFC3339.ParseError) in try RFC3339.parseMicros(bytes) }
        let fromBuffer = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(RFC3339.ParseError) in try RFC3339.parseMicros(buffer) }
        }
        #expect(fromArray == fromBuffer, "\(text)")
    }
}
