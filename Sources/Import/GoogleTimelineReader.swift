import Events
import JSON

/// The Timeline export Google Maps writes on the phone since 2024, in its two shapes:
/// - Android: `{"semanticSegments": [...], "rawSignals": [...], "userLocationProfile": {...}}`,
///   positions written `"52.5163170°, 13.3777000°"`;
/// - iOS: a top-level array of segments, positions written `"geo:52.516317,13.377700"`, numbers
///   as strings, path points timed by `durationMinutesOffsetFromStartTime`.
///
/// Per segment (`startTime`, `endTime`, RFC 3339 with the local offset):
/// - `timelinePath[]`: each `point` at its `time` (or `startTime` + the offset in minutes) is a fix
///   with source "track", accuracy unknown;
/// - `visit.topCandidate.placeLocation` (`.latLng`, or the string itself on iOS) is a fix with
///   source "visit" at `startTime`; its `semanticType` is counted ("place_type");
/// - `activity.start` and `activity.end` are fixes with source "activity" at `startTime` and
///   `endTime`; `activity.topCandidate.type` is counted ("activity");
/// - `timelineMemory` segments are counted ("memory").
///
/// `rawSignals[]`: `position` (`LatLng`, `accuracyMeters`, `altitudeMeters`,
/// `speedMetersPerSecond`, `timestamp`, `source` kept lowercased, "track" when absent) is a fix;
/// `wifiScan` and `activityRecord` are counted ("wifi_scan", "activity").
/// `userLocationProfile` (frequent places, without times) is not read.
public struct GoogleTimelineReader<Source: ByteSource>: FixReader {
    private let elements: JSONElements
    private var pending = PendingItems()

    public init(_ source: Source) {
        elements = JSONElements(
            source, arrayKeys: ["semanticSegments", "rawSignals"], acceptsTopLevelArray: true)
    }

    public mutating func next() throws(ImportError) -> ImportItem? {
        while true {
            if let item = pending.next() { return item }
            guard let element = try elements.next() else { return nil }
            let offset = elements.reader.tokenOffset
            let object = try elements.tree(element.first)
            guard case .object = object else {
                throw ImportError(
                    "each timeline segment and raw signal must be an object", byteOffset: offset)
            }
            if element.array == 1 {
                Self.rawSignal(object, into: &pending)
            } else {
                Self.segment(object, into: &pending)
            }
        }
    }

    static func segment(_ segment: JSONValue, into pending: inout PendingItems) {
        let start = ImportValues.string(segment["startTime"]).flatMap(ImportValues.rfc3339Micros)
        let end = ImportValues.string(segment["endTime"]).flatMap(ImportValues.rfc3339Micros)
        if case .array(let path)? = segment["timelinePath"] {
            for point in path {
                var micros = ImportValues.string(point["time"]).flatMap(ImportValues.rfc3339Micros)
                if micros == nil, let start,
                    let minutes = ImportValues.number(point["durationMinutesOffsetFromStartTime"]),
                    minutes >= 0
                {
                    micros = start + Int64(minutes * 60) * 1_000_000
                }
                append(position(point["point"]), at: micros, source: "track", into: &pending)
            }
        }
        if let visit = segment["visit"] {
            let candidate = visit["topCandidate"]
            append(position(candidate?["placeLocation"]), at: start, source: "visit", into: &pending)
            if candidate?["semanticType"] != nil { pending.append(.notAFix(kind: "place_type")) }
        }
        if let activity = segment["activity"] {
            append(position(activity["start"]), at: start, source: "activity", into: &pending)
            append(position(activity["end"]), at: end, source: "activity", into: &pending)
            if activity["topCandidate"]?["type"] != nil { pending.append(.notAFix(kind: "activity")) }
        }
        if segment["timelineMemory"] != nil { pending.append(.notAFix(kind: "memory")) }
    }

    static func rawSignal(_ signal: JSONValue, into pending: inout PendingItems) {
        if let position = signal["position"] {
            guard
                let (latitude, longitude) = ImportValues.string(position["LatLng"]).flatMap(
                    ImportValues.latLng),
                let micros = ImportValues.string(position["timestamp"]).flatMap(ImportValues.rfc3339Micros)
            else {
                pending.append(.notAFix(kind: "incomplete_location"))
                return
            }
            pending.append(
                .fix(
                    Fix(
                        latitude: latitude, longitude: longitude,
                        accuracyMeters: ImportValues.number(position["accuracyMeters"]).flatMap {
                            $0 > 0 ? $0 : nil
                        },
                        altitudeMeters: ImportValues.number(position["altitudeMeters"]),
                        speedMetersPerSecond: ImportValues.number(position["speedMetersPerSecond"]).flatMap {
                            $0 >= 0 ? $0 : nil
                        },
                        source: ImportValues.source(position["source"], fallback: "track"),
                        recordedAtMicros: micros)))
        } else if signal["wifiScan"] != nil {
            pending.append(.notAFix(kind: "wifi_scan"))
        } else if signal["activityRecord"] != nil {
            pending.append(.notAFix(kind: "activity"))
        } else {
            pending.append(.notAFix(kind: "unknown_raw_signal"))
        }
    }

    /// A position written as a string, or as an object holding it in `latLng`.
    private static func position(_ value: JSONValue?) -> (Double, Double)? {
        switch value {
        case .string(let text)?: return ImportValues.latLng(text)
        case .object?: return ImportValues.string(value?["latLng"]).flatMap(ImportValues.latLng)
        default: return nil
        }
    }

    private static func append(
        _ position: (Double, Double)?, at micros: Int64?, source: String, into pending: inout PendingItems
    ) {
        guard let (latitude, longitude) = position, let micros else {
            pending.append(.notAFix(kind: "incomplete_location"))
            return
        }
        pending.append(
            .fix(
                Fix(
                    latitude: latitude, longitude: longitude, accuracyMeters: nil, source: source,
                    recordedAtMicros: micros)))
    }
}
