import Events
import JSON

/// Google Takeout's `Records.json`: `{"locations": [ {...}, ... ]}`, one element per recorded
/// position, read member by member without building a tree (this is the file that runs to a
/// gigabyte and more).
///
/// An element's members: `latitudeE7`, `longitudeE7` (degrees × 10^7), `accuracy` (metres),
/// `altitude` (metres), `velocity` (m/s), `heading` (degrees), `timestamp` (RFC 3339; since 2022)
/// or `timestampMs` (milliseconds as a string; before), `source` ("WIFI", "GPS", "CELL", kept
/// lowercased; "track" when absent), `activity` (the activity recognitions at about that time:
/// each counted as an "activity", not stored). Everything else (`verticalAccuracy`, `deviceTag`,
/// `platformType`, `placeId`, ...) is passed over. An element without a position or a time is
/// counted as an "incomplete_location".
public struct GoogleRecordsReader<Source: ByteSource>: FixReader {
    private let elements: JSONElements
    /// What the last element held, handed out in order: its activities, then its fix.
    private var pending = PendingItems()

    public init(_ source: Source) {
        elements = JSONElements(source, arrayKeys: ["locations"])
    }

    public mutating func next() throws(ImportError) -> ImportItem? {
        while true {
            if let item = pending.next() { return item }
            guard let element = try elements.next() else { return nil }
            guard element.first == .objectStart else {
                throw elements.here("each element of \"locations\" must be an object")
            }
            let location = try readLocation()
            for _ in 0..<location.activities { pending.append(.notAFix(kind: "activity")) }
            guard let latitude = location.latitudeE7, let longitude = location.longitudeE7,
                let recordedAt = location.recordedAtMicros
            else {
                pending.append(.notAFix(kind: "incomplete_location"))
                continue
            }
            pending.append(
                .fix(
                    Fix(
                        latitude: ImportValues.degreesE7(latitude),
                        longitude: ImportValues.degreesE7(longitude),
                        accuracyMeters: location.accuracy.flatMap { $0 > 0 ? $0 : nil },
                        altitudeMeters: location.altitude,
                        speedMetersPerSecond: location.velocity.flatMap { $0 >= 0 ? $0 : nil },
                        headingDegrees: location.heading.flatMap { $0 >= 0 ? $0 : nil },
                        source: location.source ?? "track", recordedAtMicros: recordedAt)))
        }
    }

    private struct Location {
        var latitudeE7: Double?
        var longitudeE7: Double?
        var accuracy: Double?
        var altitude: Double?
        var velocity: Double?
        var heading: Double?
        var recordedAtMicros: Int64?
        var source: String?
        var activities = 0
    }

    /// The members of one element, its `{` read.
    private func readLocation() throws(ImportError) -> Location {
        let reader = elements.reader
        var location = Location()
        while try elements.token() == .key {
            if reader.stringEquals("latitudeE7") {
                location.latitudeE7 = try number("latitudeE7")
            } else if reader.stringEquals("longitudeE7") {
                location.longitudeE7 = try number("longitudeE7")
            } else if reader.stringEquals("timestamp") {
                // Parsed in place: one String per fix less, on the format's hot loop.
                guard try elements.token() == .string,
                    let micros = try? RFC3339.parseMicros(reader.stringBytes)
                else {
                    throw elements.here("timestamp must be an RFC 3339 time such as 2019-05-01T10:00:00.000Z")
                }
                location.recordedAtMicros = micros
            } else if reader.stringEquals("timestampMs") {
                let token = try elements.token()
                let micros: Int64? =
                    token == .string
                    ? ImportValues.millisStringMicros(reader.string)
                    : token == .number ? ImportValues.googleMicros(.double(reader.number)) : nil
                guard let micros else { throw elements.here("timestampMs must be milliseconds since 1970") }
                location.recordedAtMicros = location.recordedAtMicros ?? micros
            } else if reader.stringEquals("accuracy") {
                location.accuracy = try number("accuracy")
            } else if reader.stringEquals("altitude") {
                location.altitude = try number("altitude")
            } else if reader.stringEquals("velocity") {
                location.velocity = try number("velocity")
            } else if reader.stringEquals("heading") {
                location.heading = try number("heading")
            } else if reader.stringEquals("source") {
                guard try elements.token() == .string else { throw elements.here("source must be a string") }
                location.source = Self.source(reader)
            } else if reader.stringEquals("activity") {
                location.activities = try countElements()
            } else {
                try elements.skipValue()
            }
        }
        return location
    }

    /// The common spellings without making and lowercasing a String each time.
    private static func source(_ reader: JSONStreamReader) -> String {
        if reader.stringEquals("WIFI") { return "wifi" }
        if reader.stringEquals("GPS") { return "gps" }
        if reader.stringEquals("CELL") { return "cell" }
        return reader.string.lowercased()
    }

    private func number(_ name: String) throws(ImportError) -> Double? {
        switch try elements.token() {
        case .number: return elements.reader.number
        case .null: return nil
        default: throw elements.here("\(name) must be a number")
        }
    }

    /// The number of elements of the array that comes next, each skipped.
    private func countElements() throws(ImportError) -> Int {
        guard try elements.token() == .arrayStart else { throw elements.here("activity must be an array") }
        var count = 0
        while true {
            switch try elements.token() {
            case .arrayEnd: return count
            case .objectStart, .arrayStart:
                count += 1
                try skipRest()
            default: count += 1
            }
        }
    }

    /// Skips the rest of a container whose start was read.
    private func skipRest() throws(ImportError) {
        let outer = elements.reader.depth - 1
        while true {
            let token = try elements.token()
            if (token == .objectEnd || token == .arrayEnd) && elements.reader.depth == outer { return }
        }
    }
}
