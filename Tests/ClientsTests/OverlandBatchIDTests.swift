import Clients
import Events
import Ingest
import Testing

/// Overland's batch id is derived from the decoded batch (`AppBatch.derivedBatchID`), not from the
/// body: a byte-identical resend, or one that differs only in what findmy does not read, is the
/// same batch; any change of a fix is another.
@Suite struct OverlandBatchIDTests {
    let limits = IngestLimits()

    /// Every kind of element: a full location, one whose values all mean "unknown", a pause action
    /// (skipped), a visit, a feature without properties (refused); `current` and `trip` beside.
    static func body(battery: String = "0.57", wifi: String = "home", current: String = "12") -> [UInt8] {
        let locations = [
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.4050123,52.5200456]},"properties":{"timestamp":"2026-12-01T08:00:00Z","horizontal_accuracy":5,"altitude":34.5,"vertical_accuracy":3,"speed":1.25,"course":90,"battery_level":"#
                + battery + #","battery_state":"charging","wifi":""# + wifi + #"","motion":["walking"]}}"#,
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.406,52.521]},"properties":{"timestamp":"2026-12-01T08:01:00Z","horizontal_accuracy":0,"speed":-1,"course":-1,"battery_level":-1,"battery_state":"unknown"}}"#,
            #"{"type":"Feature","properties":{"action":"paused_location_updates","timestamp":"2026-12-01T08:02:00Z"}}"#,
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.41,52.53]},"properties":{"action":"visit","arrival_date":"2026-12-01T07:30:00Z","departure_date":null,"timestamp":"2026-12-01T08:05:00Z","horizontal_accuracy":65,"battery_level":0.5}}"#,
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[1,2]}}"#,
        ]
        let current =
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.42,52.54]},"properties":{"timestamp":"2026-12-01T08:"#
            + current + #":00Z"}}"#
        return Array(
            (#"{"locations":["# + locations.joined(separator: ",") + #"],"current":"# + current
                + #","trip":{"mode":"walking","distance":"# + current + "}}").utf8)
    }

    func id(_ body: [UInt8], device: UInt64 = 7) throws -> UUID128 {
        try OverlandDecoder.decode(body, limits: limits).derivedBatchID(
            deviceID: device, clientProtocol: .overland)
    }

    /// The ids are stored with every batch and compared with a resend's, so a change in how they
    /// are computed turns a retry after an upgrade into a second batch (folded only by the fix-level
    /// rule): these values were computed apart from this code, with Python's hashlib and struct over
    /// the encoding `AppBatch.encodedForBatchID` documents (the script is in the commit message).
    @Test func theIDsOfFixedRequestsStayTheSameAcrossReleases() throws {
        let decoded = try OverlandDecoder.decode(Self.body(), limits: limits)
        #expect(decoded.fixes.map(\.index) == [0, 1, 3])
        #expect(decoded.rejections.map(\.index) == [4])
        #expect(try id(Self.body()).description == "c0a0cc15-44b2-49e3-8196-a21c3ec61ee3")
        let one = Array(
            #"{"locations":[{"type":"Feature","geometry":{"type":"Point","coordinates":[13.4,52.5]},"properties":{"timestamp":"2026-12-01T08:00:00Z","horizontal_accuracy":10}}]}"#
                .utf8)
        #expect(
            try id(one, device: 0x0123_4567_89AB_CDEF).description == "3ca3f2e4-edd1-4005-b497-70eb64e31b50")
        #expect(
            try id(Array(#"{"locations":[5]}"#.utf8)).description == "27c855e9-aecf-45a7-a2f1-214f0ebca182")
    }

    @Test func aResendIsTheSameBatchEvenWhereItDiffersInWhatIsNotRead() throws {
        let first = try id(Self.body())
        #expect(try id(Self.body()) == first)
        // Overland's `current` and `trip` describe the phone when it sends; `wifi` is not kept.
        #expect(try id(Self.body(wifi: "office", current: "30")) == first)
        // Whitespace and member order are not content either.
        let spaced = Self.body().flatMap { $0 == UInt8(ascii: ",") ? [$0, 0x20, 0x0A] : [$0] }
        #expect(try id(spaced) == first)
        #expect(OverlandDecoder.decodeDirect(spaced, limits: limits) != nil)
    }

    @Test func anyOtherFixAnotherDeviceOrAnotherProtocolIsAnotherBatch() throws {
        let first = try id(Self.body())
        // 0.571 and 0.57 are both stored as 57 %: the id still tells the requests apart.
        #expect(try id(Self.body(battery: "0.571")) != first)
        #expect(try id(Self.body(battery: "0.58")) != first)
        #expect(try id(Self.body(), device: 8) != first)
        let batch = try OverlandDecoder.decode(Self.body(), limits: limits)
        #expect(batch.derivedBatchID(deviceID: 7, clientProtocol: .osmand) != first)
        var moved = batch
        moved.fixes[2].index = 2
        #expect(moved.derivedBatchID(deviceID: 7, clientProtocol: .overland) != first)
        var refused = batch
        refused.rejections[0] = AppRejection(index: 4, .missingField, "another detail")
        #expect(refused.derivedBatchID(deviceID: 7, clientProtocol: .overland) != first)
        #expect(first != .zero)
        // A version-4-shaped UUID: its text form parses back.
        #expect(UUID128(first.description) == first)
        #expect(first.description.dropFirst(14).first == "4")
    }

    /// The tree decoder and the direct reader decode the same batch, so a body gets the same id
    /// whichever of them read it.
    @Test func bothDecodersGiveTheSameID() throws {
        let body = Self.body()
        let direct = try #require(OverlandDecoder.decodeDirect(body, limits: limits))
        let tree = try OverlandDecoder.decodeTree(body, limits: limits)
        #expect(
            direct.derivedBatchID(deviceID: 7, clientProtocol: .overland)
                == tree.derivedBatchID(deviceID: 7, clientProtocol: .overland))
    }

    /// The encoding names every member of `Fix` (AppBatch.encodedForBatchID): a member added to
    /// `Fix` and not to the encoding would let two requests differing only in it share an id.
    @Test func theEncodingCoversEveryMemberOfFix() {
        let fix = Fix(latitude: 0, longitude: 0, accuracyMeters: nil, source: "track", recordedAtMicros: 0)
        #expect(
            Mirror(reflecting: fix).children.compactMap(\.label) == [
                "latitude", "longitude", "accuracyMeters", "altitudeMeters", "speedMetersPerSecond",
                "headingDegrees", "batteryPercent", "isCharging", "source", "recordedAtMicros",
                "clockSuspect",
            ])
    }
}
