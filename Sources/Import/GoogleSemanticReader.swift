import Events
import JSON

/// Google Takeout's Semantic Location History: one file a month, `{"timelineObjects": [...]}`,
/// each object a `placeVisit` or an `activitySegment`. Each object is read as a tree (an object
/// is a few kilobytes; at most `JSONElements.elementBytesMax`), the file streamed.
///
/// - `placeVisit`: `location.latitudeE7`/`longitudeE7` (or `centerLatE7`/`centerLngE7`) is a fix
///   with source "visit" at `duration.startTimestamp` (or `startTimestampMs`), accuracy unknown;
///   `location.name` and `location.address` are counted ("place_name", "address"); `childVisits`
///   are visits too; a visit's `simplifiedRawPath` points are fixes.
/// - `activitySegment`: `startLocation` at the start and `endLocation` at the end are fixes with
///   source "activity"; `simplifiedRawPath.points` (`latE7`, `lngE7`, `accuracyMeters`,
///   `timestamp` or `timestampMs`) are fixes with source "track"; `activityType` is counted
///   ("activity"); `waypointPath.waypoints` carry no time and are counted
///   ("waypoint_without_time"), not stored: spreading them over the segment's duration would
///   invent times the file does not hold.
public struct GoogleSemanticReader<Source: ByteSource>: FixReader {
    private let elements: JSONElements
    private var pending = PendingItems()

    public init(_ source: Source) {
        elements = JSONElements(source, arrayKeys: ["timelineObjects"])
    }

    public mutating func next() throws(ImportError) -> ImportItem? {
        while true {
            if let item = pending.next() { return item }
            guard let element = try elements.next() else { return nil }
            let offset = elements.reader.tokenOffset
            let object = try elements.tree(element.first)
            guard case .object = object else {
                throw ImportError("each element of \"timelineObjects\" must be an object", byteOffset: offset)
            }
            if let visit = object["placeVisit"] {
                Self.visit(visit, into: &pending)
            } else if let segment = object["activitySegment"] {
                Self.activity(segment, into: &pending)
            } else {
                pending.append(.notAFix(kind: "unknown_timeline_object"))
            }
        }
    }

    static func visit(_ visit: JSONValue, into pending: inout PendingItems) {
        let location = visit["location"]
        let latitude = ImportValues.number(location?["latitudeE7"] ?? visit["centerLatE7"])
        let longitude = ImportValues.number(location?["longitudeE7"] ?? visit["centerLngE7"])
        let start = startMicros(visit["duration"])
        if let latitude, let longitude, let start {
            pending.append(
                .fix(
                    Fix(
                        latitude: ImportValues.degreesE7(latitude),
                        longitude: ImportValues.degreesE7(longitude),
                        accuracyMeters: nil, source: "visit", recordedAtMicros: start)))
        } else {
            pending.append(.notAFix(kind: "incomplete_visit"))
        }
        if location?["name"] != nil { pending.append(.notAFix(kind: "place_name")) }
        if location?["address"] != nil { pending.append(.notAFix(kind: "address")) }
        rawPath(visit["simplifiedRawPath"], into: &pending)
        if case .array(let children)? = visit["childVisits"] {
            for child in children { self.visit(child, into: &pending) }
        }
    }

    static func activity(_ segment: JSONValue, into pending: inout PendingItems) {
        let duration = segment["duration"]
        endpoint(segment["startLocation"], at: startMicros(duration), into: &pending)
        rawPath(segment["simplifiedRawPath"], into: &pending)
        endpoint(
            segment["endLocation"],
            at: ImportValues.googleMicros(duration?["endTimestamp"] ?? duration?["endTimestampMs"]),
            into: &pending)
        if segment["activityType"] != nil { pending.append(.notAFix(kind: "activity")) }
        if case .array(let waypoints)? = segment["waypointPath"]?["waypoints"] {
            for _ in waypoints { pending.append(.notAFix(kind: "waypoint_without_time")) }
        }
    }

    private static func startMicros(_ duration: JSONValue?) -> Int64? {
        ImportValues.googleMicros(duration?["startTimestamp"] ?? duration?["startTimestampMs"])
    }

    private static func endpoint(_ location: JSONValue?, at micros: Int64?, into pending: inout PendingItems)
    {
        guard let location else { return }
        guard let latitude = ImportValues.number(location["latitudeE7"]),
            let longitude = ImportValues.number(location["longitudeE7"]), let micros
        else {
            pending.append(.notAFix(kind: "incomplete_location"))
            return
        }
        pending.append(
            .fix(
                Fix(
                    latitude: ImportValues.degreesE7(latitude), longitude: ImportValues.degreesE7(longitude),
                    accuracyMeters: nil, source: "activity", recordedAtMicros: micros)))
    }

    private static func rawPath(_ path: JSONValue?, into pending: inout PendingItems) {
        guard case .array(let points)? = path?["points"] else { return }
        for point in points {
            guard let latitude = ImportValues.number(point["latE7"]),
                let longitude = ImportValues.number(point["lngE7"]),
                let micros = ImportValues.googleMicros(point["timestamp"] ?? point["timestampMs"])
            else {
                pending.append(.notAFix(kind: "incomplete_location"))
                continue
            }
            pending.append(
                .fix(
                    Fix(
                        latitude: ImportValues.degreesE7(latitude),
                        longitude: ImportValues.degreesE7(longitude),
                        accuracyMeters: ImportValues.number(point["accuracyMeters"]).flatMap {
                            $0 > 0 ? $0 : nil
                        },
                        source: "track", recordedAtMicros: micros)))
        }
    }
}
