import Events
import Import
import Testing

@Suite struct GeoJSONReaderTests {
    @Test func pointFeaturesWithATimeAreFixes() throws {
        let items = try readAll(
            GeoJSONReader(try FileByteSource(path: fixturePath("geojson/history.geojson"))))
        #expect(
            fixes(items) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: 8, altitudeMeters: 41,
                    speedMetersPerSecond: 1.5, headingDegrees: 90, batteryPercent: 80, source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 0, 0)),
                Fix(
                    latitude: 52.52, longitude: 13.38, accuracyMeters: nil, altitudeMeters: 39.5,
                    source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 5, 0)),
                Fix(
                    latitude: 52.53, longitude: 13.39, accuracyMeters: nil, source: "gps",
                    recordedAtMicros: micros(2023, 6, 1, 12, 10, 0)),
            ])
        #expect(notAFixCounts(items) == ["not_a_point": 1, "point_without_time": 1])
    }

    @Test func overlandsFileIsReadAsTheLiveClientReadsIt() throws {
        let items = try readAll(GeoJSONReader(try FileByteSource(path: fixturePath("geojson/overland.json"))))
        #expect(
            fixes(items) == [
                Fix(
                    latitude: 37.3318, longitude: -122.030581, accuracyMeters: 30, altitudeMeters: nil,
                    speedMetersPerSecond: 4, batteryPercent: 89, isCharging: true, source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 0, 0)),
                Fix(
                    latitude: 37.332, longitude: -122.031, accuracyMeters: 10, batteryPercent: 50,
                    isCharging: false,
                    source: "track", recordedAtMicros: micros(2023, 6, 1, 12, 1, 0)),
                Fix(
                    latitude: 37.333, longitude: -122.032, accuracyMeters: 50, source: "visit",
                    recordedAtMicros: micros(2023, 6, 1, 12, 5, 0)),
            ])
        #expect(notAFixCounts(items) == ["app_event": 1])
    }

    @Test func aDuplicateKeyFailsAtTheSecondOne() throws {
        let bytes = try fixtureBytes("geojson/duplicate-key.geojson")
        let error = readError(GeoJSONReader(PieceByteSource(bytes: bytes, piece: 3)))
        let first = offset(of: "\"timestamp\"", in: bytes)
        let second = first + 1 + offset(of: "\"timestamp\"", in: Array(bytes[(first + 1)...]))
        #expect(error?.byteOffset == Int64(second))
        #expect(error?.message == "not valid JSON: duplicate key \"timestamp\" in object")
    }
}

@Suite struct CSVReaderTests {
    @Test func rowsAreFixesByTheHeadersNames() throws {
        let items = try readAll(CSVReader(try FileByteSource(path: fixturePath("csv/history.csv"))))
        #expect(
            fixes(items) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: 8, altitudeMeters: 41,
                    speedMetersPerSecond: 1.5, headingDegrees: 90, batteryPercent: 80, source: "gps",
                    recordedAtMicros: micros(2023, 6, 1, 12, 0, 0)),
                Fix(
                    latitude: 52.52, longitude: 13.38, accuracyMeters: nil, altitudeMeters: 39.5,
                    source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 1, 0)),
                Fix(
                    latitude: 52.53, longitude: 13.39, accuracyMeters: 5, source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 10, 0)),
                Fix(
                    latitude: 52.54, longitude: 13.40, accuracyMeters: nil, source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 11, 0)),
            ])
        #expect(notAFixCounts(items) == ["incomplete_row": 1])
    }

    @Test func semicolonsQuotesZonesAndDecimalCommasAreRead() throws {
        let semicolon = try readAll(CSVReader(try FileByteSource(path: fixturePath("csv/semicolon.csv"))))
        #expect(
            fixes(semicolon) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: nil, source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 10, 0, 0)),
                Fix(
                    latitude: 52.52, longitude: 13.38, accuracyMeters: nil, source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 10, 5, 0, 250_000)),
            ])
        let decimalComma = try readAll(
            CSVReader(try FileByteSource(path: fixturePath("csv/semicolon-decimal-comma.csv"))))
        #expect(
            fixes(decimalComma) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: nil, altitudeMeters: 41,
                    source: "track",
                    recordedAtMicros: micros(2023, 6, 1, 12, 0, 0))
            ])
    }

    @Test func aCellThatCannotBeReadIsAnErrorNamingItsLine() throws {
        let badTime = readError(CSVReader(try FileByteSource(path: fixturePath("csv/bad-time.csv"))))
        #expect(badTime?.line == 3)
        #expect(badTime?.byteOffset == 52)
        #expect(
            badTime?.message
                == "time \"yesterday\" is neither an RFC 3339 time nor epoch seconds or milliseconds")
        let shortRow = readError(CSVReader(try FileByteSource(path: fixturePath("csv/short-row.csv"))))
        #expect(shortRow == ImportError("this row has 2 fields, the header names 3", byteOffset: 52, line: 3))
        let noHeader = readError(CSVReader(MemoryByteSource(Array("a,b,c\n1,2,3\n".utf8))))
        #expect(noHeader?.line == 1)
    }

    @Test func theItemsAreTheSameWhateverPiecesTheFileArrivesIn() throws {
        let bytes = try fixtureBytes("csv/history.csv")
        let whole = try readAll(CSVReader(MemoryByteSource(bytes)))
        #expect(try readAll(CSVReader(PieceByteSource(bytes: bytes, piece: 1))) == whole)
    }
}

