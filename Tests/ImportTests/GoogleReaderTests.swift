import Events
import Import
import Testing

@Suite struct GoogleRecordsTests {
    @Test func everyLocationIsReadWithItsFieldsAndActivitiesAreCounted() throws {
        let items = try readAll(
            GoogleRecordsReader(try FileByteSource(path: fixturePath("google-records/Records.json"))))
        #expect(
            items.map {
                if case .fix = $0 { "fix" } else if case .notAFix(let kind) = $0 { kind } else { "" }
            } == [
                "activity", "activity", "fix", "fix", "fix", "activity", "incomplete_location", "fix",
            ])
        #expect(
            fixes(items) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: 20, altitudeMeters: 41,
                    source: "wifi",
                    recordedAtMicros: micros(2019, 5, 1, 10, 0, 0, 123_000)),
                Fix(
                    latitude: 52.52, longitude: 13.38, accuracyMeters: 5, altitudeMeters: 38,
                    speedMetersPerSecond: 3,
                    headingDegrees: 270, source: "gps", recordedAtMicros: micros(2019, 5, 1, 10, 5, 0)),
                // A latitude that overflowed 32 bits on Google's side (4294967295 is -1), at its offset.
                Fix(
                    latitude: -0.0000001, longitude: 13.38, accuracyMeters: nil, source: "track",
                    recordedAtMicros: micros(2019, 5, 1, 8, 10, 0)),
                // Accuracy 0 is unknown.
                Fix(
                    latitude: 52.521, longitude: 13.381, accuracyMeters: nil, source: "track",
                    recordedAtMicros: micros(2019, 5, 1, 10, 30, 0)),
            ])
    }

    @Test func theItemsAreTheSameWhateverPiecesTheFileArrivesIn() throws {
        let bytes = try fixtureBytes("google-records/Records.json")
        let whole = try readAll(GoogleRecordsReader(MemoryByteSource(bytes)))
        for piece in [1, 2, 13] {
            #expect(try readAll(GoogleRecordsReader(PieceByteSource(bytes: bytes, piece: piece))) == whole)
        }
    }

    @Test func aTruncatedFileFailsAtItsEnd() throws {
        let bytes = try fixtureBytes("google-records/truncated.json")
        let error = readError(GoogleRecordsReader(MemoryByteSource(bytes)))
        #expect(error?.byteOffset == Int64(bytes.count))
        #expect(error?.message.hasPrefix("not valid JSON: unexpected end of input") == true)
    }

    @Test func aBrokenNumberFailsAtItsByte() throws {
        let bytes = try fixtureBytes("google-records/bad-number.json")
        let error = readError(GoogleRecordsReader(MemoryByteSource(bytes)))
        #expect(error?.byteOffset == Int64(offset(of: "52.5.1", in: bytes) + 4))
    }

    @Test func aFileOfAnotherShapeSaysWhatWasExpected() throws {
        let error = readError(GoogleRecordsReader(MemoryByteSource(Array("[1, 2]".utf8))))
        #expect(error == ImportError("expected a JSON object at the top of the file", byteOffset: 0))
        let notArray = readError(GoogleRecordsReader(MemoryByteSource(Array("{\"locations\": {}}".utf8))))
        #expect(notArray == ImportError("\"locations\" must be an array", byteOffset: 14))
        #expect(
            try readAll(
                GoogleRecordsReader(MemoryByteSource(Array("{\"other\": [1], \"locations\": []}".utf8))))
                == [])
    }
}

