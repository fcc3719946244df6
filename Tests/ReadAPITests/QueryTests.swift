import Crypto
import Identity
import Testing

@testable import ReadAPI

/// The read API's query parsing and cursors, without a server.
@Suite struct QueryTests {
    func parse(_ query: [(String, String)], kind: HistoryCursor.Kind = .locations, deviceID: UInt64 = 7)
        throws(APIError) -> HistoryQuery
    {
        try HistoryQuery.parse(
            query.map { (name: $0.0, value: $0.1) }, kind: kind, deviceID: deviceID, limitDefault: 1_000,
            limitMax: 10_000)
    }

    func error(_ query: [(String, String)], kind: HistoryCursor.Kind = .locations, deviceID: UInt64 = 7)
        -> APIError?
    {
        do {
            _ = try parse(query, kind: kind, deviceID: deviceID)
            return nil
        } catch {
            return error
        }
    }

    @Test func aCursorRoundTripsEveryFieldAtItsExtremes() throws {
        for cursor in [
            HistoryCursor(
                kind: .arrivals, deviceID: 7, micros: 1_777_000_000_123_456, logOffset: 42, fixIndex: 3),
            HistoryCursor(
                kind: .arrivals, deviceID: UInt64.max, micros: -62_135_596_800_000_000, logOffset: 0),
            HistoryCursor(
                kind: .deviceTransitions, deviceID: 0, micros: 253_402_300_799_999_999,
                logOffset: UInt64(Int64.max), fixIndex: UInt32.max),
        ] {
            let text = cursor.encoded
            #expect(
                text.utf8.allSatisfy {
                    $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "=")
                })
            #expect(try HistoryCursor.decode(text, kind: cursor.kind, deviceID: cursor.deviceID) == cursor)
        }
    }

    /// The history's cursor carries its index's keyset (recorded_at, latitude, longitude) bit for
    /// bit: a negative zero, the smallest subnormal and a NaN are positions too.
    @Test func aLocationsCursorRoundTripsItsKeysetBitForBit() throws {
        for (device, micros, latitude, longitude) in [
            (UInt64(7), Int64(1_777_000_000_123_456), 52.520_008_1, 13.404_954_2),
            (UInt64.max, -62_135_596_800_000_000, -90.0, -0.0),
            (0, 253_402_300_799_999_999, Double.leastNonzeroMagnitude, Double.nan),
        ] {
            let cursor = LocationsCursor(
                deviceID: device,
                keyset: FixKeyset(recordedAtMicros: micros, latitude: latitude, longitude: longitude))
            let text = cursor.encoded
            #expect(
                text.utf8.allSatisfy {
                    $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "=")
                })
            let decoded = try LocationsCursor.decode(text, deviceID: device)
            #expect(decoded == cursor)
            #expect(decoded.keyset.longitude.bitPattern == longitude.bitPattern)
            #expect(try parse([("cursor", text)], deviceID: device).locationsCursor == cursor)
        }
    }

    @Test func aCursorOfAnotherDeviceOrListingOrGarbageIsA400() throws {
        let cursor = LocationsCursor(
            deviceID: 7, keyset: FixKeyset(recordedAtMicros: 1_000, latitude: 52.5, longitude: 13.4))
        let good = cursor.encoded
        #expect(try parse([("cursor", good)]).locationsCursor == cursor)
        let arrivals = HistoryCursor(kind: .arrivals, deviceID: 7, micros: 1_000, logOffset: 5).encoded
        #expect(try parse([("cursor", arrivals)], kind: .arrivals).cursor?.logOffset == 5)
        var truncated = good
        truncated.removeLast()
        var bytes = Base64URL.decode(good)!
        bytes[0] = 3  // an unknown version
        var outOfRange = Base64URL.decode(good)!
        for index in 10..<18 { outOfRange[index] = 0x7f }  // recorded_at past year 9999
        for (text, kind, device) in [
            (good, HistoryCursor.Kind.locations, UInt64(8)), (good, .arrivals, 7), ("", .locations, 7),
            ("not a cursor", .locations, 7), (truncated, .locations, 7), (good + "A", .locations, 7),
            (Base64URL.encode(bytes), .locations, 7), (Base64URL.encode(outOfRange), .locations, 7),
            (arrivals, .locations, 7), (arrivals, .geofenceTransitions, 7),
        ] {
            let refused = error([("cursor", text)], kind: kind, deviceID: device)
            #expect(refused?.status == 400 && refused?.code == .invalidCursor, "\(text) as \(kind)")
        }
    }

    /// A history cursor of the layout before the history was read in its index's order (version 1:
    /// recorded_at, log offset, fix index) cannot say which fixes of its instant were sent: refused
    /// with a 400 that says to start again, not mistaken for garbage.
    @Test func aLocationsCursorOfTheEarlierOrderIsRefusedWithAWayOn() throws {
        let earlier = HistoryCursor(
            kind: .locations, deviceID: 7, micros: 1_777_000_000_123_456, logOffset: 42, fixIndex: 3)
        let refused = try #require(error([("cursor", earlier.encoded)]))
        #expect(refused.status == 400 && refused.code == .invalidCursor)
        #expect(refused.message.contains("earlier version") && refused.message.contains("without cursor"))
        let garbage = try #require(error([("cursor", "not a cursor")]))
        #expect(!garbage.message.contains("earlier version"))
    }

    @Test func fromAndToAreRFC3339AndFromMustNotBeAfterTo() throws {
        let query = try parse([("from", "2026-05-01T09:00:00Z"), ("to", "2026-05-01T18:00:00+02:00")])
        #expect(query.fromMicros == 1_777_626_000_000_000)
        #expect(query.toMicros == 1_777_651_200_000_000)
        #expect(query.limit == 1_000 && query.cursor == nil && query.locationsCursor == nil)
        let empty = try parse([])
        #expect(
            empty.fromMicros == nil && empty.toMicros == nil && empty.limit == 1_000 && empty.cursor == nil)
        // Equal bounds are an empty range, not an error.
        #expect(try parse([("from", "2026-05-01T09:00:00Z"), ("to", "2026-05-01T09:00:00Z")]).limit == 1_000)

        for bad in [
            [("from", "yesterday")], [("to", "2026-05-01")], [("from", "2026-05-01T09:00:00 02:00")],
            [("from", "2026-02-30T00:00:00Z")],
            [("from", "2026-05-02T00:00:00Z"), ("to", "2026-05-01T00:00:00Z")],
        ] {
            let found = error(bad)
            #expect(found?.status == 400 && found?.code == .invalidRange, "\(bad)")
        }
        #expect(error([("from", "2026-05-01 09:00:00 02:00")])?.message.contains("%2B") == true)
    }

    @Test func limitIsAWholeNumberWithinTheMaximum() throws {
        #expect(try parse([("limit", "1")]).limit == 1)
        #expect(try parse([("limit", "10000")]).limit == 10_000)
        for bad in ["0", "-1", "10001", "ten", "", "1.5", "99999999999999999999"] {
            let found = error([("limit", bad)])
            #expect(found?.code == .invalidLimit, "\(bad)")
            #expect(found?.message.contains("1 to 10000") == true)
        }
    }

    @Test func unknownAndRepeatedParametersAreRefused() throws {
        #expect(error([("form", "2026-05-01T09:00:00Z")])?.code == .unknownParameter)
        #expect(error([("limit", "5"), ("limit", "6")])?.code == .unknownParameter)
        #expect(try parse([("after_offset", "12")]).limit == 1_000)
    }

    @Test func afterOffsetIsAWholeNumber() throws {
        #expect(try afterOffset([]) == nil)
        #expect(try afterOffset([(name: "after_offset", value: "0")]) == 0)
        #expect(try afterOffset([(name: "after_offset", value: "123456")]) == 123_456)
        for bad in ["-1", "x", "", "9223372036854775808"] {
            #expect(throws: APIError.self) { try afterOffset([(name: "after_offset", value: bad)]) }
        }
    }
}