@Suite struct OwnTracksRecorderTests {
    @Test func locationLinesAreFixesAndOtherPayloadsAreCountedByType() throws {
        let items = try readAll(
            OwnTracksRecorderReader(
                try FileByteSource(path: fixturePath("owntracks-recorder/store/rec/alice/phone/2024-05.rec")))
        )
        #expect(
            fixes(items) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: 12, altitudeMeters: 41,
                    speedMetersPerSecond: 10, headingDegrees: 90, batteryPercent: 81, isCharging: true,
                    source: "manual", recordedAtMicros: micros(2024, 5, 1, 10, 0, 0)),
                Fix(
                    latitude: 52.52, longitude: 13.38, accuracyMeters: nil, batteryPercent: 80,
                    isCharging: false,
                    source: "automatic", recordedAtMicros: micros(2024, 5, 1, 10, 5, 0)),
                // No tst: the time the Recorder received it.
                Fix(
                    latitude: 52.53, longitude: 13.39, accuracyMeters: nil, headingDegrees: 0,
                    source: "automatic",
                    recordedAtMicros: micros(2024, 5, 1, 10, 9, 0)),
            ])
        #expect(notAFixCounts(items) == ["transition": 1, "non_json_payload": 1, "lwt": 1])
    }

    @Test func aDamagedLineIsAnErrorNamingTheLineAndTheByte() throws {
        let bytes = try fixtureBytes("owntracks-recorder/damaged.rec")
        let error = readError(OwnTracksRecorderReader(MemoryByteSource(bytes)))
        #expect(error?.line == 2)
        #expect(error?.byteOffset == Int64(offset(of: ",,", in: bytes) + 1))
        let notALine = readError(
            OwnTracksRecorderReader(
                try FileByteSource(path: fixturePath("owntracks-recorder/not-a-rec-line.rec"))))
        #expect(notALine?.line == 1)
    }

    @Test func theStoreIsListedByUserDeviceAndMonth() throws {
        let root = fixturePath("owntracks-recorder/store")
        let expected = [
            RecorderStoreFile(user: "alice", device: "phone", path: root + "/rec/alice/phone/2024-04.rec"),
            RecorderStoreFile(user: "alice", device: "phone", path: root + "/rec/alice/phone/2024-05.rec"),
            RecorderStoreFile(user: "bob", device: "tablet", path: root + "/rec/bob/tablet/2024-05.rec"),
        ]
        #expect(try RecorderStore.files(root: root) == expected)
        #expect(try RecorderStore.files(root: root + "/rec/").map(\.device) == ["phone", "phone", "tablet"])
        #expect(throws: ImportError.self) { try RecorderStore.files(root: fixturePath("csv")) }
    }
}

@Suite struct DetectionTests {
    @Test(arguments: [
        ("google-records/Records.json", ImportFormat.googleRecords),
        ("google-semantic/2019_MAY.json", .googleSemantic),
        ("google-timeline/Timeline.json", .googleTimeline),
        ("google-timeline/location-history.json", .googleTimeline),
        ("geojson/history.geojson", .geojson),
        ("geojson/overland.json", .geojson),
        ("csv/history.csv", .csv),
        ("csv/semicolon.csv", .csv),
        ("owntracks-recorder/store/rec/alice/phone/2024-05.rec", .owntracksRecorder),
    ])
    func eachFixtureIsDetectedFromItsContentWhateverItsName(path: String, format: ImportFormat) throws {
        let bytes = try fixtureBytes(path)
        #expect(ImportFormat.detect(prefix: bytes, fileName: nil) == format)
        #expect(ImportFormat.detect(prefix: bytes, fileName: "upload.bin") == format)
        // A prefix that ends mid-document still decides.
        #expect(ImportFormat.detect(prefix: Array(bytes.prefix(200)), fileName: nil) == format)
    }

    @Test func xmlAndArchivesAreToldApart() {
        let gpx = Array("\u{FEFF}<?xml version=\"1.0\"?>\n<!-- by hand -->\n<gpx version=\"1.1\">".utf8)
        #expect(ImportFormat.detect(prefix: gpx, fileName: "track.xml") == .gpx)
        #expect(
            ImportFormat.detect(prefix: Array("<?xml version=\"1.0\"?><kml xmlns=\"x\">".utf8), fileName: nil)
                == .kml)
        var zip: [UInt8] = [0x50, 0x4B, 0x03, 0x04] + [UInt8](repeating: 0, count: 22) + [7, 0, 0, 0]
        zip += Array("doc.kml".utf8)
        #expect(ImportFormat.detect(prefix: zip, fileName: nil) == .kmz)
        #expect(ImportFormat.detect(prefix: [0x50, 0x4B, 0x03, 0x04], fileName: "takeout-2024.zip") == .zip)
        #expect(ImportFormat.detect(prefix: [0x50, 0x4B, 0x03, 0x04], fileName: "places.KMZ") == .kmz)
    }

    @Test func theNameOnlyBreaksATieTheContentLeaves() {
        #expect(
            ImportFormat.detect(prefix: Array("{\"locations\": []}".utf8), fileName: "Records.json")
                == .googleRecords)
        #expect(ImportFormat.detect(prefix: Array("{\"locations\": []}".utf8), fileName: "x.json") == nil)
        #expect(ImportFormat.detect(prefix: Array("<root/>".utf8), fileName: "a.gpx") == .gpx)
        // A name that does not fit the content decides nothing.
        #expect(ImportFormat.detect(prefix: Array("{\"a\": 1}".utf8), fileName: "a.gpx") == nil)
        #expect(ImportFormat.detect(prefix: [], fileName: "a.csv") == nil)
        #expect(ImportFormat.detect(prefix: Array("hello\n".utf8), fileName: nil) == nil)
    }
}
