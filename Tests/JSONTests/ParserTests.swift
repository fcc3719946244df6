import JSON
import Testing

/// Documents every strict parser must accept, with the value they mean (JSONTestSuite's y_ cases,
/// in our own words).
private let accepted: [(String, JSONValue)] = [
    ("null", .null),
    (" true ", .bool(true)),
    ("false", .bool(false)),
    ("0", .integer(0)),
    ("-1", .integer(-1)),
    ("[]", .array([])),
    ("{}", .object(JSONObject())),
    ("\t\r\n[ 1 , 2 ]\n", .array([.integer(1), .integer(2)])),
    ("[[[]]]", .array([.array([.array([])])])),
    (#"{"a":{"b":[null]}}"#, .object(["a": .object(["b": .array([.null])])])),
    (#""""#, .string("")),
    (#""\"\\\/\b\f\n\r\t""#, .string("\"\\/\u{8}\u{c}\n\r\t")),
    (#""\u0041\u00e9\u20AC""#, .string("Aé€")),
    (#""\ud83d\ude00""#, .string("😀")),
    (#""\u0000""#, .string("\u{0}")),
    ("\"é€😀\"", .string("é€😀")),
    ("\"\u{2028}\"", .string("\u{2028}")),
    ("1.5", .double(1.5)),
    ("-0", .double(-0.0)),
    ("-0.0", .double(-0.0)),
    ("1E2", .double(100)),
    ("1e+2", .double(100)),
    ("1e-2", .double(0.01)),
    ("0e0", .double(0)),
    (#"{"a":1,"b":2}"#, .object(["a": .integer(1), "b": .integer(2)])),
]

/// Documents every strict parser must reject (the n_ cases), with the error code we give.
private let rejected: [(String, JSONParseError.Code)] = [
    ("", .unexpectedEnd),
    ("   ", .unexpectedEnd),
    ("[", .unexpectedEnd),
    ("[1,]", .unexpectedByte),
    ("[,1]", .unexpectedByte),
    ("[1 2]", .unexpectedByte),
    (#"{"a":1,}"#, .unexpectedByte),
    (#"{"a" 1}"#, .unexpectedByte),
    ("{a:1}", .unexpectedByte),
    ("{'a':1}", .unexpectedByte),
    (#"{"a":1"#, .unexpectedEnd),
    (#"{"a":1,"a":2}"#, .duplicateKey),
    ("[1] x", .trailingGarbage),
    ("1 2", .trailingGarbage),
    ("{}}", .trailingGarbage),
    ("tru", .unexpectedByte),
    ("True", .unexpectedByte),
    ("nul", .unexpectedByte),
    ("NaN", .unexpectedByte),
    ("Infinity", .unexpectedByte),
    ("-Infinity", .unexpectedByte),
    ("01", .invalidNumber),
    ("-01", .invalidNumber),
    ("1.", .unexpectedEnd),
    ("1.e3", .unexpectedByte),
    (".5", .unexpectedByte),
    ("+1", .unexpectedByte),
    ("-", .unexpectedEnd),
    ("1e", .unexpectedEnd),
    ("1e+", .unexpectedEnd),
    ("0x10", .trailingGarbage),
    ("1e400", .numberOutOfRange),
    ("-1e400", .numberOutOfRange),
    ("\"abc", .unexpectedEnd),
    ("\"a\u{1}b\"", .controlCharacter),
    ("\"tab\there\"", .controlCharacter),
    (#""\x41""#, .invalidEscape),
    (#""\u12G4""#, .invalidEscape),
    (#""\u12""#, .invalidEscape),
    (#""\ud83d""#, .loneSurrogate),
    (#""\ud83dx""#, .loneSurrogate),
    (#""\ud83d\u0041""#, .loneSurrogate),
    (#""\ude00""#, .loneSurrogate),
    ("'single'", .unexpectedByte),
    ("[1]\u{0}", .trailingGarbage),
]

@Test(arguments: accepted.indices)
func acceptsValidDocument(_ index: Int) throws {
    let (text, expected) = accepted[index]
    let value = try JSONParser.parse(text)
    #expect(value == expected, "\(text)")
    if case .double(let expectedDouble) = expected, case .double(let double) = value {
        #expect(double.sign == expectedDouble.sign, "sign of zero in \(text)")
    }
}

@Test(arguments: rejected.indices)
func rejectsInvalidDocument(_ index: Int) {
    let (text, code) = rejected[index]
    #expect(throws: JSONParseError.self, "\(text)") { try JSONParser.parse(text) }
    do {
        _ = try JSONParser.parse(text)
    } catch {
        #expect(error.code == code, "\(text): \(error)")
    }
}

@Test func rejectsInvalidUTF8() {
    let cases: [[UInt8]] = [
        [0x22, 0xFF, 0x22],  // never valid
        [0x22, 0xC0, 0xAF, 0x22],  // overlong '/'
        [0x22, 0xE0, 0x80, 0xAF, 0x22],  // overlong
        [0x22, 0xED, 0xA0, 0x80, 0x22],  // UTF-8 encoded surrogate U+D800
        [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
        [0x22, 0xC3, 0x22],  // truncated sequence
        [0x22, 0x80, 0x22],  // lone continuation byte
        [0x22, 0x5C, 0x6E, 0xE2, 0x82, 0x22],  // truncated after an escape
    ]
    for bytes in cases {
        #expect(throws: JSONParseError.self, "\(bytes)") { try JSONParser.parse(bytes) }
        do { _ = try JSONParser.parse(bytes) } catch { #expect(error.code == .invalidUTF8, "\(bytes)") }
    }
}

@Test func errorNamesPositionAndWhatWasExpected() {
    let text = "{\n  \"a\": 1\n  \"b\": 2\n}"
    do {
        _ = try JSONParser.parse(text)
        Issue.record("accepted a missing comma")
    } catch {
        #expect(error.byteOffset == 13)
        #expect(error.line == 3)
        #expect(error.column == 3)
        #expect(error.message == "expected ',' or '}' after object member, found '\"'")
        #expect(error.description.hasSuffix("at byte 13 (line 3, column 3)"))
    }
}

@Test func duplicateKeyErrorPointsAtTheSecondKey() {
    do {
        _ = try JSONParser.parse(#"{"lat":1,"lat":2}"#)
        Issue.record("accepted a duplicate key")
    } catch {
        #expect(error.code == .duplicateKey)
        #expect(error.byteOffset == 9)
        #expect(error.message.contains("\"lat\""))
    }
}

@Test func duplicateKeysInLargeObjectsAreFound() throws {
    let members = (0..<40).map { "\"k\($0)\":\($0)" }
    let valid = try JSONParser.parse("{" + members.joined(separator: ",") + "}")
    #expect(valid["k39"] == .integer(39))
    for duplicate in ["k0", "k15", "k16", "k39"] {
        let text = "{" + members.joined(separator: ",") + ",\"\(duplicate)\":0}"
        #expect(throws: JSONParseError.self, "\(duplicate)") { try JSONParser.parse(text) }
    }
}

@Test func nestingAtTheLimitIsAcceptedAndOverItRejected() throws {
    let depthMax = JSONParser.depthMaxDefault
    let atLimit = String(repeating: "[", count: depthMax) + String(repeating: "]", count: depthMax)
    _ = try JSONParser.parse(atLimit)
    let overLimit = "[" + atLimit + "]"
    do {
        _ = try JSONParser.parse(overLimit)
        Issue.record("accepted nesting over depthMax")
    } catch {
        #expect(error.code == .depthExceeded)
        #expect(error.byteOffset == depthMax)
    }
    let objects = String(repeating: #"{"a":"#, count: 3) + "1" + String(repeating: "}", count: 3)
    #expect(throws: JSONParseError.self) { try JSONParser.parse(objects, depthMax: 2) }
    _ = try JSONParser.parse(objects, depthMax: 3)
    _ = try JSONParser.parse("1", depthMax: 0)
    #expect(throws: JSONParseError.self) { try JSONParser.parse("[]", depthMax: 0) }
}

@Test func escapedAndUnescapedStringsAgree() throws {
    let plain = try JSONParser.parse("\"a😀é\"")
    let escaped = try JSONParser.parse(#""\u0061\uD83D\uDE00\u00E9""#)
    let mixed = try JSONParser.parse(#""a😀\u00e9""#)
    #expect(plain == escaped)
    #expect(plain == mixed)
}

@Test func parsesFromARawBuffer() throws {
    let bytes = Array(#"{"x":[1,2.5,"y"]}"#.utf8)
    let value = try bytes.withUnsafeBytes { try JSONParser.parse($0) }
    #expect(value["x"]?[2] == .string("y"))
    #expect(value["x"]?[1] == .double(2.5))
    #expect(value["missing"] == nil)
    #expect(value["x"]?[3] == nil)
}
