import JSON
import Testing

private struct Fix: Equatable {
    var latitude: Double
    var longitude: Double
    var accuracyMeters: Double
    var batteryPct: Int64?
    var isCharging: Bool?
    var source: String

    static let keys: Set<String> = [
        "latitude", "longitude", "accuracy_m", "battery_pct", "is_charging", "source",
    ]

    init(_ value: JSONValue) throws(JSONAccessError) {
        let object = try value.objectValue
        try object.checkKeys(allowed: Fix.keys)
        latitude = try object.double("latitude")
        longitude = try object.double("longitude")
        accuracyMeters = try object.double("accuracy_m")
        batteryPct = try object.int64IfPresent("battery_pct")
        isCharging = try object.boolIfPresent("is_charging")
        source = try object.string("source")
    }
}

private func decodeFixes(_ text: String) throws -> [Fix] {
    let document = try JSONParser.parse(text)
    return try document.objectValue.decode("fixes") { fixes throws(JSONAccessError) in
        try fixes.mapArray { fix throws(JSONAccessError) in try Fix(fix) }
    }
}

@Test func decodesARequestShortly() throws {
    let fixes = try decodeFixes(
        #"{"fixes":[{"latitude":52,"longitude":13.4,"accuracy_m":5.5,"source":"manual","battery_pct":null}]}"#
    )
    let expected = try Fix(
        JSONParser.parse(
            #"{"latitude":52.0,"longitude":13.4,"accuracy_m":5.5,"source":"manual"}"#))
    #expect(fixes == [expected])
    #expect(fixes[0].batteryPct == nil)
}

@Test func errorsNameTheFixIndexAndField() {
    let cases: [(String, JSONAccessError.Code, String, String)] = [
        (
            #"{"fixes":[{"latitude":1,"longitude":2,"accuracy_m":3,"source":"x"},{"latitude":"1"}]}"#,
            .wrongType, "fixes[1].latitude", "expected a number, found a string"
        ),
        (
            #"{"fixes":[{"latitude":1,"longitude":2,"source":"x"}]}"#,
            .missingKey, "fixes[0].accuracy_m", "required member is missing"
        ),
        (
            #"{"fixes":[{"latitude":1,"longitude":2,"accuracy_m":3,"source":"x","speed":4}]}"#,
            .unknownKey, "fixes[0].speed",
            "unknown member; allowed: accuracy_m, battery_pct, is_charging, latitude, longitude, source"
        ),
        (
            #"{"fixes":[{"latitude":1,"longitude":2,"accuracy_m":3,"source":"x","battery_pct":4.5}]}"#,
            .wrongType, "fixes[0].battery_pct",
            "expected an integer, found a number with a fraction or exponent"
        ),
        (#"{"fixes":{}}"#, .wrongType, "fixes", "expected an array, found an object"),
        (#"{"fixes":[null]}"#, .wrongType, "fixes[0]", "expected an object, found null"),
    ]
    for (text, code, path, message) in cases {
        do {
            _ = try decodeFixes(text)
            Issue.record("accepted \(text)")
        } catch let error as JSONAccessError {
            #expect(error.code == code, "\(text)")
            #expect(error.pathDescription == path, "\(text)")
            #expect(error.message == message, "\(text)")
        } catch {
            Issue.record("\(error)")
        }
    }
}

@Test func accessorsOnValues() throws {
    #expect(try JSONValue.integer(3).doubleValue == 3)
    #expect(try JSONValue.string("x").stringValue == "x")
    #expect(try JSONValue.bool(true).boolValue)
    #expect(throws: JSONAccessError.self) { try JSONValue.bool(true).int64Value }
    #expect(throws: JSONAccessError.self) { try JSONValue.null.stringValue }
    #expect(JSONAccessError(code: .wrongType, message: "m").description == "$: m")
}
