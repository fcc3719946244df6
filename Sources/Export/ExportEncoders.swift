import Events
import JSON

/// GPX 1.1: one track of one segment, a `trkpt` per fix in the order given. `<time>` is
/// `recorded_at`, `<ele>` the altitude; the rest goes into findmy's extension namespace
/// (docs/import-export.md, "The GPX extension namespace"), which Import's GPX reader reads back.
struct GPXEncoder {
    /// The namespace of findmy's elements; Import's `GPXExtension.namespace` reads the same one.
    static let namespace = "https://findmy.invalid/gpx/1"

    static func header(into bytes: inout [UInt8]) {
        bytes.append(
            contentsOf: """
                <?xml version="1.0" encoding="UTF-8"?>
                <gpx version="1.1" creator="findmy" xmlns="http://www.topografix.com/GPX/1/1" \
                xmlns:findmy="\(namespace)">
                <trk><trkseg>

                """.utf8)
    }

    static func footer(into bytes: inout [UInt8]) {
        bytes.append(contentsOf: "</trkseg></trk>\n</gpx>\n".utf8)
    }

    mutating func fix(_ fix: Fix, receivedAtMicros: Int64, into bytes: inout [UInt8]) {
        bytes.append(contentsOf: "<trkpt lat=\"".utf8)
        ExportText.appendDecimal(fix.latitude, to: &bytes)
        bytes.append(contentsOf: "\" lon=\"".utf8)
        ExportText.appendDecimal(fix.longitude, to: &bytes)
        bytes.append(contentsOf: "\">".utf8)
        if let altitude = fix.altitudeMeters { element("ele", altitude, &bytes) }
        bytes.append(contentsOf: "<time>".utf8)
        ExportText.appendTime(fix.recordedAtMicros, to: &bytes)
        bytes.append(contentsOf: "</time><extensions>".utf8)
        if let accuracy = fix.accuracyMeters { element("findmy:accuracy", accuracy, &bytes) }
        if let speed = fix.speedMetersPerSecond { element("findmy:speed", speed, &bytes) }
        if let heading = fix.headingDegrees { element("findmy:course", heading, &bytes) }
        if let battery = fix.batteryPercent {
            bytes.append(contentsOf: "<findmy:battery>".utf8)
            ExportText.appendInteger(battery, to: &bytes)
            bytes.append(contentsOf: "</findmy:battery>".utf8)
        }
        if let charging = fix.isCharging {
            bytes.append(contentsOf: (charging ? "<findmy:charging>true" : "<findmy:charging>false").utf8)
            bytes.append(contentsOf: "</findmy:charging>".utf8)
        }
        bytes.append(contentsOf: "<findmy:source>".utf8)
        ExportText.appendXMLEscaped(fix.source, to: &bytes)
        bytes.append(contentsOf: "</findmy:source><findmy:received_at>".utf8)
        ExportText.appendTime(receivedAtMicros, to: &bytes)
        bytes.append(contentsOf: "</findmy:received_at></extensions></trkpt>\n".utf8)
    }

    private func element(_ name: StaticString, _ value: Double, _ bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "<"))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: ">"))
        ExportText.appendDecimal(value, to: &bytes)
        bytes.append(contentsOf: "</".utf8)
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: ">"))
    }
}

/// GeoJSON (RFC 7946): a FeatureCollection of Point features, one per line. `coordinates` are
/// `[longitude, latitude]`; the properties are named as findmy's API names a fix, with the unit
/// last. An unknown value is absent, not `null`, as in the API's fixes.
///
/// A feature is written straight into the output through `JSONFlatObject`, its keys and
/// punctuation as a few fixed pieces, and each number column guesses its count of fraction
/// digits from its previous value: the writing was half of findmy's time in an export over HTTP
/// (docs/benchmarks.md). The bytes are those of `JSONWriter`'s token-by-token calls (tested).
struct GeoJSONEncoder {
    private var first = true
    /// Per column, the fraction digits of its last value (`JSONFlatObject.double`'s guess).
    private var digits = (longitude: 7, latitude: 7, accuracy: 0, altitude: 1, speed: 1, heading: 1)

    static func header(into bytes: inout [UInt8]) {
        bytes.append(contentsOf: "{\"type\":\"FeatureCollection\",\"features\":[\n".utf8)
    }

    static func footer(into bytes: inout [UInt8]) {
        bytes.append(contentsOf: "]}\n".utf8)
    }

    /// The fixed pieces (about 200 bytes), six doubles, two times, an integer, a boolean, the source.
    static func featureBytesMax(sourceUTF8Count: Int) -> Int {
        256 + 6 * JSONFlatObject.doubleBytesMax + 2 * JSONFlatObject.timestampBytesMax
            + JSONFlatObject.integerBytesMax + 5 + JSONFlatObject.stringBytesMax(utf8Count: sourceUTF8Count)
    }

