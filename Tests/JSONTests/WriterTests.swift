import JSON
import Testing

private func text(_ value: JSONValue) -> String {
    String(decoding: JSONWriter.encode(value), as: UTF8.self)
}

@Test func writesCommasAndNesting() {
    var writer = JSONWriter()
    writer.beginObject()
    writer.key("a")
    writer.int64(1)
    writer.key("b")
    writer.beginArray()
    writer.bool(true)
    writer.null()
    writer.beginObject()
    writer.endObject()
    writer.beginArray()
    writer.endArray()
    writer.endArray()
    writer.key("c")
    writer.double(2.5)
    writer.endObject()
    #expect(String(decoding: writer.bytes, as: UTF8.self) == #"{"a":1,"b":[true,null,{},[]],"c":2.5}"#)
}

@Test func escapesForJSONAndHTML() {
    #expect(text(.string("a\"b\\c")) == #""a\"b\\c""#)
    #expect(text(.string("\n\r\t\u{8}\u{c}\u{0}\u{1f}")) == #""\n\r\t\u0008\u000c\u0000\u001f""#)
    #expect(text(.string("</script><!-- & -->")) == #""\u003c/script\u003e\u003c!-- \u0026 --\u003e""#)
    #expect(text(.string("a\u{2028}b\u{2029}c")) == #""a\u2028b\u2029c""#)
    #expect(text(.string("é€😀\u{7f}")) == "\"é€😀\u{7f}\"")
    #expect(text(.string("/")) == #""/""#)
}

@Test func writesNumbers() {
    #expect(text(.integer(Int64.min)) == "-9223372036854775808")
    #expect(text(.integer(Int64.max)) == "9223372036854775807")
    #expect(text(.integer(0)) == "0")
    #expect(text(.double(-0.0)) == "-0.0")
    #expect(text(.double(.leastNonzeroMagnitude)) == "5e-324")
    #expect(text(.double(1e308)) == "1e+308")
    #expect(text(.double(0.1)) == "0.1")
    #expect(text(.double(52.5200066)) == "52.5200066")
}

@Test func nonFiniteDoubleIsAProgrammerError() async {
    await #expect(processExitsWith: .failure) {
        var writer = JSONWriter()
        writer.double(.nan)
    }
}

@Test func randomValuesRoundTripThroughWriterAndParser() throws {
    var generator = SeededGenerator(seed: UInt64.random(in: 0...UInt64.max))
    print("randomValuesRoundTripThroughWriterAndParser seed: \(generator.seed)")
    for _ in 0..<500 {
        let value = randomValue(depth: 0, using: &generator)
        let bytes = JSONWriter.encode(value)
        let parsed = try JSONParser.parse(bytes)
        #expect(parsed == value, "seed \(generator.seed): \(String(decoding: bytes, as: UTF8.self))")
        #expect(JSONWriter.encode(parsed) == bytes)
    }
}

private func randomValue(depth: Int, using generator: inout SeededGenerator) -> JSONValue {
    switch Int.random(in: 0..<(depth < 4 ? 8 : 6), using: &generator) {
    case 0: return .null
    case 1: return .bool(Bool.random(using: &generator))
    case 2:
        return .integer(
            Int64.random(in: .min ... .max, using: &generator) >> Int64.random(in: 0...63, using: &generator))
    case 3:
        // Integral doubles stay doubles: the writer prints them with ".0".
        let double = Double(bitPattern: generator.next())
        return .double(double.isFinite ? double : 0.5)
    case 4, 5: return .string(randomString(using: &generator))
    case 6:
        return .array(
            (0..<Int.random(in: 0...5, using: &generator)).map { _ in
                randomValue(depth: depth + 1, using: &generator)
            })
    default:
        var members: [JSONObject.Member] = []
        for index in 0..<Int.random(in: 0...5, using: &generator) {
            let key = randomString(using: &generator) + "#\(index)"  // keys stay unique
            members.append(
                JSONObject.Member(key: key, value: randomValue(depth: depth + 1, using: &generator)))
        }
        return .object(JSONObject(members))
    }
}

