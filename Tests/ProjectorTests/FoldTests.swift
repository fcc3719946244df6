import Events
import Projector
import Testing

@Suite struct LatestRuleTests {
    /// A fix at a place of its own (by offset and index), so that no two rows are the same fix.
    func row(recorded: Int64, offset: UInt64, index: Int = 0, suspect: Bool = false) -> LocationRow {
        LocationRow(
            deviceID: 1, logOffset: offset, fixIndex: index, receivedAtMicros: 0,
            fix: Fix(
                latitude: Double(offset) / 100, longitude: Double(index) / 100, accuracyMeters: 5,
                source: "significant",
                recordedAtMicros: recorded, clockSuspect: suspect))
    }

    @Test func laterRecordedAtWinsThenLaterPosition() {
        #expect(LatestRule.replaces(row(recorded: 2, offset: 1), row(recorded: 1, offset: 9)))
        #expect(!LatestRule.replaces(row(recorded: 1, offset: 9), row(recorded: 2, offset: 1)))
        #expect(LatestRule.replaces(row(recorded: 5, offset: 2), row(recorded: 5, offset: 1)))
        #expect(
            LatestRule.replaces(row(recorded: 5, offset: 2, index: 3), row(recorded: 5, offset: 2, index: 2)))
        #expect(!LatestRule.replaces(row(recorded: 5, offset: 2), row(recorded: 5, offset: 2)))
    }

    @Test func theSameFixArrivingAgainNeverReplacesIt() {
        let first = row(recorded: 5, offset: 1, suspect: true)
        var again = row(recorded: 5, offset: 7)
        again.fix.latitude = first.fix.latitude
        again.fix.longitude = first.fix.longitude
        // Later in the log, and even with a sound clock: still the same fix.
        #expect(!LatestRule.replaces(again, first))
        again.fix.latitude += 0.000_001
        #expect(LatestRule.replaces(again, first))
    }

    @Test func aSuspectClockNeverDisplacesASoundFixAndASoundFixAlwaysDisplacesASuspectOne() {
        let sound = row(recorded: 100, offset: 1)
        let suspectFuture = row(recorded: 9_999, offset: 2, suspect: true)
        #expect(!LatestRule.replaces(suspectFuture, sound))
        #expect(LatestRule.replaces(row(recorded: 50, offset: 3), suspectFuture))
        #expect(LatestRule.replaces(row(recorded: 10_000, offset: 4, suspect: true), suspectFuture))
    }
}

@Suite struct ProjectionBatchTests {
    func record(_ event: Event, offset: UInt64, received: Int64) -> LogRecord {
        var encoded = EventCodec.encode(event, receivedAtMicros: received)
        encoded.header.offset = offset
        return LogRecord(header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
    }

    @Test func foldsFixesBatchesAndRegistryChangesInLogOrder() throws {
        var batch = ProjectionBatch(firstOffset: 10)
        let user = UserCreated(
            userID: 1, name: "ada", role: .member, tokenHash: Array(repeating: 0, count: 32))
        let device = DeviceEnrolled(
            deviceID: 7, userID: 1, deviceUUID: UUID128.random(), name: "phone", platform: "ios", model: "x")
        let fixes = [
            Fix(latitude: 1, longitude: 1, accuracyMeters: 5, source: "significant", recordedAtMicros: 300),
            Fix(latitude: 2, longitude: 2, accuracyMeters: 5, source: "significant", recordedAtMicros: 100),
            Fix(
                latitude: 3, longitude: 3, accuracyMeters: 5, source: "significant", recordedAtMicros: 900,
                clockSuspect: true),
        ]
        try batch.add(record(.userCreated(user), offset: 10, received: 1))
        try batch.add(record(.deviceEnrolled(device), offset: 11, received: 2))
        let batchID = UUID128.random()
        try batch.add(
            record(
                .fixBatch(
                    FixBatch(
                        deviceID: 7, batchID: batchID, fixes: fixes,
                        rejections: [Rejection(index: 3, reason: "x")])),
                offset: 13, received: 50))
        try batch.add(
            record(.reportingChanged(ReportingChanged(deviceID: 7, paused: true)), offset: 14, received: 60))

        #expect(batch.nextOffset == 15)
        #expect(
            batch.registry == [
                .user(user, atMicros: 1), .device(device, atMicros: 2), .paused(deviceID: 7, true),
            ])
        #expect(batch.locations.map(\.fixIndex) == [0, 1, 2])
        #expect(batch.locations.allSatisfy { $0.logOffset == 13 && $0.receivedAtMicros == 50 })
        #expect(batch.latest[7]?.fix.recordedAtMicros == 300)
        #expect(batch.lastSeen == [7: 50])
        #expect(
            batch.batches == [
                BatchRow(
                    logOffset: 13, deviceID: 7, batchID: batchID, receivedAtMicros: 50, fixCount: 3,
                    rejectedCount: 1,
                    recordedMinMicros: 100, recordedMaxMicros: 900)
            ])
    }
}