    mutating func fix(_ fix: Fix, receivedAtMicros: Int64, into bytes: inout [UInt8]) {
        var source = fix.source
        source.withUTF8 { sourceUTF8 in
            let bytesMax = Self.featureBytesMax(sourceUTF8Count: sourceUTF8.count)
            JSONFlatObject.append(to: &bytes, bytesMax: bytesMax) { object in
                write(fix, receivedAtMicros: receivedAtMicros, sourceUTF8, &object)
            }
        }
        first = false
    }

    private mutating func write(
        _ fix: Fix, receivedAtMicros: Int64, _ source: UnsafeBufferPointer<UInt8>,
        _ object: inout JSONFlatObject
    ) {
        if !first { object.raw(",\n") }
        object.raw("{\"type\":\"Feature\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[")
        object.double(fix.longitude, fractionDigitsGuess: &digits.longitude)
        object.raw(",")
        object.double(fix.latitude, fractionDigitsGuess: &digits.latitude)
        object.raw("]},\"properties\":{\"recorded_at\":")
        object.timestamp(micros: fix.recordedAtMicros)
        object.raw(",\"received_at\":")
        object.timestamp(micros: receivedAtMicros)
        if let accuracy = fix.accuracyMeters {
            object.raw(",\"accuracy_m\":")
            object.double(accuracy, fractionDigitsGuess: &digits.accuracy)
        }
        if let altitude = fix.altitudeMeters {
            object.raw(",\"altitude_m\":")
            object.double(altitude, fractionDigitsGuess: &digits.altitude)
        }
        if let speed = fix.speedMetersPerSecond {
            object.raw(",\"speed_mps\":")
            object.double(speed, fractionDigitsGuess: &digits.speed)
        }
        if let heading = fix.headingDegrees {
            object.raw(",\"heading\":")
            object.double(heading, fractionDigitsGuess: &digits.heading)
        }
        if let battery = fix.batteryPercent {
            object.raw(",\"battery\":")
            object.int64(Int64(battery))
        }
        if let charging = fix.isCharging {
            object.raw(",\"charging\":")
            object.bool(charging)
        }
        object.raw(",\"source\":")
        object.string(utf8: source)
        object.raw("}}")
    }
}

/// CSV (RFC 4180): a header row, then a row per fix, comma-separated, CRLF line ends as RFC 4180
/// asks. Column names are those Import's CSV reader knows; an unknown value is an empty cell.
/// No cell needs quoting: numbers, times, `true`/`false`, and a source of `a-z0-9_-.` (the report
/// path's rule); a source with a comma or a quote is quoted all the same.
struct CSVEncoder {
    static let columns = [
        "recorded_at", "received_at", "latitude", "longitude", "accuracy", "altitude", "speed", "heading",
        "battery_percent", "charging", "source",
    ]

    static func header(into bytes: inout [UInt8]) {
        bytes.append(contentsOf: columns.joined(separator: ",").utf8)
        bytes.append(contentsOf: "\r\n".utf8)
    }

    mutating func fix(_ fix: Fix, receivedAtMicros: Int64, into bytes: inout [UInt8]) {
        let comma = UInt8(ascii: ",")
        ExportText.appendTime(fix.recordedAtMicros, to: &bytes)
        bytes.append(comma)
        ExportText.appendTime(receivedAtMicros, to: &bytes)
        bytes.append(comma)
        ExportText.appendDecimal(fix.latitude, to: &bytes)
        bytes.append(comma)
        ExportText.appendDecimal(fix.longitude, to: &bytes)
        for value in [fix.accuracyMeters, fix.altitudeMeters, fix.speedMetersPerSecond, fix.headingDegrees] {
            bytes.append(comma)
            if let value { ExportText.appendDecimal(value, to: &bytes) }
        }
        bytes.append(comma)
        if let battery = fix.batteryPercent { ExportText.appendInteger(battery, to: &bytes) }
        bytes.append(comma)
        if let charging = fix.isCharging { bytes.append(contentsOf: (charging ? "true" : "false").utf8) }
        bytes.append(comma)
        appendCell(fix.source, to: &bytes)
        bytes.append(contentsOf: "\r\n".utf8)
    }

    private func appendCell(_ text: String, to bytes: inout [UInt8]) {
        let needsQuotes = text.utf8.contains {
            $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == 0x0A || $0 == 0x0D
        }
        guard needsQuotes else {
            bytes.append(contentsOf: text.utf8)
            return
        }
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") { bytes.append(byte) }
            bytes.append(byte)
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
