import QRCode
import Testing

/// The matrix libqrencode gives back, checked against what ISO/IEC 18004 fixes for every symbol:
/// the size of the version that must hold the text, the three finder patterns with their light
/// separators, the timing patterns and the dark module. A matrix read in the wrong order, cut
/// short, or with the colour bit mistaken fails these.
@Suite struct QRCodeTests {
    /// The 7 x 7 finder pattern whose top left module is (x, y): a dark ring, a light ring, a dark
    /// 3 x 3 centre; and the light separator around it, inside the symbol.
    func expectFinder(_ code: QRCode, x: Int, y: Int, _ comment: Comment) {
        for row in -1...7 {
            for column in -1...7 {
                let (cx, cy) = (x + column, y + row)
                guard cx >= 0, cx < code.size, cy >= 0, cy < code.size else { continue }
                let ring = max(abs(column - 3), abs(row - 3))
                let dark = ring == 3 || ring <= 1
                #expect(code[cx, cy] == (ring <= 3 && dark), "\(comment) at (\(cx), \(cy))")
            }
        }
    }

    func expectFixedPatterns(_ code: QRCode) {
        #expect(code.size == 17 + 4 * code.version)
        #expect(code.modules.count == code.size * code.size)
        expectFinder(code, x: 0, y: 0, "top left finder")
        expectFinder(code, x: code.size - 7, y: 0, "top right finder")
        expectFinder(code, x: 0, y: code.size - 7, "bottom left finder")
        for i in 8..<(code.size - 8) {
            #expect(code[i, 6] == (i % 2 == 0), "horizontal timing at \(i)")
            #expect(code[6, i] == (i % 2 == 0), "vertical timing at \(i)")
        }
        #expect(code[8, 4 * code.version + 9], "the dark module")
    }

    /// 10 bytes fit version 1 (21 x 21) at level M; 100 lowercase letters (byte mode) need version 6
    /// (41 x 41, 106 bytes at M; version 5 holds 84).
    @Test func theSmallestVersionThatHoldsTheTextAtLevelM() throws {
        let short = try QRCode(encoding: "findmy1234")
        #expect(short.version == 1 && short.size == 21)
        expectFixedPatterns(short)
        let long = try QRCode(encoding: String(repeating: "abcdefghij", count: 10))
        #expect(long.version == 6 && long.size == 41)
        expectFixedPatterns(long)
    }

    @Test func aSetupLinkOfSeveralHundredBytesIsOneSymbol() throws {
        let link =
            "owntracks:///config?inline=" + String(repeating: "eyJfdHlwZSI6ImNvbmZpZ3VyYXRpb24ifQ", count: 9)
        let code = try QRCode(encoding: link)
        #expect(code.version >= 7 && code.version <= 40)
        expectFixedPatterns(code)
        // Different texts give different symbols: the data is really in the matrix.
        #expect(try QRCode(encoding: link + "x").modules != code.modules)
    }

    @Test func aTextTooLongForAnySymbolIsAnError() {
        #expect(throws: QRCodeError.tooLong(bytes: 3000)) {
            try QRCode(encoding: String(repeating: "a", count: 3000))
        }
    }
}
