import Events
import Import
import Testing

@Suite struct ArchiveTests {
    static func archive(_ name: String, limits: ArchiveLimits = ArchiveLimits()) throws -> ZipArchive<
        FileByteSource
    > {
        try ZipArchive(try FileByteSource(path: ImportFixtures.path(name)), limits: limits)
    }

    /// The entry's bytes, read a buffer of `bufferBytes` at a time.
    static func contents(_ entry: inout ArchiveEntry, bufferBytes: Int = 4096) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: bufferBytes)
        var bytes: [UInt8] = []
        while true {
            let count = try buffer.withUnsafeMutableBytes { try entry.read(into: $0) }
            if count == 0 { return bytes }
            bytes += buffer[..<count]
        }
    }

    @Test func aTakeoutZipsFilesAreListedWithTheirSizesAndReadInOrderWithoutItsDirectories() throws {
        let archive = try Self.archive("zip/takeout.zip")
        var seen: [(String, Int64?, String)] = []
        while var entry = try archive.nextEntry() {
            seen.append(
                (entry.name, entry.declaredSize, String(decoding: try Self.contents(&entry), as: UTF8.self)))
        }
        #expect(
            seen.map(\.0) == [
                "Takeout/archive_browser.html", "Takeout/Location History/Records.json",
                "Takeout/Location History/Semantic Location History/2019/2019_JULY.json",
            ])
        #expect(seen.map(\.1) == [34, 128, 24])
        #expect(seen.map { Int64($0.2.utf8.count) } == [34, 128, 24])
        #expect(seen[1].2.hasPrefix("{\"locations\": [{\"latitudeE7\": 525200000"))
        #expect(seen[2].2 == "{\"timelineObjects\": []}\n")
    }

    @Test func anEntryNotReadIsSkippedAndAnEntryPassedIsNoLongerReadable() throws {
        let archive = try Self.archive("zip/takeout.zip")
        var first = try #require(try archive.nextEntry())
        _ = try #require(try archive.nextEntry())
        var third = try #require(try archive.nextEntry())
        #expect(
            String(decoding: try Self.contents(&third, bufferBytes: 1), as: UTF8.self)
                == "{\"timelineObjects\": []}\n")
        #expect(throws: ImportError.self) { _ = try Self.contents(&first) }
        #expect(try archive.nextEntry() == nil)
    }

    @Test func aBombIsRefusedByItsInflationRatio() throws {
        let archive = try Self.archive("zip/bomb.zip")
        var entry = try #require(try archive.nextEntry())
        #expect(entry.declaredSize == 20 << 20)
        let error = try #require(throws: ImportError.self) {
            _ = try Self.contents(&entry, bufferBytes: 64 << 10)
        }
        #expect(error.message.contains("the archive's entry bomb.gpx inflates"), "\(error)")
        #expect(error.message.contains("(at most 100): a zip bomb?"), "\(error)")
        let refusedAt = try #require(error.byteOffset)
        #expect(refusedAt > ArchiveLimits.ratioCheckedAfterBytesDefault)
        #expect(refusedAt <= ArchiveLimits.ratioCheckedAfterBytesDefault + (64 << 10))
    }

    @Test func anEntryDeclaringMoreThanTheLimitIsRefusedBeforeItsFirstByte() throws {
        let archive = try Self.archive("zip/bomb.zip", limits: ArchiveLimits(entryInflatedBytesMax: 1 << 20))
        var entry = try #require(try archive.nextEntry())
        #expect(
            throws: ImportError(
                "the archive's entry bomb.gpx declares 20971520 bytes; it is not read (ArchiveLimits)",
                byteOffset: 0)
        ) { _ = try Self.contents(&entry) }
    }

    @Test func anEntryInflatingBeyondTheLimitIsRefusedThere() throws {
        // The ratio is not checked here: the limit on bytes alone stops the entry.
        let limits = ArchiveLimits(entryInflatedBytesMax: 100, ratioCheckedAfterBytes: Int64.max)
        let archive = try Self.archive("zip/takeout.zip", limits: limits)
        _ = try archive.nextEntry()
        var records = try #require(try archive.nextEntry())
        #expect(records.declaredSize == 128)
        let error = try #require(throws: ImportError.self) { _ = try Self.contents(&records, bufferBytes: 1) }
        #expect(error.message.contains("declares 128 bytes"))
    }

    @Test func aFileThatIsNotAZipIsAnError() throws {
        let error = try #require(throws: ImportError.self) {
            let archive = try Self.archive("zip/not-a-zip.zip")
            _ = try archive.nextEntry()
        }
        #expect(error == ImportError("cannot open the archive: Unrecognized archive format"))
    }

    @Test func aKMZIsReadFromItsFirstKMLEntry() throws {
        var kmz = KMZReader(try FileByteSource(path: ImportFixtures.path("kmz/track.kmz")))
        let (items, error) = ImportFixtures.readAll(&kmz)
        #expect(error == nil)
        #expect(kmz.documentName == "doc.kml")
        var kml = KMLReader(try FileByteSource(path: ImportFixtures.path("kml/track.kml")))
        #expect(items == ImportFixtures.readAll(&kml).items)
        #expect(items.count == 5)
    }

    @Test func aKMZWithoutKMLOrCutShortIsAnError() throws {
        var empty = KMZReader(try FileByteSource(path: ImportFixtures.path("kmz/no-kml.kmz")))
        #expect(ImportFixtures.readAll(&empty).error == ImportError("the KMZ holds no .kml file"))
        var truncated = KMZReader(try FileByteSource(path: ImportFixtures.path("kmz/truncated.kmz")))
        let (items, error) = ImportFixtures.readAll(&truncated)
        #expect(items.isEmpty)
        #expect(error?.message.hasPrefix("cannot inflate doc.kml: ") == true, "\(String(describing: error))")
    }
}