/// A sealed batch holds its history rows in the history's index order (device, then time), sorted
/// in place: the store writes them as they are instead of sorting a copy. What the fold decided
/// stays: one row per fix (its first arrival), the same latest position.
@Suite struct SealTests {
    func record(_ event: Event, offset: UInt64, received: Int64) -> LogRecord {
        var encoded = EventCodec.encode(event, receivedAtMicros: received)
        encoded.header.offset = offset
        return LogRecord(header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
    }

    func fix(_ recorded: Int64, _ latitude: Double) -> Fix {
        Fix(
            latitude: latitude, longitude: 1, accuracyMeters: 5, source: "significant",
            recordedAtMicros: recorded)
    }

    @Test func sealingSortsTheRowsByDeviceAndTimeAndKeepsWhatTheFoldDecided() throws {
        var batch = ProjectionBatch(firstOffset: 0)
        // Devices 2 and 1 in turn, each batch newest first; device 1's second batch repeats a fix.
        let batches: [(UInt64, [Fix])] = [
            (2, [fix(40, 2.4), fix(30, 2.3)]), (1, [fix(20, 1.2), fix(10, 1.1)]),
            (2, [fix(60, 2.6), fix(50, 2.5)]), (1, [fix(20, 1.2), fix(15, 1.15)]),
        ]
        for (offset, (device, fixes)) in batches.enumerated() {
            try batch.add(
                record(
                    .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes)),
                    offset: UInt64(offset), received: 100 + Int64(offset)))
        }
        let latest = batch.latest
        batch.seal()
        #expect(batch.locations.map(\.deviceID) == [1, 1, 1, 2, 2, 2, 2])
        #expect(batch.locations.map(\.fix.recordedAtMicros) == [10, 15, 20, 30, 40, 50, 60])
        // The repeated fix is its first arrival's row (offset 1), not the second's.
        #expect(batch.locations[2].logOffset == 1)
        #expect(batch.latest == latest)
        #expect(batch.latest[1]?.fix.recordedAtMicros == 20 && batch.latest[2]?.fix.recordedAtMicros == 60)
        #expect(batch.nextOffset == 4 && batch.fixCount == 7)
    }

    /// A fix arriving again after another fix of the same time is not that device's latest: the
    /// later arrival of A does not displace C, which displaced A.
    @Test func aFixArrivingAgainNeverBecomesTheLatestThroughItsLaterArrival() throws {
        var batch = ProjectionBatch(firstOffset: 0)
        for (offset, latitude) in [1.2, 1.3, 1.2].enumerated() {
            try batch.add(
                record(
                    .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: [fix(20, latitude)])),
                    offset: UInt64(offset), received: 100))
        }
        batch.seal()
        #expect(batch.locations.map(\.logOffset) == [0, 1])
        #expect(batch.latest[1]?.logOffset == 1 && batch.latest[1]?.fix.latitude == 1.3)
    }

    /// Many fixes of one device and time, one of them again: one row each.
    @Test func manyFixesOfOneTimeKeepOneRowEach() throws {
        var batch = ProjectionBatch(firstOffset: 0)
        let fixes = (0..<100).map { fix(20, Double($0)) }
        try batch.add(
            record(
                .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: fixes)), offset: 0,
                received: 1))
        try batch.add(
            record(
                .fixBatch(
                    FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: [fix(20, 57), fix(20, 100)])),
                offset: 1, received: 2))
        batch.seal()
        #expect(batch.fixCount == 101)
        #expect(batch.locations.filter { $0.fix.latitude == 57 }.map(\.logOffset) == [0])
    }
}

