import Events
import Import
import Testing

/// Every truncation and many changed bytes of the JSON fixtures: a reader fails with an error
/// inside the file, or reads what is there; it never traps, and a file cut short never passes.
@Suite struct DamageTests {
    static let jsonFixtures = [
        "google-records/Records.json", "google-semantic/2019_MAY.json", "google-timeline/Timeline.json",
        "google-timeline/location-history.json", "geojson/history.geojson", "geojson/overland.json",
    ]

    static func read(_ path: String, _ bytes: [UInt8]) -> Result<[ImportItem], ImportError> {
        let source = MemoryByteSource(bytes)
        return Result { () throws(ImportError) in
            switch path.split(separator: "/").first {
            case "google-records": try readAll(GoogleRecordsReader(source))
            case "google-semantic": try readAll(GoogleSemanticReader(source))
            case "google-timeline": try readAll(GoogleTimelineReader(source))
            default: try readAll(GeoJSONReader(source))
            }
        }
    }

    @Test(arguments: jsonFixtures) func everyTruncationFailsInsideTheFile(path: String) throws {
        let bytes = try fixtureBytes(path)
        let documentEnd = bytes.lastIndex(of: UInt8(ascii: "}")) ?? bytes.lastIndex(of: UInt8(ascii: "]"))!
        for length in 0...documentEnd {
            switch Self.read(path, Array(bytes[..<length])) {
            case .success: Issue.record("\(path) cut to \(length) bytes was read as whole")
            case .failure(let error):
                #expect(
                    error.byteOffset.map { $0 >= 0 && $0 <= Int64(length) } == true,
                    "\(path) at \(length): \(error)")
            }
        }
    }

    @Test(arguments: jsonFixtures) func aChangedByteIsReadOrRefusedWithAPlace(path: String) throws {
        let bytes = try fixtureBytes(path)
        for position in bytes.indices {
            for replacement: UInt8 in [UInt8(ascii: "\""), UInt8(ascii: "}"), UInt8(ascii: "9"), 0x00, 0xC3] {
                var changed = bytes
                changed[position] = replacement
                if case .failure(let error) = Self.read(path, changed) {
                    #expect(
                        error.byteOffset.map { $0 >= 0 && $0 <= Int64(bytes.count) } == true,
                        "\(path): \(error)")
                }
            }
        }
    }
}
