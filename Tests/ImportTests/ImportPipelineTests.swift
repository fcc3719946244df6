import Crypto
import Events
import Import
import Testing

/// The pipeline's pure parts: one reader per detected format, a Takeout zip entry by entry, the
/// Recorder user map, the chunker's derived batch ids and the summary.
@Suite struct ImportPipelineTests {
    static let fixturesByFormat: [(String, ImportFormat)] = [
        ("google-records/Records.json", .googleRecords), ("google-semantic/2019_MAY.json", .googleSemantic),
        ("google-timeline/Timeline.json", .googleTimeline), ("gpx/track-1.1.gpx", .gpx),
        ("kml/track.kml", .kml), ("kmz/track.kmz", .kmz), ("geojson/history.geojson", .geojson),
        ("csv/history.csv", .csv),
        ("owntracks-recorder/store/rec/alice/phone/2024-05.rec", .owntracksRecorder),
        ("zip/takeout.zip", .zip),
    ]

    @Test(arguments: fixturesByFormat)
    func eachFormatIsDetectedFromAStreamAndReadByItsReaderWithTheBytesDetectionTook(
        fixture: String, expected: ImportFormat
    ) throws {
        let bytes = try fixtureBytes(fixture)
        // Pieces of 7 bytes: detection must gather its prefix over many reads.
        let (format, source) = try ImportFormat.detect(
            source: PieceByteSource(bytes: bytes, piece: 7),
            fileName: fixture.split(separator: "/").last.map(String.init))
        #expect(format == expected)
        let items = try readAll(expected.reader(source: source))
        let direct = try readAll(expected.reader(source: MemoryByteSource(bytes)))
        #expect(items == direct)
        #expect(!fixes(items).isEmpty)
    }

    @Test func aTakeoutZipIsReadEntryByEntryAndEntriesOfNoKnownFormatAreCountedNotErrors() throws {
        let reader = ZipImportReader(try FileByteSource(path: fixturePath("zip/takeout.zip")))
        let items = try readAll(reader)
        let records = try readAll(GoogleRecordsReader(MemoryByteSource(try recordsEntryBytes())))
        // archive_browser.html is of no format; Records.json gives its fixes; the semantic month is empty.
        #expect(notAFixCounts(items) == [ZipImportReader<FileByteSource>.unknownEntryKind: 1])
        #expect(fixes(items) == fixes(records))
        #expect(fixes(items).count == 1)
        #expect(reader.entriesRead == 2)
        #expect(reader.entriesOfUnknownFormat == 1)
    }

    private func recordsEntryBytes() throws -> [UInt8] {
        let archive = try ZipArchive(try FileByteSource(path: fixturePath("zip/takeout.zip")))
        while var entry = try archive.nextEntry() {
            guard entry.name.hasSuffix("Records.json") else { continue }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = try buffer.withUnsafeMutableBytes { try entry.read(into: $0) }
                if count == 0 { return bytes }
                bytes += buffer[..<count]
            }
        }
        Issue.record("no Records.json in the fixture")
        return []
    }

    @Test func everyEntryOfAKnownFormatIsReadByItsOwnReaderInTheArchivesOrder() throws {
        let reader = ZipImportReader(try FileByteSource(path: fixturePath("zip/takeout-mixed.zip")))
        let items = try readAll(reader)
        var expected: [ImportItem] = [.notAFix(kind: "entry_of_unknown_format")]  // Settings.json
        expected += try readAll(GoogleRecordsReader(MemoryByteSource(try recordsEntryBytes())))
        for (file, format) in [
            ("google-semantic/2019_MAY.json", ImportFormat.googleSemantic),
            ("google-timeline/Timeline.json", .googleTimeline),
            ("gpx/track-1.1.gpx", .gpx), ("kml/track.kml", .kml), ("csv/history.csv", .csv),
            ("geojson/history.geojson", .geojson),
        ] {
            expected += try readAll(format.reader(source: MemoryByteSource(try fixtureBytes(file))))
        }
        expected.append(.notAFix(kind: "entry_of_unknown_format"))  // icon.png
        expected.append(.notAFix(kind: "entry_of_unknown_format"))  // track.kmz: archives are not nested
        #expect(items == expected)
        #expect(reader.entriesRead == 7)
        #expect(reader.entriesOfUnknownFormat == 3)
    }

    @Test func anErrorInsideAZipsEntryNamesTheEntryAndTheByte() throws {
        let reader = ZipImportReader(try FileByteSource(path: fixturePath("zip/takeout-damaged.zip")))
        let error = try #require(readError(reader))
        #expect(
            error.message.hasPrefix("in the archive's entry Takeout/Location History/Records.json: "),
            "\(error)")
        let direct = try #require(
            readError(
                GoogleRecordsReader(MemoryByteSource(try fixtureBytes("google-records/truncated.json")))))
        #expect(error.byteOffset == direct.byteOffset)
        #expect(reader.entryFormat == .googleRecords)
    }

    // MARK: OwnTracks Recorder stores

    @Test func theUserMapParsesPairsAndRefusesWhatItCannotMeanOneWay() throws {
        let map = try RecorderUserMap(pairs: ["alice=ann", "bob=ann", "alice=ann"], defaultUser: "me")
        #expect(map.findmyUserOf == ["alice": "ann", "bob": "ann"])
        #expect(map.findmyUser(recorderUser: "carol") == "me")
        for bad in ["alice", "=ann", "alice=", ""] {
            #expect(throws: ImportError.self, "\(bad)") {
                try RecorderUserMap(pairs: [bad], defaultUser: "me")
            }
        }
        let twice = #expect(throws: ImportError.self) {
            try RecorderUserMap(pairs: ["alice=ann", "alice=bea"], defaultUser: "me")
        }
        #expect(twice?.message.contains("names alice twice (ann and bea)") == true)
    }

    @Test func aStoresFilesGoToOneFindmyDevicePerUserAndDeviceNameWithTheirMonthsInOrder() throws {
        let files = try RecorderStore.files(root: fixturePath("owntracks-recorder/store"))
        let unmapped = try RecorderUserMap(pairs: [], defaultUser: "me").targets(files)
        #expect(unmapped.map { "\($0.findmyUser)/\($0.deviceName)" } == ["me/phone", "me/tablet"])
        let mapped = try RecorderUserMap(pairs: ["bob=bea"], defaultUser: "me").targets(files)
        #expect(mapped.map { "\($0.findmyUser)/\($0.deviceName)" } == ["me/phone", "bea/tablet"])
        #expect(
            mapped[0].files.map { $0.path.split(separator: "/").last! } == ["2024-04.rec", "2024-05.rec"])
        // Two Recorder users' devices of one name, mapped to one findmy user, are one device.
        let merged = try RecorderUserMap(pairs: [], defaultUser: "me").targets([
            RecorderStoreFile(user: "a", device: "phone", path: "/a/phone/1.rec"),
            RecorderStoreFile(user: "b", device: "phone", path: "/b/phone/1.rec"),
        ])
        #expect(merged.count == 1 && merged[0].files.count == 2)
    }
}
