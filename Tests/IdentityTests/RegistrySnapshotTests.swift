import Events
import Foundation
import Synchronization
import Testing

@testable import Core
@testable import Identity

/// Registry snapshots (docs/snapshots.md): a start from the newest valid snapshot and the log after
/// it gives the registry a full scan gives, for random logs; a damaged, truncated, foreign or
/// compacted-over snapshot is passed over, never loaded into a wrong registry.
@Suite struct RegistrySnapshotTests {
    /// SplitMix64: a printed seed replays any failure.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A data directory with a log whose segments roll every few kilobytes, so that snapshots
    /// cover several segments and compaction can rewrite one.
    final class DataDirectory: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "/findmy-snap-\(UInt64.random(in: 0...UInt64.max))"
        var log: String { path + "/log" }
        var snapshots: String { path + "/snapshots" }
        var store: RegistrySnapshotStore { RegistrySnapshotStore(directory: snapshots) }

        init() { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func openLog() throws -> LogWriter {
            var options = LogOptions()
            options.diagnostics = { _ in }
            options.segmentBytesMax = 4096
            return try LogWriter(directory: log, options: options)
        }

        func snapshotFiles() throws -> [String] {
            guard FileManager.default.fileExists(atPath: snapshots) else { return [] }
            return try FileManager.default.contentsOfDirectory(atPath: snapshots).sorted()
        }

        /// The registry a start without snapshots rebuilds: the reference every test compares with.
        func fullScan(recentBatchesPerDeviceMax: Int = IdentityLimits().recentBatchesPerDeviceMax) throws
            -> Registry
        {
            let log = try openLog()
            defer { log.close() }
            return try IdentityService(log: log, limits: limits(recentBatchesPerDeviceMax)).registrySnapshot
        }

        func limits(_ recentBatchesPerDeviceMax: Int) -> IdentityLimits {
            var limits = IdentityLimits()
            limits.recentBatchesPerDeviceMax = recentBatchesPerDeviceMax
            return limits
        }
    }

    /// Random events over small id spaces, so that tokens rotate, devices are removed and
    /// re-enrolled, batch ids repeat, shares come and go, and rings evict.
    struct EventSource {
        var random: SeededGenerator
        var users: UInt64 = 0
        var devices: UInt64 = 0

