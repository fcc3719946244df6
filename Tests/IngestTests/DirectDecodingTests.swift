import Events
import Identity
import Ingest
import JSON
import Testing

/// `ReportDecoder.decode` reads plain reports straight from the bytes (`decodeDirect`) and hands
/// everything else to the tree (`decodeTree`). The tree's answers are the contract: for every body
/// here the two must agree exactly, report for report and error message for error message.
@Suite struct DirectDecodingTests {
    static let now: Int64 = 1_796_220_000_000_000  // 2026-12-02T14:00:00Z
    static let batchID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    let limits = IngestLimits()

    static let fullFix =
        "{\"latitude\": 52.52, \"longitude\": 13.405, \"accuracy_m\": 12, \"altitude_m\": 34, \"speed_mps\": 1.2, \"heading_deg\": 90, \"battery_pct\": 81, \"is_charging\": false, \"source\": \"significant\", \"recorded_at\": \"2026-12-02T13:59:00.123Z\"}"
    static let minimalFix =
        "{\"recorded_at\":\"2026-12-02T13:59:00Z\",\"source\":\"visit\",\"accuracy_m\":3.5e1,\"longitude\":-0.0,\"latitude\":-90}"

    static func body(_ fixes: [String], batchID: String = "\"\(batchID)\"") -> String {
        "{\"batch_id\": \(batchID), \"fixes\": [\(fixes.joined(separator: ", "))]}"
    }

    /// Plain bodies the direct path must take itself (so that it is really exercised).
    static let plain: [String] = [
        body([fullFix]),
        body([minimalFix, fullFix, minimalFix]),
        " \n{\"fixes\":[\(fullFix)],\"batch_id\":\"\(batchID)\"}\t\r\n",
        body([fullFix.replacingOccurrences("\"altitude_m\": 34", "\"altitude_m\": null")]),
        body([fullFix.replacingOccurrences("81", "80.5")]),
        body([fullFix.replacingOccurrences("significant", "sign\\u0069ficant")]),
        // Per-fix rejections are decided by the same rules, so the direct path keeps them too.
        body([fullFix.replacingOccurrences("52.52", "91.5"), fullFix]),
        body([fullFix.replacingOccurrences("\"accuracy_m\": 12", "\"accuracy_m\": \"12\"")]),
        body([fullFix.replacingOccurrences("\"accuracy_m\": 12, ", "")]),
        body([fullFix.replacingOccurrences("2026-12-02T13:59:00.123Z", "yesterday")]),
        body([fullFix.replacingOccurrences("2026-12-02T13:59:00.123Z", "2020-01-01T00:00:00Z")]),
        body([fullFix.replacingOccurrences("2026-12-02T13:59:00.123Z", "2027-01-01T00:00:00Z")]),
        body([fullFix.replacingOccurrences("\"source\": \"significant\"", "\"source\": \"Bad Source\"")]),
        body([fullFix.replacingOccurrences("\"heading_deg\": 90", "\"heading_deg\": 360")]),
        body([fullFix.replacingOccurrences("false", "0")]),
        body(["{}"]),
        body([fullFix.replacingOccurrences("12", "123456789012345678901234567890")]),
        // Every field's limits, and the values just beyond them.
        body([
            fullFix.replacingOccurrences("\"accuracy_m\": 12", "\"accuracy_m\": 1000000"),
            fullFix.replacingOccurrences("\"accuracy_m\": 12", "\"accuracy_m\": 1000000.0000000001"),
            fullFix.replacingOccurrences("\"accuracy_m\": 12", "\"accuracy_m\": 5e-324"),
            fullFix.replacingOccurrences("\"accuracy_m\": 12", "\"accuracy_m\": 1e308"),
            fullFix.replacingOccurrences("\"altitude_m\": 34", "\"altitude_m\": -12000"),
            fullFix.replacingOccurrences("\"altitude_m\": 34", "\"altitude_m\": 100000.001"),
            fullFix.replacingOccurrences("\"speed_mps\": 1.2", "\"speed_mps\": 2000"),
            fullFix.replacingOccurrences("\"speed_mps\": 1.2", "\"speed_mps\": -1e-300"),
            fullFix.replacingOccurrences("\"heading_deg\": 90", "\"heading_deg\": 359.99999999999994"),
            fullFix.replacingOccurrences("\"heading_deg\": 90", "\"heading_deg\": 1e308"),
            fullFix.replacingOccurrences("\"battery_pct\": 81", "\"battery_pct\": 100"),
            fullFix.replacingOccurrences("\"battery_pct\": 81", "\"battery_pct\": 100.4"),
        ]),
    ]

