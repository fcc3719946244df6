import Events
import Foundation
import Import
import Testing

/// Hostile XML: entities are never substituted and nothing outside the file is read.
@Suite struct XMLSafetyTests {
    /// A scratch directory holding a "secret" file that a hostile GPX names as an external entity.
    static func secretFile(_ content: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("findmy-xxe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("secret.txt").path
        try content.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func anExternalEntityIsNeverReadIntoAValue() throws {
        let secret = try Self.secretFile("2001-01-01T00:00:00Z")
        defer { try? FileManager.default.removeItem(atPath: (secret as NSString).deletingLastPathComponent) }
        let document = """
            <?xml version="1.0"?>
            <!DOCTYPE gpx [<!ENTITY secret SYSTEM "file://\(secret)">]>
            <gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1">
              <wpt lat="1" lon="2"><time>&secret;</time></wpt>
            </gpx>
            """
        var reader = GPXReader(MemoryByteSource(Array(document.utf8)))
        let (items, error) = ImportFixtures.readAll(&reader)
        #expect(items.isEmpty)
        #expect(error == ImportError("<time> is not a date and time: ''", line: 4))
    }

    @Test func anExternalDTDIsNotLoaded() throws {
        let secret = try Self.secretFile("<!ENTITY when \"2001-01-01T00:00:00Z\">")
        defer { try? FileManager.default.removeItem(atPath: (secret as NSString).deletingLastPathComponent) }
        let document = """
            <?xml version="1.0"?>
            <!DOCTYPE kml SYSTEM "file://\(secret)">
            <kml><Placemark><TimeStamp><when>&when;</when></TimeStamp>
            <Point><coordinates>2,1</coordinates></Point></Placemark></kml>
            """
        var reader = KMLReader(MemoryByteSource(Array(document.utf8)))
        let (items, error) = ImportFixtures.readAll(&reader)
        #expect(ImportFixtures.fixes(items).isEmpty)
        #expect(error == ImportError("<when> is not a date and time: ''", line: 3))
    }

    /// libxml2 checks a declared entity's expansion once, even unsubstituted, and refuses one
    /// that amplifies like this: the file is an error, read in a moment and small memory.
    @Test func aBillionLaughsIsRefused() throws {
        var reader = GPXReader(try FileByteSource(path: ImportFixtures.path("gpx/billion-laughs.gpx")))
        let (items, error) = ImportFixtures.readAll(&reader)
        #expect(items.isEmpty)
        #expect(error?.message == "malformed XML: Detected an entity reference loop")
    }

    /// Without a tree, libxml2 parses a declared entity again at every reference: a large entity
    /// referenced many times ("quadratic blowup") is refused once its references pass 10 MB.
    @Test func aQuadraticBlowupIsRefused() throws {
        let references = String(repeating: "&big;", count: 200)
        let document = """
            <?xml version="1.0"?>
            <!DOCTYPE gpx [<!ENTITY big "\(String(repeating: "x", count: 100_000))">]>
            <gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1">
              <wpt lat="1" lon="2"><name>\(references)</name></wpt>
            </gpx>
            """
        var reader = GPXReader(MemoryByteSource(Array(document.utf8)))
        let (items, error) = ImportFixtures.readAll(&reader)
        #expect(items.isEmpty)
        #expect(error?.message == "malformed XML: entity references that expand to more than 10000000 bytes")
        #expect(error?.line == 4)
    }

    /// A text is gathered whole before it is handed out, so one is bounded, as libxml2 bounds a text
    /// node.
    @Test func aTextOver10MBIsRefused() throws {
        let document = """
            <?xml version="1.0"?>
            <gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1">
              <wpt lat="1" lon="2"><name>\(String(repeating: "x", count: 10_000_001))</name></wpt>
            </gpx>
            """
        var reader = GPXReader(MemoryByteSource(Array(document.utf8)))
        let (items, error) = ImportFixtures.readAll(&reader)
        #expect(items.isEmpty)
        #expect(error?.message == "malformed XML: a text of more than 10000000 bytes")
    }

    /// An attribute's character and predefined entity references are resolved (libxml2 hands
    /// `&amp;` to SAX as `&#38;`).
    @Test func anAttributesReferencesAreResolved() throws {
        let document = """
            <?xml version="1.0"?>
            <gpx version="1.1" xmlns="http://www.topografix.com/GPX/1/1">
              <wpt lat="&#53;2.5" lon="&#x31;3"><time>2024-03-01T10:00:00Z</time></wpt>
              <wpt lat="1&amp;" lon="2"><time>2024-03-01T10:00:00Z</time></wpt>
            </gpx>
            """
        var reader = GPXReader(MemoryByteSource(Array(document.utf8)))
        let (items, error) = ImportFixtures.readAll(&reader)
        #expect(ImportFixtures.fixes(items).map(\.latitude) == [52.5])
        #expect(ImportFixtures.fixes(items).map(\.longitude) == [13])
        #expect(error == ImportError("<wpt> without a number in its lat attribute", line: 4))
    }
}