        mutating func bytes(_ count: Int) -> [UInt8] {
            (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
        }
        mutating func user() -> UInt64 { UInt64.random(in: 1...max(1, users), using: &random) }
        mutating func device() -> UInt64 { UInt64.random(in: 1...max(1, devices), using: &random) }
        mutating func uuid(_ space: UInt64) -> UUID128 {
            UUID128(high: 7, low: UInt64.random(in: 0..<space, using: &random))
        }

        mutating func next() -> Event {
            if users == 0 || Int.random(in: 0..<40, using: &random) == 0 {
                users += 1
                return .userCreated(
                    UserCreated(
                        userID: users, name: "user\(users)", role: users == 1 ? .admin : .member,
                        tokenHash: bytes(32)))
            }
            if devices == 0 || Int.random(in: 0..<15, using: &random) == 0 {
                devices += 1
                return .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: devices, userID: user(), deviceUUID: uuid(1 << 40),
                        name: "phone \(devices)",
                        platform: "ios", model: "m"))
            }
            switch Int.random(in: 0..<30, using: &random) {
            case 0: return .userTokenIssued(UserTokenIssued(userID: user(), tokenHash: bytes(32)))
            case 1: return .userTokenRotated(UserTokenRotated(userID: user(), tokenHash: bytes(32)))
            case 2: return .deviceTokenIssued(DeviceTokenIssued(deviceID: device(), tokenHash: bytes(32)))
            case 3: return .deviceTokenRevoked(DeviceTokenRevoked(deviceID: device(), tokenHash: bytes(32)))
            case 4:
                let provider = ["apns", "fcm", "unifiedpush", "apns-location"][
                    Int.random(in: 0...3, using: &random)]
                return .pushTokenRegistered(
                    PushTokenRegistered(
                        deviceID: device(), provider: provider,
                        token: "t\(Int.random(in: 0..<6, using: &random))", topic: "topic",
                        environment: "production",
                        webPushPublicKey: provider == "unifiedpush" ? bytes(65) : [],
                        webPushAuthSecret: provider == "unifiedpush" ? bytes(16) : []))
            case 5:
                return .pushTokenInvalidated(
                    PushTokenInvalidated(
                        provider: "apns", token: "t\(Int.random(in: 0..<6, using: &random))", reason: "gone"))
            case 6:
                return .reportingChanged(
                    ReportingChanged(deviceID: device(), paused: Bool.random(using: &random)))
            case 7:
                let days: UInt32? =
                    Bool.random(using: &random) ? UInt32.random(in: 1...400, using: &random) : nil
                let scope: RetentionScope = Bool.random(using: &random) ? .device(device()) : .user(user())
                return .retentionChanged(RetentionChanged(scope: scope, days: days))
            case 8:
                return .historyErased(
                    HistoryErased(
                        deviceID: device(), fromMicros: Bool.random(using: &random) ? 1_000 : nil,
                        toMicros: Bool.random(using: &random) ? 9_000_000 : nil))
            case 9: return .deviceRemoved(DeviceRemoved(deviceID: device()))
            case 10:
                return .userPasswordSet(UserPasswordSet(userID: user(), passwordHash: "$argon2id$\(user())"))
            case 11:
                return .userRoleChanged(
                    UserRoleChanged(userID: user(), role: Bool.random(using: &random) ? .admin : .member))
            case 12:
                return .shareGranted(
                    ShareGranted(
                        deviceID: device(), granteeUserID: user(),
                        untilMicros: Bool.random(using: &random)
                            ? Int64.random(in: 0...1 << 50, using: &random) : nil))
            case 13: return .shareRevoked(ShareRevoked(deviceID: device(), granteeUserID: user()))
            case 14:
                return .sharePermissionChanged(
                    SharePermissionChanged(
                        deviceID: device(), granteeUserID: user(), locate: Bool.random(using: &random)))
            case 15:
                return .commandRequested(
                    CommandRequested(
                        commandID: uuid(40), deviceID: device(),
                        kind: CommandKindCode.allCases.randomElement(using: &random)!, message: "m",
                        phone: "p", requestedByUserID: user(),
                        requestedAtMicros: Int64.random(in: 0...1 << 50, using: &random)))
            case 16:
                return .commandSent(
                    CommandSent(
                        commandID: uuid(40), deviceID: device(),
                        channel: ["apns", "fcm"][Int.random(in: 0...1, using: &random)]))
            case 17:
                return Bool.random(using: &random)
                    ? .commandExpired(CommandExpired(commandID: uuid(40), deviceID: device(), reason: "r"))
                    : .commandAnswered(
                        CommandAnswered(
                            commandID: uuid(40), deviceID: device(), batchOffset: 1, fixIndex: 0,
                            clientProtocol: .native))
            case 21:
                // Ids from a small range, so that a fence is redefined, deleted, and defined again.
                let fence = UInt64.random(in: 1...6, using: &random)
                return .geofenceDefined(
                    GeofenceDefined(
                        geofenceID: fence, ownerUserID: fence % 2 + 1, name: "fence \(fence)",
                        latitude: 52.5, longitude: 13.4,
                        radiusMeters: Double.random(in: 10...1000, using: &random),
                        deviceIDs: [device(), device()].sorted()))
            case 22:
                let fence = UInt64.random(in: 1...6, using: &random)
                return .geofenceDeleted(GeofenceDeleted(geofenceID: fence, ownerUserID: fence % 2 + 1))
            case 18:
                return .userSettingChanged(
                    UserSettingChanged(
                        userID: user(), name: Bool.random(using: &random) ? "owntracks_friends" : "later",
                        value: Bool.random(using: &random) ? "true" : "false"))
            case 19:
                // Linked to one of three nodes, or unlinked.
                let node = Int.random(in: 0...3, using: &random)
                return .devicePresenceLinked(
                    DevicePresenceLinked(
                        deviceID: device(), userID: user(), nodeID: node == 0 ? "" : "\(node)",
                        nodeName: "n\(node)"))
            case 20:
                return .presenceChanged(
                    PresenceChanged(
                        deviceID: device(), nodeID: "\(Int.random(in: 1...3, using: &random))",
                        online: Bool.random(using: &random),
                        lastSeenMicros: Bool.random(using: &random)
                            ? Int64.random(in: 0...1 << 50, using: &random) : nil,
                        observedAtMicros: Int64.random(in: 0...1 << 50, using: &random)))
            default:
                let fixes = (0..<Int.random(in: 0...3, using: &random)).map { index in
                    Fix(
                        latitude: 52.5 + Double(index) / 1000, longitude: 13.4, accuracyMeters: 10,
                        source: "significant",
                        recordedAtMicros: 1_700_000_000_000_000 + Int64(index))
                }
                let rejections =
                    Bool.random(using: &random)
                    ? [
                        Rejection(
                            index: 0, reason: "out_of_range: latitude must be within [-90, 90], got 91.5")
                    ] : []
                // A third of them an import's, which the registry keeps beyond the ring.
                let clientProtocol =
                    Int.random(in: 0..<3, using: &random) == 0
                    ? ClientProtocol.imported(format: "gpx")! : .native
                return .fixBatch(
                    FixBatch(
                        deviceID: device(), batchID: uuid(24), fixes: fixes, rejections: rejections,
                        clientProtocol: clientProtocol))
            }
        }
    }

    static let smallRing = 4

    /// Writes `count` random events.
    static func append(_ count: Int, from source: inout EventSource, to log: LogWriter) throws {
        for _ in 0..<count { _ = try log.append(source.next(), receivedAtMicros: 1_700_000_000_000_000) }
    }

    /// Starts an identity service on the data directory with its snapshots, runs `body` with it and
    /// a snapshotter, and closes the log.
    static func withServer<T>(
        _ data: DataDirectory, _ body: (IdentityService, RegistrySnapshotter) throws -> T
    ) throws -> T {
        let log = try data.openLog()
        defer { log.close() }
        let identity = try IdentityService(log: log, limits: data.limits(smallRing), snapshots: data.store)
        let snapshotter = RegistrySnapshotter(registry: identity.store, store: data.store)
        return try body(identity, snapshotter)
    }

    /// The setup of the tests that then damage, replace or compact what was written: random events
    /// from `seed` in runs of `counts`, a snapshot after every run but the last; `then` runs on the
    /// log before it is closed.
    static func writeSnapshotted(
        _ data: DataDirectory, seed: UInt64, _ counts: [Int], then: (LogWriter) throws -> Void = { _ in }
    ) throws {
        var source = EventSource(random: SeededGenerator(state: seed))
        try withServer(data) { identity, snapshotter in
            for (index, count) in counts.enumerated() {
                try append(count, from: &source, to: identity.store.writer)
                if index < counts.count - 1 { snapshotter.snapshotNow() }
            }
            try then(identity.store.writer)
        }
    }

    /// What the compactor does to the first segment's expired batches: envelopes, rejections gone.
    static func envelopeFirstSegment(_ log: LogWriter) throws {
        try log.roll()
        let first = try log.segmentLayout().sealed[0].base
        _ = try log.rewriteSegment(base: first) { record in
            record.header.type == EventType.fixBatch.rawValue ? .replace(envelope(record.header)) : .keep
        }
    }

    /// Replaces the bytes of the snapshot file at `offset`.
    static func damageSnapshot(_ data: DataDirectory, offset: UInt64, _ change: (inout [UInt8]) -> Void)
        throws
    {
        let path = data.snapshots + "/" + RegistrySnapshotFormat.fileName(offset: offset)
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        change(&bytes)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    @Test(arguments: 1...12 as ClosedRange<UInt64>)
    func snapshotAndTailEqualAFullScan(seed: UInt64) throws {
        let data = DataDirectory()
        var source = EventSource(random: SeededGenerator(state: seed))
        let counts = (
            first: Int.random(in: 50...400, using: &source.random),
            second: Int.random(in: 1...200, using: &source.random),
            tail: Int.random(in: 0...200, using: &source.random)
        )
        var offsets: [UInt64] = []
        try Self.withServer(data) { identity, snapshotter in
            try Self.append(counts.first, from: &source, to: identity.store.writer)
            guard case .written(_, let first, _, _)? = snapshotter.snapshotNow() else {
                Issue.record("seed \(seed): no first snapshot")
                return
            }
            try Self.append(counts.second, from: &source, to: identity.store.writer)
            guard case .written(_, let second, _, _)? = snapshotter.snapshotNow() else {
                Issue.record("seed \(seed): no second snapshot")
                return
            }
            offsets = [first, second]
            try Self.append(counts.tail, from: &source, to: identity.store.writer)
        }
        let reference = try data.fullScan(recentBatchesPerDeviceMax: Self.smallRing)
        #expect(offsets == [UInt64(counts.first), UInt64(counts.first + counts.second)], "seed \(seed)")

        let restarted = try Self.withServer(data) { identity, _ in identity }
        #expect(restarted.store.startReport.snapshotOffset == offsets.last, "seed \(seed)")
        #expect(restarted.store.startReport.recordsReplayed == UInt64(counts.tail), "seed \(seed)")
        #expect(restarted.registrySnapshot.differences(from: reference) == [], "seed \(seed)")
    }

    @Test func aCorruptedNewestSnapshotFallsBackToTheOlderOne() throws {
        let data = DataDirectory()
        try Self.writeSnapshotted(data, seed: 99, [300, 100, 50])
        try Self.damageSnapshot(data, offset: 400) { $0[$0.count / 2] ^= 0x40 }

        let reference = try data.fullScan(recentBatchesPerDeviceMax: Self.smallRing)
        let restarted = try Self.withServer(data) { identity, _ in identity }
        #expect(restarted.store.startReport.snapshotOffset == 300)
        #expect(restarted.store.startReport.recordsReplayed == 150)
        #expect(
            restarted.store.startReport.skipped.map(\.fileName) == [
                RegistrySnapshotFormat.fileName(offset: 400)
            ])
        #expect(restarted.store.startReport.skipped.first?.reason.contains("checksum") == true)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
    }

    @Test func truncatedAndGarbageSnapshotsAreIgnored() throws {
        let data = DataDirectory()
        try Self.writeSnapshotted(data, seed: 7, [200, 20])
        let valid = data.snapshots + "/" + RegistrySnapshotFormat.fileName(offset: 200)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: valid))
        // Every cut of the only snapshot is ignored, and the start is a full scan.
        let reference = try data.fullScan(recentBatchesPerDeviceMax: Self.smallRing)
        for cut in [0, 7, 51, bytes.count / 2, bytes.count - 5, bytes.count - 1] {
            try Self.damageSnapshot(data, offset: 200) { $0 = Array(bytes.prefix(cut)) }
            let restarted = try Self.withServer(data) { identity, _ in identity }
            #expect(restarted.store.startReport.snapshotOffset == nil, "cut at \(cut)")
            #expect(restarted.store.startReport.recordsReplayed == 220, "cut at \(cut)")
            #expect(restarted.registrySnapshot.differences(from: reference) == [], "cut at \(cut)")
        }
        // Garbage under a snapshot's name, newer than a valid one, is passed over for the valid one.
        try bytes.write(to: URL(fileURLWithPath: valid))
        var random = SeededGenerator(state: 3)
        let garbage = (0..<5000).map { _ in UInt8.random(in: 0...255, using: &random) }
        try Data(garbage).write(
            to: URL(fileURLWithPath: data.snapshots + "/" + RegistrySnapshotFormat.fileName(offset: 210)))
        try Data(RegistrySnapshotFormat.magic + [1, 0, 52, 0]).write(
            to: URL(fileURLWithPath: data.snapshots + "/" + RegistrySnapshotFormat.fileName(offset: 215)))
        let restarted = try Self.withServer(data) { identity, _ in identity }
        #expect(restarted.store.startReport.snapshotOffset == 200)
        #expect(restarted.store.startReport.skipped.count == 2)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
    }

    @Test func aSnapshotOfAnotherLogIsDeleted() throws {
        let data = DataDirectory()
        try Self.writeSnapshotted(data, seed: 11, [100, 0])
        // Another log in the same data directory (a restore, a wiped log directory).
        try FileManager.default.removeItem(atPath: data.log)
        var other = EventSource(random: SeededGenerator(state: 12))
        // Its log id differs, even before the new log reaches the snapshot's offset.
        let restarted = try Self.withServer(data) { identity, _ in
            try Self.append(150, from: &other, to: identity.store.writer)
            return identity
        }
        #expect(restarted.store.startReport.snapshotOffset == nil)
        #expect(restarted.store.startReport.skipped.first?.deleted == true)
        #expect(restarted.store.startReport.skipped.first?.reason.contains("belongs to log") == true)
        #expect(try data.snapshotFiles() == [])
        // The new log was empty at that start: nothing of the other log's users came back.
        #expect(restarted.registrySnapshot.users.isEmpty && restarted.registrySnapshot.devices.isEmpty)
    }

    /// What the compactor does to an expired batch: the header stays, the payload goes.
    static func envelope(_ header: RecordHeader) -> EncodedEvent {
        var envelope = header
        envelope.flags |= LogFormat.recordFlagPayloadRemoved
        envelope.codec = Codec.none.rawValue
        envelope.uncompressedBytes = 0
        return EncodedEvent(header: envelope, payload: [])
    }

    @Test func compactionInvalidatesTheSnapshotsThatCoverWhatItRewrote() throws {
        let data = DataDirectory()
        let reason = "out_of_range: latitude must be within [-90, 90], got 91.5"
        // Compaction as `LogCompaction` does it, without the snapshot it then writes (a crash in
        // between): every batch of the first segment becomes an envelope, its rejections gone.
        try Self.writeSnapshotted(data, seed: 5, [400, 10], then: Self.envelopeFirstSegment)
        let reference = try data.fullScan(recentBatchesPerDeviceMax: Self.smallRing)
        let restarted = try Self.withServer(data) { identity, snapshotter in
            // The running server snapshots from its own fold, which now matches the compacted log.
            #expect(snapshotter.snapshotNow() != nil)
            return identity
        }
        #expect(restarted.store.startReport.snapshotOffset == nil)
        #expect(restarted.store.startReport.skipped.first?.deleted == true)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
        // The snapshot loaded next is the compacted log's, and no snapshot on disk keeps what the
        // compaction removed from the log.
        let again = try Self.withServer(data) { identity, _ in identity }
        #expect(again.store.startReport.snapshotOffset == 410)
        #expect(again.registrySnapshot.differences(from: reference) == [])
        for name in try data.snapshotFiles() {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: data.snapshots + "/" + name))
            let offsets = bytes.ranges(of: Data(reason.utf8)).count
            let stillInLog = reference.recentBatches.values.flatMap(\.results.values).filter {
                $0.rejections.contains { $0.reason == reason }
            }.count
            #expect(offsets == stillInLog, "\(name)")
        }
    }

    @Test func theRunningSnapshotterRefoldsAfterACompaction() throws {
        let data = DataDirectory()
        var source = EventSource(random: SeededGenerator(state: 21))
        let outcomes = Mutex<[RegistrySnapshotter.Outcome]>([])
        let log = try data.openLog()
        let identity = try IdentityService(
            log: log, limits: data.limits(Self.smallRing), snapshots: data.store)
        let snapshotter = RegistrySnapshotter(
            registry: identity.store, store: data.store,
            report: { outcome in outcomes.withLock { $0.append(outcome) } })
        try Self.append(400, from: &source, to: log)
        snapshotter.snapshotNow()
        try Self.envelopeFirstSegment(log)
        try Self.append(30, from: &source, to: log)
        let written = snapshotter.snapshotNow()
        log.close()
        #expect(outcomes.withLock { $0.count } == 1)
        guard case .written(_, 430, _, _)? = written else {
            Issue.record("no snapshot at 430 after the refold: \(String(describing: written))")
            return
        }
        let reference = try data.fullScan(recentBatchesPerDeviceMax: Self.smallRing)
        let restarted = try Self.withServer(data) { identity, _ in identity }
        #expect(restarted.store.startReport.snapshotOffset == 430)
        #expect(restarted.store.startReport.recordsReplayed == 0)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
    }
}

