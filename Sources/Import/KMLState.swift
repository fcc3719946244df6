/// What a KML reader has seen so far: the track and Placemark it is inside, the value it is
/// gathering, and the items found but not yet handed out.
struct KMLState {
    enum Field {
        case trackWhen, trackCoordinate, stampWhen, spanBegin, pointCoordinates, altitudeMode
    }

    let trackPendingMax: Int
    private var depth = 0
    private var track: KMLTrack?
    private var placemark: KMLPlacemark?
    private var field: Field?
    private var fieldDepth = 0
    private var text = XMLFieldText()
    private var pending = KMLQueue<ImportItem>()

    init(trackPendingMax: Int) { self.trackPendingMax = trackPendingMax }

    mutating func takePending() -> ImportItem? { pending.removeFirst() }

    mutating func start(_ xml: XMLPullReader) throws(ImportError) {
        depth += 1
        if depth == 1 {
            guard xml.nameIs("kml") else {
                throw xml.error("not KML: the root element is <\(xml.name)>, not <kml>")
            }
            return
        }
        if xml.nameIs("Placemark") {
            placemark = KMLPlacemark(depth: depth)
        } else if xml.nameIs("Track") {
            track = KMLTrack(depth: depth)
            placemark?.hasTrack = true
        } else if let found = fieldStarting(xml) {
            field = found
            fieldDepth = depth
            text.removeAll()
        } else if var placemark {
            let child = depth == placemark.depth + 1
            if child && xml.nameIs("TimeStamp") {
                placemark.timeStampDepth = depth
            } else if child && xml.nameIs("TimeSpan") {
                placemark.timeSpanDepth = depth
            } else if xml.nameIs("Point") {
                placemark.pointDepth = depth
            } else if xml.nameIs("LineString") || xml.nameIs("LinearRing") || xml.nameIs("Polygon") {
                placemark.hasLine = true
            } else if child && xml.nameIs("name") {
                placemark.hasName = true
            } else if child && xml.nameIs("address") {
                placemark.hasAddress = true
            }
            self.placemark = placemark
        }
    }

    private func fieldStarting(_ xml: XMLPullReader) -> Field? {
        guard field == nil else { return nil }
        if let track, depth == track.depth + 1 {
            if xml.nameIs("when") { return .trackWhen }
            if xml.nameIs("coord") { return .trackCoordinate }
            if xml.nameIs("altitudeMode") { return .altitudeMode }
            return nil
        }
        guard let placemark else { return nil }
        if depth == placemark.timeStampDepth + 1 && xml.nameIs("when") { return .stampWhen }
        if depth == placemark.timeSpanDepth + 1 && xml.nameIs("begin") { return .spanBegin }
        if depth == placemark.pointDepth + 1 && placemark.coordinate == nil {
            if xml.nameIs("coordinates") { return .pointCoordinates }
            if xml.nameIs("altitudeMode") { return .altitudeMode }
        }
        return nil
    }

    mutating func text(_ xml: XMLPullReader) throws(ImportError) {
        if field != nil, !text.append(xml.text) {
            throw xml.error("a value longer than \(XMLFieldText.bytesMax) bytes")
        }
    }

    mutating func end(_ xml: XMLPullReader) throws(ImportError) -> ImportItem? {
        defer { depth -= 1 }
        if let field, depth == fieldDepth {
            self.field = nil
            return try set(field, text.trimmed, xml)
        }
        if let finished = track, depth == finished.depth {
            track = nil
            // The end tag's node is the track's, so the error names the line the track starts on.
            if finished.times.count > 0 {
                throw xml.error("a track with \(finished.times.count) <when> more than its <gx:coord>")
            }
            if finished.coordinates.count > 0 {
                throw xml.error("a track with \(finished.coordinates.count) <gx:coord> more than its <when>")
            }
        } else if var open = placemark {
            if depth == open.depth {
                placemark = nil
                for item in open.items { pending.append(item) }
                return pending.removeFirst()
            }
            if depth == open.timeStampDepth { open.timeStampDepth = 0 }
            if depth == open.timeSpanDepth { open.timeSpanDepth = 0 }
            if depth == open.pointDepth { open.pointDepth = 0 }
            placemark = open
        }
        return nil
    }

    private mutating func set(_ field: Field, _ value: ArraySlice<UInt8>, _ xml: XMLPullReader)
        throws(ImportError)
        -> ImportItem?
    {
        let shown = String(decoding: value.prefix(100), as: UTF8.self)
        switch field {
        case .trackWhen, .stampWhen, .spanBegin:
            guard let time = XMLValues.time(value) else {
                throw xml.error("<\(xml.name)> is not a date and time: '\(shown)'")
            }
            if field == .trackWhen {
                guard track!.times.count < trackPendingMax else {
                    throw xml.error(
                        "a track with more than \(trackPendingMax) <when> before their <gx:coord>")
                }
                track!.times.append(time)
                return track!.pair()
            }
            placemark!.time = time
            placemark!.isSpan = field == .spanBegin
        case .trackCoordinate, .pointCoordinates:
            guard let coordinate = KMLCoordinate(value) else {
                throw xml.error("<\(xml.name)> is not a longitude and latitude: '\(shown)'")
            }
            if field == .trackCoordinate {
                guard track!.coordinates.count < trackPendingMax else {
                    throw xml.error(
                        "a track with more than \(trackPendingMax) <gx:coord> before their <when>")
                }
                track!.coordinates.append(coordinate)
                return track!.pair()
            }
            placemark!.coordinate = coordinate
        case .altitudeMode:
            let absolute = String(decoding: value, as: UTF8.self) == "absolute"
            if track != nil {
                track!.altitudeAbsolute = absolute
            } else {
                placemark!.altitudeAbsolute = absolute
            }
        }
        return nil
    }
}
