import JSON
import Testing

/// The streaming tokenizer against the tree parser: the same documents accepted, the same values,
/// the same refusals, whether the input arrives a byte at a time, in odd pieces or all at once.
@Suite struct StreamReaderTests {
    /// A reader over `bytes` handed out `piece` bytes a refill, with the smallest buffer.
    static func reader(_ bytes: [UInt8], piece: Int, bufferBytes: Int = 16, tokenBytesMax: Int = 1 << 20)
        -> JSONStreamReader
    {
        var position = 0
        return JSONStreamReader(bufferBytes: bufferBytes, tokenBytesMax: tokenBytesMax) {
            (buffer) throws(JSONStreamError) -> Int in
            let count = min(piece, buffer.count, bytes.count - position)
            if count > 0 {
                buffer.copyMemory(
                    from: UnsafeRawBufferPointer(
                        rebasing: bytes.withUnsafeBytes { $0 }[position..<position + count]))
            }
            position += count
            return count
        }
    }

    /// The whole document as a tree through the tokenizer.
    static func streamed(_ text: String, piece: Int) throws(JSONStreamError) -> JSONValue {
        let reader = reader(Array(text.utf8), piece: piece)
        let value = try reader.readValue(bytesMax: 1 << 20)
        guard try reader.next() == .end else { preconditionFailure("readValue left tokens before end") }
        return value
    }

    /// Numbers compared as the doubles they are (the tree keeps integers above 2^53 as Int64).
    static func normalized(_ value: JSONValue) -> JSONValue {
        switch value {
        case .integer(let integer): return .double(Double(integer))
        case .array(let elements): return .array(elements.map(normalized))
        case .object(let object):
            return .object(JSONObject(object.members.map { .init(key: $0.key, value: normalized($0.value)) }))
        default: return value
        }
    }