extension RegistrySnapshotTests {
    final class ManualMonotonicClock: Sendable {
        let micros = Atomic<Int64>(1_000_000)
    }

    @Test func snapshotsAreWrittenByRecordsFixesAndTimeLimits() throws {
        let data = DataDirectory()
        var source = EventSource(random: SeededGenerator(state: 31))
        let log = try data.openLog()
        defer { log.close() }
        let identity = try IdentityService(
            log: log, limits: data.limits(Self.smallRing), snapshots: data.store)
        var schedule = RegistrySnapshotter.Schedule()
        schedule.recordsBetweenSnapshotsMax = 50
        schedule.fixesBetweenSnapshotsMax = 1_000_000
        schedule.snapshotIntervalMicros = 60_000_000
        let clock = ManualMonotonicClock()
        let snapshotter = RegistrySnapshotter(
            registry: identity.store, store: data.store, schedule: schedule,
            monotonicClock: { clock.micros.load(ordering: .relaxed) })
        try Self.append(49, from: &source, to: log)
        #expect(snapshotter.round(force: false) == nil)
        try Self.append(1, from: &source, to: log)
        guard case .written(_, 50, _, _)? = snapshotter.round(force: false) else {
            Issue.record("no snapshot after recordsBetweenSnapshotsMax records")
            return
        }
        try Self.append(3, from: &source, to: log)
        clock.micros.add(59_000_000, ordering: .relaxed)
        #expect(snapshotter.round(force: false) == nil)
        clock.micros.add(1_000_000, ordering: .relaxed)
        guard case .written(_, 53, _, _)? = snapshotter.round(force: false) else {
            Issue.record("no snapshot after snapshotIntervalMicros")
            return
        }
        // Nothing new: no snapshot, however long it has been.
        clock.micros.add(600_000_000, ordering: .relaxed)
        #expect(snapshotter.round(force: false) == nil)
        #expect(
            try data.snapshotFiles() == [
                RegistrySnapshotFormat.fileName(offset: 50), RegistrySnapshotFormat.fileName(offset: 53),
            ])
    }
}

