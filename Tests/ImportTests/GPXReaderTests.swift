import Events
import Foundation
import Import
import Testing

@Suite struct GPXReaderTests {
    static func read(_ name: String) throws -> (items: [ImportItem], error: ImportError?) {
        var reader = GPXReader(try FileByteSource(path: ImportFixtures.path("gpx/" + name)))
        return ImportFixtures.readAll(&reader)
    }

    static func gpxFix(
        _ latitude: Double, _ longitude: Double, at micros: Int64, altitude: Double? = nil,
        speed: Double? = nil, heading: Double? = nil
    ) -> ImportItem {
        .fix(
            Fix(
                latitude: latitude, longitude: longitude, accuracyMeters: nil, altitudeMeters: altitude,
                speedMetersPerSecond: speed, headingDegrees: heading, source: "track",
                recordedAtMicros: micros)
        )
    }

    @Test func everySegmentOfATrackIsReadInOrderWithGarminSpeedAndCourseAndNoAccuracyFromHdop() throws {
        let (items, error) = try Self.read("track-1.1.gpx")
        #expect(error == nil)
        #expect(
            items == [
                Self.gpxFix(52.52, 13.405, at: 1_709_280_000_000_000, altitude: 34.5),
                Self.gpxFix(
                    52.5205, 13.406, at: 1_709_280_010_250_000, altitude: 35, speed: 1.4, heading: 45.5),
                Self.gpxFix(-33.8688, 151.2093, at: 1_709_278_200_000_000),
                .notAFix(kind: "point_without_time"),
            ])
    }

    @Test func gpx10SpeedAndCourseAreReadAndATimeWithoutAZoneIsUTC() throws {
        let (items, error) = try Self.read("track-1.0.gpx")
        #expect(error == nil)
        #expect(
            items == [
                Self.gpxFix(
                    48.8584, 2.2945, at: 1_275_386_400_000_000, altitude: 35, speed: 2.5, heading: 270),
                Self.gpxFix(48.859, 2.293, at: 1_275_386_405_000_000),
            ])
    }

    @Test func waypointsAndRoutePointsWithATimeAreFixes() throws {
        let (items, error) = try Self.read("routes-waypoints.gpx")
        #expect(error == nil)
        #expect(
            items == [
                Self.gpxFix(51.5007, -0.1246, at: 1_703_430_000_000_000, altitude: 12),
                .notAFix(kind: "point_without_time"),
                Self.gpxFix(51.5014, -0.1419, at: 1_703_433_600_000_000),
                Self.gpxFix(51.5079, -0.0877, at: 1_703_435_400_000_000),
            ])
    }

    @Test func findmysExtensionGivesAccuracyBatteryChargingAndSource() throws {
        let (items, error) = try Self.read("findmy-extension.gpx")
        #expect(error == nil)
        #expect(
            items == [
                .fix(
                    Fix(
                        latitude: 40.7128, longitude: -74.006, accuracyMeters: 12.5, altitudeMeters: 10.5,
                        speedMetersPerSecond: 3.25, headingDegrees: 180, batteryPercent: 87, isCharging: true,
                        source: "significant", recordedAtMicros: 1_735_787_045_123_456)),
                .fix(
                    Fix(
                        latitude: 40.713, longitude: -74.007, accuracyMeters: nil, isCharging: false,
                        source: "visit", recordedAtMicros: 1_735_787_100_000_000)),
            ])
        #expect(String(describing: GPXExtension.namespace) == "https://findmy.invalid/gpx/1")
    }

    @Test func aFileReadOneByteAtATimeGivesTheSameItems() throws {
        for name in ["track-1.1.gpx", "track-1.0.gpx", "routes-waypoints.gpx", "findmy-extension.gpx"] {
            var reader = GPXReader(ImportFixtures.OneByteAtATime(try ImportFixtures.bytes("gpx/" + name)))
            let oneByte = ImportFixtures.readAll(&reader)
            let whole = try Self.read(name)
            #expect(oneByte.items == whole.items, "\(name)")
            #expect(oneByte.error == nil)
        }
    }

    /// Every prefix of a file: either an error, or (only once the root element has closed) every
    /// item; the items before an error are always the first items of the whole file.
    @Test func everyTruncationIsAnErrorOrTheWholeFile() throws {
        for name in ["track-1.1.gpx", "findmy-extension.gpx"] {
            let bytes = try ImportFixtures.bytes("gpx/" + name)
            var whole = GPXReader(MemoryByteSource(bytes))
            let expected = ImportFixtures.readAll(&whole).items
            let rootEnd = Array("</gpx>".utf8)
            let complete =
                try #require(
                    (0...(bytes.count - rootEnd.count)).first {
                        Array(bytes[$0..<$0 + rootEnd.count]) == rootEnd
                    })
                + rootEnd.count
            for length in 0..<bytes.count {
                var reader = GPXReader(MemoryByteSource(Array(bytes[..<length])))
                let (items, error) = ImportFixtures.readAll(&reader)
                #expect(Array(expected.prefix(items.count)) == items, "\(name) cut at \(length)")
                if length < complete {
                    #expect(error != nil, "\(name) cut at \(length)")
                } else {
                    #expect(error == nil && items == expected, "\(name) cut at \(length)")
                }
            }
        }
    }

    @Test func aTruncatedFileIsAnErrorAfterThePointsBeforeIt() throws {
        let (items, error) = try Self.read("truncated.gpx")
        #expect(ImportFixtures.fixes(items).count == 2)
        let found = try #require(error)
        #expect(found.message.hasPrefix("malformed XML: "))
        #expect(found.line == 6)
        #expect(found.byteOffset != nil)
    }

    @Test func anUnclosedTagIsAnErrorNamingItsLine() throws {
        let (_, error) = try Self.read("unclosed-tag.gpx")
        let found = try #require(error)
        #expect(found.message.contains("time"), "\(found)")
        #expect(found.line == 5)
    }

    @Test func anImpossibleTimeIsAnErrorNamingItsLineAndValue() throws {
        let (items, error) = try Self.read("bad-time.gpx")
        #expect(ImportFixtures.fixes(items).count == 1)
        let found = try #require(error)
        #expect(found.message == "<time> is not a date and time: '2024-02-30T08:01:00Z'")
        #expect(found.line == 5)
    }

    @Test func aLatitudeThatIsNoNumberIsAnError() throws {
        let (items, error) = try Self.read("bad-latitude.gpx")
        #expect(items.count == 1)
        #expect(error?.message == "<wpt> without a number in its lat attribute")
        #expect(error?.line == 4)
    }

    @Test func aValueOfFindmysExtensionOutOfItsRangeIsAnErrorNamingItsLine() {
        let document = """
            <gpx xmlns="http://www.topografix.com/GPX/1/1" xmlns:findmy="https://findmy.invalid/gpx/1">
            <wpt lat="1" lon="2"><time>2024-01-01T00:00:00Z</time>
            <extensions><findmy:battery>120</findmy:battery></extensions></wpt></gpx>
            """
        var reader = GPXReader(MemoryByteSource(Array(document.utf8)))
        #expect(
            ImportFixtures.readAll(&reader).error
                == ImportError("<findmy:battery> is not a percentage 0 to 100", line: 3))
    }

    @Test func aFileThatIsNotGPXSaysSo() {
        let reader = GPXReader(MemoryByteSource(Array("<kml><Placemark/></kml>".utf8)))
        #expect(throws: ImportError("not GPX: the root element is <kml>, not <gpx>", line: 1)) {
            _ = try reader.next()
        }
    }

    @Test func anEmptyFileIsAnError() {
        let reader = GPXReader(MemoryByteSource([]))
        #expect(throws: ImportError("the file is empty")) { _ = try reader.next() }
    }

    @Test func anErrorOfTheSourceIsTheErrorOfTheReader() {
        struct Failing: ByteSource {
            mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
                throw ImportError("the disk is gone")
            }
        }
        let reader = GPXReader(Failing())
        #expect(throws: ImportError("the disk is gone")) { _ = try reader.next() }
    }
}
