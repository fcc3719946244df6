import Events

/// GPX 1.0 and 1.1 (https://www.topografix.com/GPX/1/1/): every `trkpt` of every segment of every
/// track, every `rtept` and every `wpt`, in the file's order, as a fix when it has a `<time>`.
///
/// Read: `lat`, `lon`, `<ele>`, `<time>`; speed (m/s) and course (degrees) from GPX 1.0's
/// `<speed>`/`<course>`, from Garmin's TrackPointExtension (`gpxtpx:speed`, `gpxtpx:course`) and
/// from findmy's own extension (`GPXExtension.namespace`), which also carries accuracy, battery,
/// charging and source, so that a findmy export reads back as the same fixes.
/// Not read: `<hdop>`/`<vdop>`/`<pdop>`, which are dilutions of precision, not a distance; accuracy is
/// nil unless findmy's extension gives it. A point without a time is no fix: it is counted as
/// `point_without_time`. The source is `GPXReader.defaultSource` unless findmy's extension names one.
/// A bad number or time is an error naming the line; latitude and longitude ranges are the report
/// path's to check, as for every fix.
public final class GPXReader<Source: ByteSource>: FixReader {
    public static var defaultSource: String { gpxDefaultSource }

    @exclusivity(unchecked) private var source: Source?
    @exclusivity(unchecked) private var xml: XMLPullReader?
    @exclusivity(unchecked) private var depth = 0
    @exclusivity(unchecked) private var point: GPXPoint?
    @exclusivity(unchecked) private var field: GPXField?
    @exclusivity(unchecked) private var fieldDepth = 0
    @exclusivity(unchecked) private var text = XMLFieldText()

    public init(_ source: Source) { self.source = source }

    public func next() throws(ImportError) -> ImportItem? {
        let xml = try opened()
        while let event = try xml.next() {
            switch event {
            case .start:
                depth += 1
                try start(xml)
            case .text:
                if field != nil, !text.append(xml.text) {
                    throw xml.error("a value longer than \(XMLFieldText.bytesMax) bytes")
                }
            case .end:
                defer { depth -= 1 }
                if let item = try end(xml) { return item }
            }
        }
        return nil
    }

    private func opened() throws(ImportError) -> XMLPullReader {
        if let xml { return xml }
        guard let source else { preconditionFailure("the source is kept until the reader opens") }
        let opened = try XMLPullReader(SourceInput(source))
        self.source = nil
        xml = opened
        return opened
    }

    private func start(_ xml: XMLPullReader) throws(ImportError) {
        if depth == 1 {
            guard xml.nameIs("gpx") else {
                throw xml.error("not GPX: the root element is <\(xml.name)>, not <gpx>")
            }
            return
        }
        guard let point else {
            if xml.nameIs("trkpt") || xml.nameIs("rtept") || xml.nameIs("wpt") {
                self.point = try GPXPoint(xml, depth: depth)
            }
            return
        }
        guard field == nil, let found = GPXField(xml, childOfPoint: depth == point.depth + 1) else { return }
        field = found
        fieldDepth = depth
        text.removeAll()
    }

    private func end(_ xml: XMLPullReader) throws(ImportError) -> ImportItem? {
        if let field, depth == fieldDepth {
            self.field = nil
            try point?.set(field, text.trimmed, xml)
            return nil
        }
        guard let finished = point, depth == finished.depth else { return nil }
        point = nil
        return finished.item
    }
}

/// findmy's GPX extension: what a findmy export writes beside GPX's own elements, inside each
/// point's `<extensions>` (docs/import-export.md, "The GPX extension namespace").
public enum GPXExtension {
    public static let namespace: StaticString = "https://findmy.invalid/gpx/1"
    public static let prefix = "findmy"
}

/// The values of one point's child elements.
private enum GPXField {
    case elevation, time, speed, course, accuracy, battery, charging, source

    static let garminV1: StaticString = "http://www.garmin.com/xmlschemas/TrackPointExtension/v1"
    static let garminV2: StaticString = "http://www.garmin.com/xmlschemas/TrackPointExtension/v2"

    /// GPX's own elements are the point's children; extensions sit at any depth under `<extensions>`.
    init?(_ xml: XMLPullReader, childOfPoint: Bool) {
        if xml.namespaceIs(GPXExtension.namespace) {
            if xml.nameIs("accuracy") {
                self = .accuracy
            } else if xml.nameIs("battery") {
                self = .battery
            } else if xml.nameIs("charging") {
                self = .charging
            } else if xml.nameIs("source") {
                self = .source
            } else if xml.nameIs("speed") {
                self = .speed
            } else if xml.nameIs("course") {
                self = .course
            } else {
                return nil
            }
        } else if xml.namespaceIs(Self.garminV1) || xml.namespaceIs(Self.garminV2) {
            if xml.nameIs("speed") {
                self = .speed
            } else if xml.nameIs("course") {
                self = .course
            } else {
                return nil
            }
        } else if childOfPoint {
            if xml.nameIs("ele") {
                self = .elevation
            } else if xml.nameIs("time") {
                self = .time
            } else if xml.nameIs("speed") {
                self = .speed
            } else if xml.nameIs("course") {
                self = .course
            } else {
                return nil
            }
        } else {
            return nil
        }
    }
}

private let gpxDefaultSource = "track"

/// One `trkpt`, `rtept` or `wpt` being read.
private struct GPXPoint {
    let depth: Int
    var fix: Fix
    var hasTime = false

    init(_ xml: XMLPullReader, depth: Int) throws(ImportError) {
        self.depth = depth
        guard let lat = xml.attribute("lat"), let latitude = XMLValues.decimal(lat[...]) else {
            throw xml.error("<\(xml.name)> without a number in its lat attribute")
        }
        guard let lon = xml.attribute("lon"), let longitude = XMLValues.decimal(lon[...]) else {
            throw xml.error("<\(xml.name)> without a number in its lon attribute")
        }
        fix = Fix(
            latitude: latitude, longitude: longitude, accuracyMeters: nil,
            source: gpxDefaultSource, recordedAtMicros: 0)
    }

    var item: ImportItem { hasTime ? .fix(fix) : .notAFix(kind: "point_without_time") }

    mutating func set(_ field: GPXField, _ value: ArraySlice<UInt8>, _ xml: XMLPullReader) throws(ImportError)
    {
        func number(_ what: String) throws(ImportError) -> Double {
            guard let number = XMLValues.decimal(value) else {
                throw xml.error("\(what) is not a number: '\(String(decoding: value, as: UTF8.self))'")
            }
            return number
        }
        switch field {
        case .elevation: fix.altitudeMeters = try number("<ele>")
        case .speed: fix.speedMetersPerSecond = try number("<speed>")
        case .course: fix.headingDegrees = try number("<course>")
        case .accuracy: fix.accuracyMeters = try number("<findmy:accuracy>")
        case .time:
            guard case .micros(let micros) = XMLValues.time(value) else {
                throw xml.error("<time> is not a date and time: '\(String(decoding: value, as: UTF8.self))'")
            }
            fix.recordedAtMicros = micros
            hasTime = true
        case .battery:
            guard let percent = XMLValues.integer(value, max: 100) else {
                throw xml.error("<findmy:battery> is not a percentage 0 to 100")
            }
            fix.batteryPercent = UInt8(percent)
        case .charging:
            guard let charging = XMLValues.boolean(value) else {
                throw xml.error("<findmy:charging> is not true or false")
            }
            fix.isCharging = charging
        case .source:
            guard !value.isEmpty else { throw xml.error("<findmy:source> is empty") }
            fix.source = String(decoding: value, as: UTF8.self)
        }
    }
}
