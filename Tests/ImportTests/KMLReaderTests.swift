import Events
import Import
import Testing

@Suite struct KMLReaderTests {
    static func read(_ name: String) throws -> (items: [ImportItem], error: ImportError?) {
        var reader = KMLReader(try FileByteSource(path: ImportFixtures.path("kml/" + name)))
        return ImportFixtures.readAll(&reader)
    }

    static func kmlFix(
        _ latitude: Double, _ longitude: Double, at micros: Int64, altitude: Double? = nil,
        source: String = "track"
    ) -> ImportItem {
        .fix(
            Fix(
                latitude: latitude, longitude: longitude, accuracyMeters: nil, altitudeMeters: altitude,
                source: source, recordedAtMicros: micros))
    }

    @Test func aTrackPairsItsWhensWithItsCoordsInOrderAndKeepsOnlyAbsoluteAltitudes() throws {
        let (items, error) = try Self.read("track.kml")
        #expect(error == nil)
        #expect(
            items == [
                Self.kmlFix(52.52, 13.405, at: 1_714_557_600_000_000),
                Self.kmlFix(52.521, 13.406, at: 1_714_557_605_000_000),
                Self.kmlFix(52.522, 13.407, at: 1_714_557_610_000_000),
                Self.kmlFix(40.4168, -3.7038, at: 1_714_640_400_000_000, altitude: 667),
                .notAFix(kind: "date_without_time"),
            ])
    }

    @Test func placemarksGiveVisitsAndTimedPointsAndCountNamesAddressesAndUntimedShapes() throws {
        let (items, error) = try Self.read("placemarks.kml")
        #expect(error == nil)
        #expect(
            items == [
                Self.kmlFix(51.5074, -0.1278, at: 1_561_971_600_000_000, source: "visit"),
                .notAFix(kind: "place_name"),
                .notAFix(kind: "address"),
                .notAFix(kind: "line_without_time"),
                Self.kmlFix(48.8566, 2.3522, at: 1_561_982_400_000_000, altitude: 35),
                .notAFix(kind: "point_without_time"),
            ])
    }

    @Test func aFileReadOneByteAtATimeGivesTheSameItems() throws {
        for name in ["track.kml", "placemarks.kml"] {
            var reader = KMLReader(ImportFixtures.OneByteAtATime(try ImportFixtures.bytes("kml/" + name)))
            let oneByte = ImportFixtures.readAll(&reader)
            #expect(oneByte.items == (try Self.read(name)).items, "\(name)")
            #expect(oneByte.error == nil)
        }
    }

    @Test func aTrackWithMoreWhensThanCoordsIsAnErrorNamingTheLineItStartsOn() throws {
        let (items, error) = try Self.read("uneven-track.kml")
        #expect(items == [Self.kmlFix(52.52, 13.405, at: 1_714_557_600_000_000)])
        let found = try #require(error)
        #expect(found == ImportError("a track with 1 <when> more than its <gx:coord>", line: 4))
    }

    @Test func aTrackHoldsWhensWaitingForTheirCoordsUpToItsLimit() throws {
        let whens = (0..<3).map { "<when>2024-05-01T10:00:0\($0)Z</when>\n" }.joined()
        let coords = (0..<3).map { "<gx:coord>13.40\($0) 52.52 0</gx:coord>\n" }.joined()
        let document = """
            <kml xmlns="http://www.opengis.net/kml/2.2" xmlns:gx="http://www.google.com/kml/ext/2.2">
            <gx:Track>
            \(whens)\(coords)</gx:Track></kml>
            """
        var held = KMLReader(MemoryByteSource(Array(document.utf8)), trackPendingMax: 3)
        #expect(ImportFixtures.fixes(ImportFixtures.readAll(&held).items).count == 3)
        var refused = KMLReader(MemoryByteSource(Array(document.utf8)), trackPendingMax: 2)
        let (items, error) = ImportFixtures.readAll(&refused)
        #expect(items.isEmpty)
        #expect(error == ImportError("a track with more than 2 <when> before their <gx:coord>", line: 5))
        #expect(KMLReader<MemoryByteSource>.trackPendingMaxDefault == 1_000_000)
    }

    @Test func aCoordinateThatIsNoNumberIsAnErrorNamingItsLine() throws {
        let (items, error) = try Self.read("bad-coordinate.kml")
        #expect(items.isEmpty)
        #expect(error?.message == "<coordinates> is not a longitude and latitude: 'thirteen,52.52'")
        #expect(error?.line == 5)
    }

    @Test func aWhenThatIsNoTimeIsAnErrorNamingItsLine() throws {
        let (_, error) = try Self.read("bad-time.kml")
        #expect(error?.message == "<when> is not a date and time: 'yesterday'")
        #expect(error?.line == 4)
    }

    @Test func aTruncatedFileIsAnErrorAfterTheFixesBeforeIt() throws {
        let (items, error) = try Self.read("truncated.kml")
        #expect(items.count == 1)
        let found = try #require(error)
        #expect(found.message.hasPrefix("malformed XML: "), "\(found)")
        #expect(found.line == 8)
    }

    @Test func aFileThatIsNotKMLSaysSo() {
        let reader = KMLReader(MemoryByteSource(Array("<gpx/>".utf8)))
        #expect(throws: ImportError("not KML: the root element is <gpx>, not <kml>", line: 1)) {
            _ = try reader.next()
        }
    }
}