extension RegistrySnapshotTests {
    @Test func hundredFixRecordsAreSnapshottedByTheirFixes() throws {
        let data = DataDirectory()
        let log = try data.openLog()
        defer { log.close() }
        let identity = try IdentityService(
            log: log, limits: data.limits(Self.smallRing), snapshots: data.store)
        var schedule = RegistrySnapshotter.Schedule()
        schedule.recordsBetweenSnapshotsMax = 1_000
        schedule.fixesBetweenSnapshotsMax = 300
        let snapshotter = RegistrySnapshotter(
            registry: identity.store, store: data.store, schedule: schedule, monotonicClock: { 0 })
        let fix = Fix(
            latitude: 52.5, longitude: 13.4, accuracyMeters: 10, source: "significant",
            recordedAtMicros: 1_700_000_000_000_000)
        func appendBatch() throws {
            _ = try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: 1, batchID: UUID128(high: 1, low: UInt64.random(in: 0...UInt64.max)),
                        fixes: Array(repeating: fix, count: 100))))
        }
        try appendBatch()
        try appendBatch()
        #expect(snapshotter.round(force: false) == nil)
        try appendBatch()
        guard case .written(_, 3, _, _)? = snapshotter.round(force: false) else {
            Issue.record("no snapshot after fixesBetweenSnapshotsMax fixes")
            return
        }
        try appendBatch()
        #expect(snapshotter.round(force: false) == nil)
    }
}