/// The protocol of a batch reaches `device_batches`, from a whole record and from an envelope
/// whose payload the compactor removed (it is in the header); a place event projects nothing.
@Suite struct ProtocolFoldTests {
    @Test func theProtocolSurvivesTheEnvelopeAndUnknownAccuracyStaysUnknown() throws {
        let fix = Fix(
            latitude: 1, longitude: 2, accuracyMeters: nil, source: "automatic", recordedAtMicros: 500)
        let event = Event.fixBatch(
            FixBatch(deviceID: 7, batchID: UUID128.random(), fixes: [fix], clientProtocol: .owntracksHTTP))
        var whole = EventCodec.encode(event, receivedAtMicros: 900)
        whole.header.offset = 0
        var envelope = whole.header
        envelope.offset = 1
        envelope.flags |= LogFormat.recordFlagPayloadRemoved
        envelope.codec = Codec.none.rawValue
        envelope.uncompressedBytes = 0
        var place = EventCodec.encode(
            .regionTransition(
                RegionTransition(
                    deviceID: 7, clientProtocol: .owntracksHTTP, kind: .enter, recordedAtMicros: 600,
                    regionID: "",
                    regionName: "Home", trigger: "c", latitude: 1, longitude: 2, accuracyMeters: nil)),
            receivedAtMicros: 950)
        place.header.offset = 2
        var batch = ProjectionBatch(firstOffset: 0)
        try batch.add(
            LogRecord(header: whole.header, storedPayload: whole.payload, segmentPath: "", position: 0))
        try batch.add(LogRecord(header: envelope, storedPayload: [], segmentPath: "", position: 0))
        try batch.add(
            LogRecord(header: place.header, storedPayload: place.payload, segmentPath: "", position: 0))
        #expect(batch.batches.map(\.clientProtocol) == [.owntracksHTTP, .owntracksHTTP])
        #expect(batch.locations.count == 1)
        #expect(batch.locations.first?.fix.accuracyMeters == nil)
        #expect(batch.nextOffset == 3)
    }
}

@Suite struct CommandFoldTests {
    func record(_ event: Event, offset: UInt64, received: Int64) -> LogRecord {
        var encoded = EventCodec.encode(event, receivedAtMicros: received)
        encoded.header.offset = offset
        return LogRecord(header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
    }

    /// Command events become the batch's command changes in log order, with where and when they
    /// were stored; removing the device drops its changes of the same transaction.
    @Test func commandEventsAreFoldedInOrderAndRemovalDropsThem() throws {
        let kept = UUID128.random()
        let dropped = UUID128.random()
        let events: [Event] = [
            .commandRequested(
                CommandRequested(
                    commandID: kept, deviceID: 1, kind: .locate, requestedByUserID: 1, requestedAtMicros: 5)),
            .commandRequested(
                CommandRequested(
                    commandID: dropped, deviceID: 2, kind: .sound, requestedByUserID: 1, requestedAtMicros: 6)
            ),
            .commandSent(CommandSent(commandID: kept, deviceID: 1, channel: "apns", providerID: "x")),
            .sharePermissionChanged(SharePermissionChanged(deviceID: 1, granteeUserID: 2, locate: true)),
            .commandAnswered(
                CommandAnswered(
                    commandID: kept, deviceID: 1, batchOffset: 3, fixIndex: 0, clientProtocol: .native)),
            .deviceRemoved(DeviceRemoved(deviceID: 2)),
        ]
        var batch = ProjectionBatch(firstOffset: 10)
        for (index, event) in events.enumerated() {
            try batch.add(record(event, offset: 10 + UInt64(index), received: 1_000 + Int64(index)))
        }
        #expect(batch.commands.map(\.offset) == [10, 12, 14])
        #expect(batch.commands.map(\.receivedAtMicros) == [1_000, 1_002, 1_004])
        #expect(batch.commands.map(\.event) == [events[0], events[2], events[4]])
    }
}
