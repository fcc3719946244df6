import Compactor
import Events
import Testing

/// The retention policy as a pure function: events in, verdicts out.
@Suite struct PolicyTests {
    static let day = RetentionPolicy.microsPerDay
    static let now: Int64 = 1_750_000_000_000_000

    func policy(_ events: [Event], retentionDays: Int = 30, arrivalsDays: Int = 90) -> RetentionPolicy {
        var policy = RetentionPolicy(
            settings: RetentionSettings(retentionDays: retentionDays, arrivalsRetentionDays: arrivalsDays))
        for (offset, event) in events.enumerated() { policy.apply(event, offset: UInt64(offset)) }
        return policy
    }

    static let enrolments: [Event] = [
        .deviceEnrolled(
            DeviceEnrolled(deviceID: 1, userID: 10, deviceUUID: .zero, name: "a", platform: "ios", model: "")),
        .deviceEnrolled(
            DeviceEnrolled(deviceID: 2, userID: 10, deviceUUID: .zero, name: "b", platform: "ios", model: "")),
        .deviceEnrolled(
            DeviceEnrolled(deviceID: 3, userID: 20, deviceUUID: .zero, name: "c", platform: "ios", model: "")),
    ]

    func death(
        _ policy: RetentionPolicy, device: UInt64, offset: UInt64 = 100, received: Int64, recorded: Int64
    )
        -> RetentionPolicy.Death?
    {
        policy.fixDeath(
            device: device, recordOffset: offset, receivedAtMicros: received, recordedAtMicros: recorded,
            nowMicros: Self.now)
    }

    @Test func defaultWindowCountsFromTheEarlierClock() {
        let policy = policy(Self.enrolments)
        let day = Self.day
        let now = Self.now
        #expect(death(policy, device: 1, received: now - 29 * day, recorded: now - 29 * day) == nil)
        #expect(death(policy, device: 1, received: now - 31 * day, recorded: now - 31 * day) == .expired)
        // A device clock in the future cannot keep a fix alive: received_at is older than the window.
        #expect(death(policy, device: 1, received: now - 31 * day, recorded: now + 400 * day) == .expired)
        // Late arrival of an old fix: recorded long ago, received today, expired by recorded_at.
        #expect(death(policy, device: 1, received: now - day, recorded: now - 45 * day) == .expired)
        // Far past device clock.
        #expect(death(policy, device: 1, received: now, recorded: 0) == .expired)
        // Exactly at the cutoff is live.
        #expect(death(policy, device: 1, received: now, recorded: now - 30 * day) == nil)
    }

    @Test func deviceOverrideWinsOverUserOverrideWhichWinsOverTheDefault() {
        var events = Self.enrolments
        events.append(.retentionChanged(RetentionChanged(scope: .user(10), days: 7)))
        events.append(.retentionChanged(RetentionChanged(scope: .device(2), days: 365)))
        let policy = policy(events)
        #expect(policy.windowDays(device: 1) == 7)
        #expect(policy.windowDays(device: 2) == 365)
        #expect(policy.windowDays(device: 3) == 30)
        #expect(policy.longestWindowDays == 365)
        var cleared = events
        cleared.append(.retentionChanged(RetentionChanged(scope: .device(2), days: nil)))
        #expect(self.policy(cleared).windowDays(device: 2) == 7)
        cleared.append(.retentionChanged(RetentionChanged(scope: .user(10), days: nil)))
        #expect(self.policy(cleared).windowDays(device: 2) == 30)
    }

    @Test func erasureCoversEarlierRecordsInItsRangeOnly() {
        var events = Self.enrolments  // offsets 0...2
        // Offset 3: an erasure of what was recorded 5 to 3 days ago.
        events.append(
            .historyErased(
                HistoryErased(
                    deviceID: 1, fromMicros: Self.now - 5 * Self.day, toMicros: Self.now - 3 * Self.day)))
        let policy = policy(events)
        let now = Self.now
        #expect(death(policy, device: 1, offset: 2, received: now, recorded: now - 4 * Self.day) == .erased)
        // End is open.
        #expect(death(policy, device: 1, offset: 2, received: now, recorded: now - 3 * Self.day) == nil)
        // After the erase.
        #expect(death(policy, device: 1, offset: 4, received: now, recorded: now - 4 * Self.day) == nil)
        // Another device.
        #expect(death(policy, device: 2, offset: 2, received: now, recorded: now - 4 * Self.day) == nil)
        let whole = self.policy(Self.enrolments + [.historyErased(HistoryErased(deviceID: 1))])
        #expect(death(whole, device: 1, offset: 1, received: now, recorded: now) == .erased)
    }

    @Test func removalKillsFixesAndEnvelopes() {
        let policy = policy(Self.enrolments + [.deviceRemoved(DeviceRemoved(deviceID: 3))])
        #expect(death(policy, device: 3, offset: 2, received: Self.now, recorded: Self.now) == .removed)
        #expect(
            !policy.isEnvelopeLive(
                device: 3, recordOffset: 2, receivedAtMicros: Self.now, nowMicros: Self.now))
        #expect(
            policy.isEnvelopeLive(device: 2, recordOffset: 2, receivedAtMicros: Self.now, nowMicros: Self.now)
        )
    }

    @Test func envelopesOutliveFixesByTheArrivalsWindow() {
        let policy = policy(Self.enrolments)
        let received = Self.now - 60 * Self.day
        #expect(death(policy, device: 1, received: received, recorded: received) == .expired)
        #expect(
            policy.isEnvelopeLive(device: 1, recordOffset: 5, receivedAtMicros: received, nowMicros: Self.now)
        )
        #expect(
            !policy.isEnvelopeLive(
                device: 1, recordOffset: 5, receivedAtMicros: Self.now - 91 * Self.day, nowMicros: Self.now))
    }

    @Test func plansShrinkEnvelopeAndDrop() throws {
        let policy = policy(Self.enrolments)
        func record(received: Int64, recorded: [Int64]) -> LogRecord {
            let fixes = recorded.map {
                Fix(latitude: 1, longitude: 2, accuracyMeters: 3, source: "s", recordedAtMicros: $0)
            }
            var encoded = EventCodec.encode(
                .fixBatch(FixBatch(deviceID: 1, batchID: .zero, fixes: fixes)), receivedAtMicros: received)
            encoded.header.offset = 50
            return LogRecord(
                header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
        }
        let now = Self.now
        let day = Self.day
        #expect(try policy.plan(record(received: now, recorded: [now, now - day]), nowMicros: now) == .keep)
        guard
            case .shrink(let batch, 1) = try policy.plan(
                record(received: now, recorded: [now, now - 40 * day]), nowMicros: now)
        else {
            Issue.record("expected a shrink")
            return
        }
        #expect(batch.fixes.map(\.recordedAtMicros) == [now])
        #expect(
            try policy.plan(record(received: now - 40 * day, recorded: [now - 40 * day]), nowMicros: now)
                == .envelope(removedFixes: 1, erased: false))
        #expect(
            try policy.plan(record(received: now - 100 * day, recorded: [now - 100 * day]), nowMicros: now)
                == .drop(removedFixes: 1))
    }
}