    static let valid = [
        "{}", "[]", " [ 1 , 2 ] ", "-0", "0", "1.5e3", "-12.25E-2", "123456789012345678901234567890", "\"\"",
        "\"é😀\"", "\"a\\n\\t\\\"\\\\\\/\\u00e9\\ud83d\\ude00b\"", "true", "false", "null",
        "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"},\"\":0}",
        "{\"a\":{\"b\":1},\"b\":{\"a\":2}}", "[[[[[]]]],{\"x\":[{}]}]",
        "{\"latitudeE7\":525163170,\"longitudeE7\":133777000,\"timestamp\":\"2019-05-01T10:00:00.123Z\"}",
    ]

    static let invalid = [
        "", "   ", "{", "[", "{\"a\":1,}", "[1,]", "{\"a\" 1}", "{\"a\":1,\"a\":2}",
        "{\"x\":{\"b\":1,\"b\":2}}", "01",
        "1.", "-", "1e", "1e+", "NaN", "Infinity", "\"\u{01}\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\x\"",
        "\"\\u12g4\"", "[1] x", "\"abc", "tru", "nul", "1e400", "[1 2]", "{1:2}", "[1}", "{\"a\":1]", "\"\\",
        "-01", "+1", ".5", "[,1]", "{,}",
    ]

    @Test(arguments: valid) func aValidDocumentReadsAsTheParserReadsIt(text: String) throws {
        let expected = Self.normalized(try JSONParser.parse(text))
        for piece in [1, 2, 3, 7, 4096] {
            #expect(Self.normalized(try Self.streamed(text, piece: piece)) == expected, "piece \(piece)")
        }
    }

    @Test(arguments: invalid) func anInvalidDocumentIsRefusedAsTheParserRefusesIt(text: String) {
        #expect(throws: JSONParseError.self) { try JSONParser.parse(text) }
        for piece in [1, 3, 4096] {
            #expect(throws: JSONStreamError.self, "piece \(piece)") { try Self.streamed(text, piece: piece) }
        }
    }

    @Test func invalidUTF8IsRefused() {
        for bytes: [UInt8] in [
            [0x22, 0xFF, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xE2, 0x82],
        ] {
            let reader = Self.reader(bytes, piece: 1)
            #expect(throws: JSONStreamError.self) { _ = try reader.readValue(bytesMax: 100) }
        }
    }

    @Test func anErrorNamesItsByteInTheWholeInputAsTheParserDoes() throws {
        // Past several refills of the 16-byte buffer.
        let cases = [
            "{\"locations\": [{\"a\": 1}, {\"a\": 2}, {\"a\": 3,}]}",
            "[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"bbbbbbbbbbbb\u{01}\"]",
            "{\"aaaaaaaaaaaaaaaa\": 1, \"bbbbbbbbbbbbbbbbbbbbbb\": 2, \"aaaaaaaaaaaaaaaa\": 3}",
            "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 013]",
            "[true, false, null, true, false, nul]",
        ]
        for text in cases {
            var parserOffset = -1
            do { _ = try JSONParser.parse(text) } catch { parserOffset = error.byteOffset }
            for piece in [1, 5, 4096] {
                do {
                    _ = try Self.streamed(text, piece: piece)
                    Issue.record("accepted \(text)")
                } catch {
                    #expect(error.byteOffset == Int64(parserOffset), "\(text) piece \(piece): \(error)")
                }
            }
        }
    }

    @Test func tokensComeInDocumentOrderWithTheirValues() throws {
        let reader = Self.reader(Array("{\"a\": [1.5, \"x\", true], \"b\": null}".utf8), piece: 2)
        #expect(try reader.next() == .objectStart)
        #expect(try reader.next() == .key)
        #expect(reader.stringEquals("a") && !reader.stringEquals("ab"))
        #expect(try reader.next() == .arrayStart)
        #expect(reader.depth == 2)
        #expect(try reader.next() == .number)
        #expect(reader.number == 1.5 && !reader.numberIsInteger)
        #expect(try reader.next() == .string)
        #expect(reader.string == "x")
        #expect(try reader.next() == .bool)
        #expect(reader.bool)
        #expect(try reader.next() == .arrayEnd)
        #expect(try reader.next() == .key)
        #expect(reader.tokenOffset == 24)
        #expect(try reader.next() == .null)
        #expect(try reader.next() == .objectEnd)
        #expect(try reader.next() == .end)
        #expect(reader.bytesRead == 34)
    }

    @Test func skipValuePassesOverAWholeSubtreeAndStillValidatesIt() throws {
        let text = "{\"skip\": {\"x\": [1, {\"y\": \"\\u00e9\"}], \"z\": []}, \"keep\": 7}"
        let reader = Self.reader(Array(text.utf8), piece: 3)
        #expect(try reader.next() == .objectStart)
        #expect(try reader.next() == .key)
        try reader.skipValue()
        #expect(try reader.next() == .key)
        #expect(reader.string == "keep")
        #expect(try reader.next() == .number)
        #expect(reader.number == 7 && reader.numberIsInteger)

        let broken = Self.reader(Array("{\"skip\": {\"x\": [1,, 2]}}".utf8), piece: 3)
        #expect(try broken.next() == .objectStart)
        #expect(try broken.next() == .key)
        #expect(throws: JSONStreamError.self) { try broken.skipValue() }
    }

    @Test func aStringLongerThanTheBufferGrowsItUpToTheLimitAndNoFurther() throws {
        let long = String(repeating: "a", count: 1000)
        #expect(try Self.streamed("[\"\(long)\"]", piece: 7) == .array([.string(long)]))
        let reader = Self.reader(Array("[\"\(long)\"]".utf8), piece: 7, bufferBytes: 16, tokenBytesMax: 512)
        #expect(try reader.next() == .arrayStart)
        #expect(
            throws: JSONStreamError(
                code: .tokenTooLong, byteOffset: 1, message: "a string or number longer than 512 bytes")
        ) {
            _ = try reader.next()
        }
    }

    @Test func nestingDeeperThanTheLimitIsRefused() {
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(throws: JSONParseError.self) { try JSONParser.parse(deep) }
        #expect(throws: JSONStreamError.self) { try Self.streamed(deep, piece: 4096) }
        let limit = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect((try? Self.streamed(limit, piece: 4096)) != nil)
    }

    @Test func aFailingInputIsReportedAsItsOwnError() {
        let reader = JSONStreamReader { (_) throws(JSONStreamError) -> Int in
            throw JSONStreamError(code: .inputFailed, byteOffset: 0, message: "disk on fire")
        }
        #expect(throws: JSONStreamError(code: .inputFailed, byteOffset: 0, message: "disk on fire")) {
            _ = try reader.next()
        }
    }
}
