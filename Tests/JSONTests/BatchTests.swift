import JSON
import Testing

/// A 100-fix report batch as a phone sends it, pretty-printed with a trailing newline.
private func realisticBatch() -> String {
    let sources = ["significant", "ondemand", "visit", "manual", "geofence"]
    let fixes = (0..<100).map { index in
        """
            {
              "latitude": 52.52\(padded(index, 5)), "longitude": -13.40\(padded(99 - index, 5)),
              "accuracy_m": \(5 + index % 40).5, "altitude_m": 34.2, "speed_mps": 1.25e0, "heading_deg": \(index * 3),
              "battery_pct": \(100 - index), "is_charging": \(index % 7 == 0), "source": "\(sources[index % 5])",
              "recorded_at": "2026-12-02T14:\(padded(index / 2, 2)):\(index % 2 == 0 ? "00" : "30").123+01:00"
            }
        """
    }
    return "{\n  \"device_id\": \"6f1c2a9e-3b7d-4e58-9a61-0c2d4b8e7f13\",\n  \"fixes\": [\n"
        + fixes.joined(separator: ",\n") + "\n  ]\n}\n"
}

private func padded(_ value: Int, _ width: Int) -> String {
    let digits = String(value)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
}

@Test func parsesAndDecodesARealistic100FixBatch() throws {
    let document = try JSONParser.parse(realisticBatch())
    let root = try document.objectValue
    try root.checkKeys(allowed: ["device_id", "fixes"])
    let fixes = try root.decode("fixes") { value throws(JSONAccessError) in
        try value.mapArray { fix throws(JSONAccessError) in
            let object = try fix.objectValue
            return (
                latitude: try object.double("latitude"), longitude: try object.double("longitude"),
                battery: try object.int64("battery_pct"), recordedAt: try object.string("recorded_at")
            )
        }
    }
    #expect(fixes.count == 100)
    #expect(fixes[7].latitude == 52.5200007)
    #expect(fixes[7].longitude == -13.4000092)
    #expect(fixes[99].battery == 1)
    let lastRecordedAt = try RFC3339.parseMicros(fixes[99].recordedAt)
    #expect(lastRecordedAt == (try RFC3339.parseMicros("2026-12-02T13:49:30.123Z")))
}

@Test func aBadFixInABatchIsReportedByIndexAndByte() throws {
    let batch = realisticBatch().replacing("\"battery_pct\": 58,", with: "\"battery_pct\": 58,,")
    do {
        _ = try JSONParser.parse(batch)
        Issue.record("accepted a double comma")
    } catch {
        #expect(error.code == .unexpectedByte)
        #expect(error.message == "expected a string key for an object member, found ','")
        #expect(Array(batch.utf8)[error.byteOffset] == UInt8(ascii: ","))
    }
}
