import Events

/// KML 2.2 and 2.3 (OGC 07-147r2, 12-007r2) with Google's `gx:` extensions: the timed positions of
/// a file, in its order.
///
/// Read: every `gx:Track` (KML 2.3's `Track` too), its `<when>` paired in order with its
/// `<gx:coord>` ("lon lat alt"); and every Placemark with a `<Point>` and a time, `TimeStamp/when`
/// (source `KMLReader.defaultSource`) or `TimeSpan/begin` (source "visit": the place where someone
/// stayed over the span, as Google's Timeline KML writes a visit). Altitude is kept only under
/// `<altitudeMode>absolute</altitudeMode>`: under the default, clampToGround, KML itself ignores it.
/// Counted, not stored: a Point without a time (`point_without_time`), a line or polygon without
/// times per position (`line_without_time`), a `<when>` that is only a date (`date_without_time`),
/// and a place's `<name>` and `<address>` (`place_name`, `address`). KML has no accuracy: nil.
///
/// A track's `<when>`s may all come before its `<gx:coord>`s (as Google Earth writes them): those
/// waiting for their coordinate are held, up to `trackPendingMaxDefault` (or the `trackPendingMax`
/// given).
public final class KMLReader<Source: ByteSource>: FixReader {
    public static var defaultSource: String { kmlDefaultSource }
    /// The `<when>`s (or coordinates) of one track held while waiting for their partners: at most
    /// 1 M, 16 MB of times or 32 MB of coordinates.
    public static var trackPendingMaxDefault: Int { 1_000_000 }

    private var source: Source?
    private var xml: XMLPullReader?
    private var state: KMLState

    public init(_ source: Source) {
        self.source = source
        state = KMLState(trackPendingMax: Self.trackPendingMaxDefault)
    }

    public init(_ source: Source, trackPendingMax: Int) {
        self.source = source
        state = KMLState(trackPendingMax: trackPendingMax)
    }

    public func next() throws(ImportError) -> ImportItem? {
        let xml = try opened()
        if let item = state.takePending() { return item }
        while let event = try xml.next() {
            switch event {
            case .start:
                try state.start(xml)
            case .text:
                try state.text(xml)
            case .end:
                if let item = try state.end(xml) { return item }
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
}

let kmlDefaultSource = "track"

struct KMLCoordinate {
    var longitude: Double
    var latitude: Double
    var altitude: Double?

    /// "lon,lat[,alt]" (a Point's `<coordinates>`) or "lon lat [alt]" (`<gx:coord>`).
    init?(_ text: ArraySlice<UInt8>) {
        let separators: Set<UInt8> = [UInt8(ascii: ","), 0x20, 0x09, 0x0A, 0x0D]
        let parts = text.split(whereSeparator: { separators.contains($0) })
        guard parts.count == 2 || parts.count == 3, let longitude = XMLValues.decimal(parts[0]),
            let latitude = XMLValues.decimal(parts[1])
        else { return nil }
        self.longitude = longitude
        self.latitude = latitude
        if parts.count == 3 {
            guard let altitude = XMLValues.decimal(parts[2]) else { return nil }
            self.altitude = altitude
        }
    }

    func fix(at micros: Int64, source: String, altitudeAbsolute: Bool) -> Fix {
        Fix(
            latitude: latitude, longitude: longitude, accuracyMeters: nil,
            altitudeMeters: altitudeAbsolute ? altitude : nil, source: source, recordedAtMicros: micros)
    }
}

/// A queue that releases its storage as it drains.
struct KMLQueue<Element> {
    private var elements: [Element] = []
    private var head = 0

    var count: Int { elements.count - head }

    mutating func append(_ element: Element) { elements.append(element) }

    mutating func removeFirst() -> Element? {
        guard head < elements.count else { return nil }
        let element = elements[head]
        head += 1
        if head == elements.count {
            elements.removeAll(keepingCapacity: elements.count <= 1024)
            head = 0
        } else if head >= 4096 && head * 2 >= elements.count {
            elements.removeFirst(head)
            head = 0
        }
        return element
    }
}

struct KMLTrack {
    let depth: Int
    var times = KMLQueue<XMLValues.Time>()
    var coordinates = KMLQueue<KMLCoordinate>()
    var altitudeAbsolute = false

    /// The next pair of a time and a coordinate, once both have arrived.
    mutating func pair() -> ImportItem? {
        guard times.count > 0, coordinates.count > 0, let time = times.removeFirst(),
            let coordinate = coordinates.removeFirst()
        else { return nil }
        guard case .micros(let micros) = time else { return .notAFix(kind: "date_without_time") }
        return .fix(coordinate.fix(at: micros, source: kmlDefaultSource, altitudeAbsolute: altitudeAbsolute))
    }
}

struct KMLPlacemark {
    let depth: Int
    var time: XMLValues.Time?
    var isSpan = false
    var coordinate: KMLCoordinate?
    var altitudeAbsolute = false
    var hasLine = false
    var hasTrack = false
    var hasName = false
    var hasAddress = false
    /// The depth of the Placemark's own TimeStamp, TimeSpan or Point being read, else 0.
    var timeStampDepth = 0
    var timeSpanDepth = 0
    var pointDepth = 0

    var items: [ImportItem] {
        guard let coordinate else {
            return hasLine && !hasTrack ? [.notAFix(kind: "line_without_time")] : []
        }
        var items: [ImportItem]
        switch time {
        case .micros(let micros):
            let source = isSpan ? "visit" : kmlDefaultSource
            items = [.fix(coordinate.fix(at: micros, source: source, altitudeAbsolute: altitudeAbsolute))]
        case .dateOnly: items = [.notAFix(kind: "date_without_time")]
        case nil: items = [.notAFix(kind: "point_without_time")]
        }
        if hasName { items.append(.notAFix(kind: "place_name")) }
        if hasAddress { items.append(.notAFix(kind: "address")) }
        return items
    }
}
