import Events
import JSON

/// GeoJSON (RFC 7946) location history: a `FeatureCollection` whose `features` are Points with a
/// time property, or Overland's own file shape `{"locations": [Feature, ...]}`. Each feature is
/// read as a tree, the file streamed.
///
/// A Point's `coordinates` are `[longitude, latitude, altitude?]`. Its `properties`:
/// - the time: the first of `timestamp`, `time`, `recorded_at`, `datetime`, `date`, `when`, as an
///   RFC 3339 string or epoch seconds (milliseconds when above 10^11, i.e. after 1973 in ms);
/// - accuracy: `accuracy_m` (findmy's export), `horizontal_accuracy`, `accuracy` (metres; negative or
///   0 is unknown);
/// - `altitude_m`, `altitude` (before the third coordinate; unknown when `vertical_accuracy` is
///   negative), `speed_mps`, `speed` (m/s), `course`/`heading`/`bearing` (degrees): negative is
///   unknown, as Overland writes it;
/// - battery: `battery_level` (0..1, as Overland writes it; above 1 read as percent), `battery`
///   (percent); `charging` (a boolean, findmy's export), else `battery_state` "charging"/"full" is
///   charging, "unplugged" is not;
/// - `source` kept as written; "track" when absent (Overland's visits, `action: "visit"`, are
///   "visit", dated at `arrival_date`).
/// Features that are not Points ("not_a_point"), Points without a time ("point_without_time"),
/// and Overland's other records (`type: "trip"`, other `action`s: "app_event") are counted.
public struct GeoJSONReader<Source: ByteSource>: FixReader {
    private let elements: JSONElements
    private var pending = PendingItems()

    public init(_ source: Source) {
        elements = JSONElements(source, arrayKeys: ["features", "locations"])
    }

    public mutating func next() throws(ImportError) -> ImportItem? {
        while true {
            if let item = pending.next() { return item }
            guard let element = try elements.next() else { return nil }
            let offset = elements.reader.tokenOffset
            let feature = try elements.tree(element.first)
            guard case .object = feature else {
                throw ImportError("each feature must be a GeoJSON Feature object", byteOffset: offset)
            }
            return Self.item(feature)
        }
    }

    static func item(_ feature: JSONValue) -> ImportItem {
        let properties = feature["properties"]
        if feature["type"] == .string("trip") || properties?["type"] == .string("trip") {
            return .notAFix(kind: "app_event")
        }
        var source = ImportValues.source(properties?["source"], fallback: "track")
        var micros = time(properties)
        if let action = properties?["action"], action != .null {
            guard action == .string("visit") else { return .notAFix(kind: "app_event") }
            source = "visit"
            micros =
                ImportValues.string(properties?["arrival_date"]).flatMap(ImportValues.rfc3339Micros)
                ?? ImportValues.string(properties?["departure_date"]).flatMap(ImportValues.rfc3339Micros)
        }
        guard feature["geometry"]?["type"] == .string("Point"),
            case .array(let coordinates)? = feature["geometry"]?["coordinates"], coordinates.count >= 2,
            let longitude = ImportValues.number(coordinates[0]),
            let latitude = ImportValues.number(coordinates[1])
        else {
            return .notAFix(kind: "not_a_point")
        }
        guard let micros else { return .notAFix(kind: "point_without_time") }
        func known(_ key: String) -> Double? {
            ImportValues.number(properties?[key]).flatMap { $0 >= 0 ? $0 : nil }
        }
        let accuracy = (known("accuracy_m") ?? known("horizontal_accuracy") ?? known("accuracy"))
            .flatMap { $0 > 0 ? $0 : nil }
        // Overland marks an altitude it does not trust with a negative vertical accuracy.
        let altitudeTrusted = ImportValues.number(properties?["vertical_accuracy"]).map { $0 >= 0 } ?? true
        let altitude =
            !altitudeTrusted
            ? nil
            : ImportValues.number(properties?["altitude_m"]) ?? ImportValues.number(properties?["altitude"])
                ?? (coordinates.count > 2 ? ImportValues.number(coordinates[2]) : nil)
        let heading = (known("course") ?? known("heading") ?? known("bearing")).map { $0 == 360 ? 0 : $0 }
        let battery = known("battery_level").map { $0 <= 1 ? $0 * 100 : $0 } ?? known("battery")
        return .fix(
            Fix(
                latitude: latitude, longitude: longitude, accuracyMeters: accuracy, altitudeMeters: altitude,
                speedMetersPerSecond: known("speed_mps") ?? known("speed"), headingDegrees: heading,
                batteryPercent: battery.flatMap { $0 <= 100 ? UInt8($0.rounded()) : nil },
                isCharging: charging(properties?["charging"], state: properties?["battery_state"]),
                source: source,
                recordedAtMicros: micros))
    }

    /// The first time property present, as microseconds.
    static func time(_ properties: JSONValue?) -> Int64? {
        for key in ["timestamp", "time", "recorded_at", "datetime", "date", "when"] {
            guard let value = properties?[key] else { continue }
            switch value {
            case .string(let text): return ImportValues.rfc3339Micros(text) ?? EpochTime.micros(text)
            case .integer, .double: return ImportValues.number(value).flatMap(EpochTime.micros)
            default: return nil
            }
        }
        return nil
    }

    /// findmy's own `charging` (a boolean), else Overland's `battery_state`.
    private static func charging(_ flag: JSONValue?, state: JSONValue?) -> Bool? {
        if case .bool(let charging)? = flag { return charging }
        switch state {
        case .string("charging")?, .string("full")?: return true
        case .string("unplugged")?: return false
        default: return nil
        }
    }
}

/// Epoch times in files that do not say their unit: seconds, or milliseconds when the number is
/// above 10^11 (10^11 seconds is the year 5138; 10^11 milliseconds is March 1973).
enum EpochTime {
    static let millisThreshold = 1e11

    static func micros(_ value: Double) -> Int64? {
        guard value.isFinite, value >= 0, value < 1e14 else { return nil }
        let seconds = value > millisThreshold ? value / 1000 : value
        return Int64((seconds * 1_000_000).rounded())
    }

    static func micros(_ text: String) -> Int64? {
        guard let value = Double(text.trimmingCharacters()), text.utf8.allSatisfy({ $0 != UInt8(ascii: "e") })
        else { return nil }
        return micros(value)
    }
}

extension String {
    func trimmingCharacters() -> Substring { Substring(self).trimmingSpaces() }
}