@Suite struct GoogleSemanticTests {
    @Test func visitsActivityEndpointsAndRawPathsAreFixesAndTheRestIsCounted() throws {
        let items = try readAll(
            GoogleSemanticReader(try FileByteSource(path: fixturePath("google-semantic/2019_MAY.json"))))
        #expect(
            fixes(items) == [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: nil, source: "activity",
                    recordedAtMicros: micros(2019, 5, 1, 8, 0, 0)),
                Fix(
                    latitude: 52.521, longitude: 13.386, accuracyMeters: 8, source: "track",
                    recordedAtMicros: micros(2019, 5, 1, 8, 10, 0)),
                Fix(
                    latitude: 52.526, longitude: 13.391, accuracyMeters: 12, source: "track",
                    recordedAtMicros: micros(2019, 5, 1, 8, 30, 0)),
                Fix(
                    latitude: 52.53, longitude: 13.4, accuracyMeters: nil, source: "activity",
                    recordedAtMicros: micros(2019, 5, 1, 8, 30, 0, 500_000)),
                Fix(
                    latitude: 52.53, longitude: 13.4, accuracyMeters: nil, source: "visit",
                    recordedAtMicros: micros(2019, 5, 1, 8, 30, 30, 500_000)),
                Fix(
                    latitude: 52.53005, longitude: 13.40005, accuracyMeters: nil, source: "visit",
                    recordedAtMicros: micros(2019, 5, 1, 9, 0, 0)),
            ])
        #expect(
            notAFixCounts(items) == [
                "activity": 1, "waypoint_without_time": 2, "place_name": 2, "address": 1,
            ])
    }

    @Test func aMissingCommaFailsAtTheByteWhereOneWasExpected() throws {
        let bytes = try fixtureBytes("google-semantic/missing-comma.json")
        let error = readError(GoogleSemanticReader(MemoryByteSource(bytes)))
        #expect(error?.byteOffset == Int64(offset(of: "}} {", in: bytes) + 3))
        #expect(error?.message == "not valid JSON: expected ',' or ']' after array element, found '{'")
    }
}

@Suite struct GoogleTimelineTests {
    static let segmentFixes = [
        Fix(
            latitude: 52.516317, longitude: 13.3777, accuracyMeters: nil, source: "track",
            recordedAtMicros: micros(2024, 3, 1, 7, 2, 0)),
        Fix(
            latitude: 52.52, longitude: 13.38, accuracyMeters: nil, source: "track",
            recordedAtMicros: micros(2024, 3, 1, 7, 4, 0)),
        Fix(
            latitude: 52.516317, longitude: 13.3777, accuracyMeters: nil, source: "activity",
            recordedAtMicros: micros(2024, 3, 1, 7, 0, 0)),
        Fix(
            latitude: 52.53, longitude: 13.4, accuracyMeters: nil, source: "activity",
            recordedAtMicros: micros(2024, 3, 1, 7, 30, 0)),
        Fix(
            latitude: 52.53, longitude: 13.4, accuracyMeters: nil, source: "visit",
            recordedAtMicros: micros(2024, 3, 1, 7, 30, 0)),
    ]

    @Test func theAndroidObjectShapeGivesSegmentsAndRawSignals() throws {
        let items = try readAll(
            GoogleTimelineReader(try FileByteSource(path: fixturePath("google-timeline/Timeline.json"))))
        #expect(
            fixes(items) == Self.segmentFixes + [
                Fix(
                    latitude: 52.516317, longitude: 13.3777, accuracyMeters: 13, altitudeMeters: 41.5,
                    speedMetersPerSecond: 0, source: "wifi", recordedAtMicros: micros(2024, 3, 1, 7, 1, 0)),
                Fix(
                    latitude: 52.517, longitude: 13.378, accuracyMeters: 5, source: "gps",
                    recordedAtMicros: micros(2024, 3, 1, 7, 3, 0)),
            ])
        #expect(notAFixCounts(items) == ["activity": 2, "place_type": 1, "wifi_scan": 1])
    }

    @Test func theIOSArrayShapeGivesTheSameSegments() throws {
        let items = try readAll(
            GoogleTimelineReader(
                try FileByteSource(path: fixturePath("google-timeline/location-history.json"))))
        #expect(fixes(items) == Self.segmentFixes)
        #expect(notAFixCounts(items) == ["activity": 1, "place_type": 1, "memory": 1])
    }

    @Test func aControlCharacterInAStringFailsAtItsByte() throws {
        let bytes = try fixtureBytes("google-timeline/control-character.json")
        let error = readError(GoogleTimelineReader(PieceByteSource(bytes: bytes, piece: 5)))
        #expect(error?.byteOffset == Int64(bytes.firstIndex(of: 0x01)!))
    }
}

func offset(of needle: String, in bytes: [UInt8]) -> Int {
    let pattern = Array(needle.utf8)
    for start in 0...(bytes.count - pattern.count)
    where Array(bytes[start..<start + pattern.count]) == pattern {
        return start
    }
    preconditionFailure("\(needle) is not in the fixture")
}
