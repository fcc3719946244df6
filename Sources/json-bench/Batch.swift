import JSON

/// A report batch shaped like the ones phones send: coordinates with 6-7 decimals, optional
/// fields present, recorded_at strings. Deterministic so runs compare.
func makeBatch(fixCount: Int) -> [UInt8] {
    var state: UInt64 = 42
    func next() -> Double {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Double(state >> 11) / Double(1 << 53)
    }
    let sources = ["significant", "ondemand", "visit", "manual", "geofence"]
    var writer = JSONWriter(capacity: fixCount * 300)
    writer.beginObject()
    writer.key("device_id")
    writer.string("6f1c2a9e-3b7d-4e58-9a61-0c2d4b8e7f13")
    writer.key("fixes")
    writer.beginArray()
    for index in 0..<fixCount {
        writer.beginObject()
        writer.key("latitude")
        writer.rawValue(String(format7(52.5 + next() * 0.1)).utf8)
        writer.key("longitude")
        writer.rawValue(String(format7(13.3 + next() * 0.1)).utf8)
        writer.key("accuracy_m")
        writer.double((next() * 500).rounded() / 10)
        writer.key("altitude_m")
        writer.double((300 + next() * 800).rounded() / 10)
        writer.key("speed_mps")
        writer.double((next() * 300).rounded() / 10)
        writer.key("heading_deg")
        writer.double((next() * 3600).rounded() / 10)
        writer.key("battery_pct")
        writer.int64(Int64(100 - index % 100))
        writer.key("is_charging")
        writer.bool(index % 7 == 0)
        writer.key("source")
        writer.string(sources[index % sources.count])
        writer.key("recorded_at")
        writer.string(RFC3339.formatMillis(1_796_220_000_000_000 + Int64(index) * 30_000_000))
        writer.endObject()
    }
    writer.endArray()
    writer.endObject()
    return writer.bytes
}

/// Seven decimals, as phones print coordinates (about 1 cm).
private func format7(_ value: Double) -> String {
    let scaled = Int64((value * 1e7).rounded())
    let fraction = String(scaled % 10_000_000)
    return "\(scaled / 10_000_000)." + String(repeating: "0", count: 7 - fraction.count) + fraction
}