/// The devices list keeps PostgreSQL's rows that are in the reader's scope: membership by binary
/// search in the scope's ascending ids.
@Test func scopeMembership() {
    let scope = ReadAccess.ReadScope(deviceIDs: [2, 3, 5, 8, 13, 1_000], sharedBy: [:])
    for id: UInt64 in [0, 1, 4, 6, 7, 9, 12, 14, 999, 1_001, .max] { #expect(!scope.contains(id), "\(id)") }
    for id: UInt64 in [2, 3, 5, 8, 13, 1_000] { #expect(scope.contains(id), "\(id)") }
    #expect(!ReadAccess.ReadScope(deviceIDs: [], sharedBy: [:]).contains(1))
}

/// The history route reads a COPY row as the packed `shown` alone (`ShownFix`), which its SQL
/// selects, and its SQL carries its values as literals with the parameters' placeholders gone
/// (COPY takes no parameters).
@Test func theCopyOfAPageSelectsWhatItsRowsAreReadAs() throws {
    #expect(ReadService.locationsCopyFieldCount == 1)
    let cursor = LocationsCursor(
        deviceID: 7,
        keyset: FixKeyset(recordedAtMicros: 1_700_000_000_123_456, latitude: 52.5, longitude: -0.0))
    let query = try HistoryQuery.parse(
        [("cursor", cursor.encoded), ("from", "2023-11-01T00:00:00Z")], kind: .locations, deviceID: 7,
        limitDefault: 100, limitMax: 1000)
    let sql = ReadService.locationsCopyQuery(deviceID: 7, query)
    #expect(sql.hasPrefix("SELECT l.shown\nFROM "))
    #expect(!sql.contains("$"))
    #expect(sql.contains("'2023-11-14 22:13:20.123456+00'::timestamptz"))
    #expect(sql.contains("'-0.0'::float8") && sql.contains("'52.5'::float8"))
    #expect(sql.contains("LIMIT '101'::bigint") && sql.contains("coalesce(NULL::timestamptz, 'infinity')"))
    let statement = ReadService.locationsStatement(deviceID: 7, query)
    #expect(statement.parameters.count == 7 && statement.sql.contains("LIMIT $4"))
}
