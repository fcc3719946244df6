import Events
import JSON

/// One `.rec` file of OwnTracks Recorder's store, as the Recorder writes it (recorder.c, `putrec`:
/// `"%s\t%-18s\t%s\n"`): a line per message received,
///
///     2024-05-01T10:00:00Z<TAB>*                 <TAB>{"_type":"location","lat":52.5,...}
///
/// the time the Recorder received it (UTC, whole seconds), the topic's suffix after the device's
/// topic padded to 18 (`*` for the device's own topic, where locations arrive), and the payload,
/// JSON on one line.
///
/// A payload with `_type: location` is a fix: `lat`, `lon`, `acc` (metres; 0 or absent is
/// unknown), `alt` (metres), `vel` (km/h, kept as m/s), `cog` (degrees), `batt` (percent), `bs`
/// (2 charging, 3 full, 1 unplugged), `tst` (epoch seconds, the fix's time; the line's time when
/// absent), the trigger `t` as the source, named as the live OwnTracks client names it
/// ("automatic" by default; "manual", "ondemand", "geofence", "ping", "timer", "visit", "motion").
/// Every other payload is counted by its `_type` ("transition", "waypoint", "lwt", "card",
/// "status", ...); a payload that is not JSON on another topic than `*` is counted
/// ("non_json_payload"). A line not in this shape, or a location that is not JSON, is an error
/// naming the line.
public struct OwnTracksRecorderReader<Source: ByteSource>: FixReader {
    private var lines: LineReader<Source>

    public init(_ source: Source) {
        lines = LineReader(source)
    }

    public mutating func next() throws(ImportError) -> ImportItem? {
        while true {
            guard let line = try lines.next() else { return nil }
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            return try item(line)
        }
    }

    private func item(_ line: ArraySlice<UInt8>) throws(ImportError) -> ImportItem {
        guard let firstTab = line.firstIndex(of: 0x09),
            let secondTab = line[(firstTab + 1)...].firstIndex(of: 0x09),
            let receivedAt = try? RFC3339.parseMicros(Array(line[..<firstTab]))
        else {
            throw failure("expected a Recorder line: a UTC time, a tab, the topic, a tab, the JSON payload")
        }
        let topic = String(decoding: line[(firstTab + 1)..<secondTab], as: UTF8.self).trimmingCharacters()
        let payload = Array(line[(secondTab + 1)...])
        let parsed: JSONValue
        do {
            parsed = try JSONParser.parse(payload)
        } catch {
            if topic != "*" { return .notAFix(kind: "non_json_payload") }
            throw failure(
                "the payload is not valid JSON: \(error.message)",
                at: secondTab + 1 - line.startIndex + error.byteOffset)
        }
        guard case .object(let object) = parsed else {
            if topic != "*" { return .notAFix(kind: "non_json_payload") }
            throw failure("the payload must be a JSON object", at: secondTab + 1 - line.startIndex)
        }
        guard case .string(let type)? = object["_type"] else { return .notAFix(kind: "unknown") }
        guard type == "location" else { return .notAFix(kind: type) }
        return try location(object, receivedAt: receivedAt)
    }

    private func location(_ object: JSONObject, receivedAt: Int64) throws(ImportError) -> ImportItem {
        func number(_ key: String) throws(ImportError) -> Double? {
            switch object[key] {
            case nil, .null?: return nil
            case let value?:
                guard let number = ImportValues.number(value) else {
                    throw failure("\(key) must be a number, found \(value.typeName)")
                }
                return number
            }
        }
        guard let latitude = try number("lat"), let longitude = try number("lon") else {
            return .notAFix(kind: "incomplete_location")
        }
        let recordedAt = try number("tst").map { Int64($0) * 1_000_000 } ?? receivedAt
        let battery = try number("batt").flatMap { $0 >= 0 && $0 <= 100 ? UInt8($0.rounded()) : nil }
        let charging: Bool? =
            switch try number("bs") {
            case 1?: false
            case 2?, 3?: true
            default: nil
            }
        return .fix(
            Fix(
                latitude: latitude, longitude: longitude,
                accuracyMeters: try number("acc").flatMap { $0 > 0 ? $0 : nil },
                altitudeMeters: try number("alt"),
                speedMetersPerSecond: try number("vel").flatMap { $0 >= 0 ? $0 / 3.6 : nil },
                headingDegrees: try number("cog").flatMap { $0 < 0 ? nil : $0 == 360 ? 0 : $0 },
                batteryPercent: battery, isCharging: charging, source: Self.source(trigger: object["t"]),
                recordedAtMicros: recordedAt))
    }

    /// The trigger `t` as the report's source, as the live OwnTracks client maps it (docs/clients.md).
    static func source(trigger: JSONValue?) -> String {
        guard case .string(let trigger)? = trigger else { return "automatic" }
        switch trigger {
        case "u": return "manual"
        case "r": return "ondemand"
        case "c", "C", "b", "e", "l": return "geofence"
        case "p": return "ping"
        case "t": return "timer"
        case "v": return "visit"
        case "m": return "motion"
        default: return "automatic"
        }
    }

    private func failure(_ message: String, at column: Int = 0) -> ImportError {
        ImportError(message, byteOffset: lines.lineOffset + Int64(column), line: lines.lineNumber)
    }
}