    /// Bodies that are malformed, or well-formed outside the plain shape.
    static let other: [String] = [
        "", " ", "{", "}", "[]", "null", "42", "\"text\"", "{}",
        "{\"batch_id\": \"\(batchID)\"}",
        "{\"fixes\": [\(fullFix)]}",
        body([]),
        body([fullFix], batchID: "42"),
        body([fullFix], batchID: "\"not-a-uuid\""),
        body([fullFix], batchID: "null"),
        "{\"batch_id\": \"\(batchID)\", \"fixes\": {}}",
        "{\"batch_id\": \"\(batchID)\", \"fixes\": \"many\"}",
        "{\"batch_id\": \"\(batchID)\", \"batch_id\": \"\(batchID)\", \"fixes\": [\(fullFix)]}",
        "{\"batch_id\": \"\(batchID)\", \"fixes\": [\(fullFix)], \"fixes\": [\(fullFix)]}",
        "{\"batch_id\": \"\(batchID)\", \"fixes\": [\(fullFix)], \"extra\": 1}",
        "{\"batch_id\": \"\(batchID)\", \"fixes\": [\(fullFix)],}",
        "{\"batch_id\": \"\(batchID)\", \"fixes\": [\(fullFix),]}",
        body([fullFix]) + " x",
        body([fullFix]) + "{}",
        body(["42", fullFix]),
        body(["[]", "null", fullFix]),
        body([fullFix.replacingOccurrences("\"source\"", "\"colour\": \"red\", \"source\"")]),
        body([fullFix.replacingOccurrences("\"is_charging\": false", "\"is_charging\": {\"a\": 1}")]),
        body([fullFix.replacingOccurrences("\"is_charging\": false", "\"is_charging\": [true]")]),
        body([
            fullFix.replacingOccurrences(
                "\"source\": \"significant\"", "\"source\": \"a\", \"source\": \"b\"")
        ]),
        body([fullFix.replacingOccurrences("52.52", "NaN")]),
        body([fullFix.replacingOccurrences("52.52", "052.52")]),
        body([fullFix.replacingOccurrences("52.52", "52.")]),
        body([fullFix.replacingOccurrences("false", "fals")]),
        body([fullFix.replacingOccurrences("significant", "sig\u{01}nificant")]),
        body([fullFix.replacingOccurrences("significant", "sig\\qnificant")]),
        body([fullFix.replacingOccurrences("significant", "\\ud800")]),
        body([fullFix.replacingOccurrences("{\"latitude\"", "{\"latitude\":1, \"latitude\"")]),
        body([fullFix], batchID: "\"1b4e28ba-2fa1-11d2-883f-0016d3cca42\\u0037\""),
        String(repeating: "[", count: 100),
        body([fullFix.replacingOccurrences("1.2", "1e400")]),
        body([fullFix.replacingOccurrences("\"latitude\"", "\"lat\\u0069tude\"")]),
        body([fullFix.replacingOccurrences("\"latitude\"", "\"latitude\u{7F}\"")]),
        body([fullFix.replacingOccurrences("\"latitude\"", "\"lätitude\"")]),
    ]

    func outcome(_ result: () throws(APIError) -> DecodedReport) -> Result<DecodedReport, APIError> {
        do { return .success(try result()) } catch { return .failure(error) }
    }

    /// decode and decodeDirect agree with decodeTree on `bytes`; returns whether decodeDirect answered.
    @discardableResult
    func expectAgreement(_ bytes: [UInt8], limits: IngestLimits? = nil, _ comment: Comment) -> Bool {
        let limits = limits ?? self.limits
        let tree = outcome { () throws(APIError) in
            try ReportDecoder.decodeTree(bytes, receivedAtMicros: Self.now, limits: limits)
        }
        let combined = outcome { () throws(APIError) in
            try ReportDecoder.decode(bytes, receivedAtMicros: Self.now, limits: limits)
        }
        #expect(combined == tree, comment)
        guard let direct = ReportDecoder.decodeDirect(bytes, receivedAtMicros: Self.now, limits: limits)
        else {
            return false
        }
        #expect(Result.success(direct) == tree, comment)
        return true
    }

    @Test(arguments: plain)
    func plainBodiesAreDecodedDirectlyAsTheTreeDecodesThem(body: String) {
        #expect(expectAgreement(Array(body.utf8), "\(body)"), "the direct path gave up on \(body)")
    }

    @Test(arguments: other)
    func everythingElseGetsTheTreesAnswer(body: String) {
        expectAgreement(Array(body.utf8), "\(body)")
    }

    @Test func everyTruncationGetsTheTreesAnswer() {
        for text in [Self.body([Self.fullFix, Self.minimalFix]), Self.plain[2]] {
            let bytes = Array(text.utf8)
            // Cutting only trailing whitespace leaves a complete document.
            let complete = bytes.lastIndex(of: UInt8(ascii: "}"))! + 1
            for length in 0..<bytes.count {
                let accepted = expectAgreement(
                    Array(bytes.prefix(length)), "first \(length) bytes of \(text)")
                #expect(accepted == (length >= complete), "a truncation to \(length) bytes")
            }
        }
    }

    @Test func everyByteReplacedGetsTheTreesAnswer() {
        let bytes = Array(Self.body([Self.fullFix]).utf8)
        for position in bytes.indices {
            for replacement in [
                UInt8(ascii: " "), UInt8(ascii: "\""), UInt8(ascii: "}"), UInt8(ascii: "1"), 0xC3,
            ] {
                var corrupted = bytes
                corrupted[position] = replacement
                expectAgreement(corrupted, "byte \(position) replaced by \(replacement)")
            }
        }
    }

    @Test func batchFixesMaxGetsTheTreesAnswer() {
        var limits = IngestLimits()
        limits.batchFixesMax = 3
        for count in 1...5 {
            let body = Array(Self.body(Array(repeating: Self.fullFix, count: count)).utf8)
            let direct = expectAgreement(body, limits: limits, "\(count) fixes, batchFixesMax 3")
            #expect(direct == (count <= 3))
        }
    }
}

extension String {
    fileprivate func replacingOccurrences(_ target: String, _ replacement: String) -> String {
        var result = ""
        var rest = Substring(self)
        while let range = rest.firstRange(of: target) {
            result += rest[..<range.lowerBound] + replacement
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}