private func randomString(using generator: inout SeededGenerator) -> String {
    let pool: [Unicode.Scalar] = [
        "a", "Z", "0", " ", "\"", "\\", "/", "<", ">", "&", "\n", "\u{0}", "\u{1f}",
        "\u{7f}", "é", "€", "\u{2028}", "\u{2029}", "\u{FFFF}", "😀", "\u{10FFFF}",
    ]
    var text = String.UnicodeScalarView()
    for _ in 0..<Int.random(in: 0...12, using: &generator) {
        text.append(pool.randomElement(using: &generator)!)
    }
    return String(text)
}

/// The byte-level variants write exactly what their String counterparts write.
@Test func utf8StringsAndTimestampsMatchTheStringForms() {
    for sample in ["", "plain", "<b>&amp;</b>", "quote\" back\\ tab\t", "a\u{2028}b\u{2029}", "😀 ünï"] {
        var fromString = JSONWriter()
        fromString.string(sample)
        var fromBytes = JSONWriter()
        var copy = sample
        copy.withUTF8 { fromBytes.string(utf8: $0) }
        #expect(fromBytes.bytes == fromString.bytes, "\(sample)")
    }
    for micros: Int64 in [0, 1_764_684_000_123_000, -62_135_596_800_000_000, 253_402_300_799_999_999, -1] {
        var writer = JSONWriter()
        writer.timestamp(micros: micros)
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "\"\(RFC3339.formatMicros(micros))\"")
    }
}

@Test func plainKeysWriteWhatKeysWrite() {
    var plain = JSONWriter()
    var escaped = JSONWriter()
    plain.beginObject()
    escaped.beginObject()
    plain.plainKey("accuracy_m")
    escaped.key("accuracy_m")
    plain.int64(12)
    escaped.int64(12)
    plain.plainKey("recorded_at")
    escaped.key("recorded_at")
    plain.null()
    escaped.null()
    plain.endObject()
    escaped.endObject()
    #expect(plain.bytes == escaped.bytes)
    #expect(String(decoding: plain.bytes, as: UTF8.self) == #"{"accuracy_m":12,"recorded_at":null}"#)
}

@Test func aResetWriterWritesAsANewOne() {
    var writer = JSONWriter(capacity: 8)
    writer.beginArray()
    writer.beginObject()
    writer.key("a")
    writer.int64(1)
    writer.endObject()
    writer.reset()
    writer.beginObject()
    writer.key("b")
    writer.bool(true)
    writer.endObject()
    #expect(String(decoding: writer.bytes, as: UTF8.self) == #"{"b":true}"#)
}

/// The one non-trapping conversion of a stored double (JSON/Saturating.swift).
@Test func saturatingConversionsNeverTrap() {
    #expect(Int64(saturating: 1.9) == 1 && Int64(saturating: -1.9) == -1)
    #expect(Int64(saturating: 1e308) == .max && Int64(saturating: .infinity) == .max)
    #expect(Int64(saturating: -1e308) == .min && Int64(saturating: -.infinity) == .min)
    #expect(Int64(saturating: 9_223_372_036_854_775_807.0) == .max, "2^63 rounds past max")
    #expect(Int64(saturating: -9_223_372_036_854_775_808.0) == .min)
    #expect(Int64(saturating: .nan) == nil)
    #expect(UInt8(saturating: 255.9) == 255 && UInt8(saturating: 256) == 255 && UInt8(saturating: -0.5) == 0)
    #expect(Int(saturating: 4_503_599_627_370_495.5) == 4_503_599_627_370_495)
    var writer = JSONWriter()
    writer.beginArray()
    for value in [1.5, .nan, .infinity, -.infinity, 1e308] { writer.finiteDouble(value) }
    writer.endArray()
    #expect(String(decoding: writer.bytes, as: UTF8.self) == "[1.5,null,null,null,1e+308]")
    #expect(
        RFC3339.clampedMicros(.max) == RFC3339.microsMax && RFC3339.clampedMicros(.min) == RFC3339.microsMin)
    #expect(RFC3339.clampedMicros(0) == 0)
}