extension RegistrySnapshotTests {
    /// A snapshot of format version 9 (before the found notices) is not read: skipped, not deleted,
    /// and the start folds the whole log into the registry a full scan gives. Made here from a version
    /// 10 file of a log without imports, ntfy topics, found notices or alert targets, whose last parts
    /// are then four zero counts (16 bytes).
    @Test func aSnapshotOfAnOlderVersionIsSkippedAndTheLogFoldedWhole() throws {
        let data = DataDirectory()
        var source = EventSource(random: SeededGenerator(state: 5))
        var events: [Event] = []
        while events.count < 150 {
            let event = source.next()
            if case .fixBatch(let batch) = event, batch.clientProtocol.importFormat != nil { continue }
            events.append(event)
        }
        try Self.withServer(data) { identity, snapshotter in
            for event in events.prefix(120) {
                _ = try identity.store.writer.append(event, receivedAtMicros: 1)
            }
            snapshotter.snapshotNow()
            for event in events.dropFirst(120) {
                _ = try identity.store.writer.append(event, receivedAtMicros: 1)
            }
        }
        let name = RegistrySnapshotFormat.fileName(offset: 120)
        let path = data.snapshots + "/" + name
        let current = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(current[8] == 10 && current[9] == 0)
        // The body ends with the import part, the ntfy topics and the found notice part (a zero
        // count each, two for the last), then the records-folded flag (0); version 9 had only the first.
        let body = current.dropLast(4)
        #expect(body.suffix(17).allSatisfy { $0 == 0 })
        var older = Array(body.dropLast(13)) + [0]
        older[8] = 9
        let bodyBytes = older[44..<52].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) } - 12
        for index in 0..<8 {
            older[44 + index] = UInt8(truncatingIfNeeded: bodyBytes >> (8 * UInt64(index)))
        }
        let crc = CRC32C.checksum(older)
        for index in 0..<4 { older.append(UInt8(truncatingIfNeeded: crc >> (8 * UInt32(index)))) }
        try Data(older).write(to: URL(fileURLWithPath: path))

        let reference = try data.fullScan(recentBatchesPerDeviceMax: Self.smallRing)
        let restarted = try Self.withServer(data) { identity, _ in identity }
        let report = restarted.store.startReport
        #expect(report.snapshotOffset == nil && report.recordsReplayed == 150)
        #expect(report.skipped.map(\.fileName) == [name] && report.skipped.first?.deleted == false)
        #expect(report.skipped.first?.reason.contains("version 9 is not one this findmy reads") == true)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
        #expect(try data.snapshotFiles().contains(name))
    }
}
