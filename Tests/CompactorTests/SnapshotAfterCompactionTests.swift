import Compactor
import Core
import Events
import Foundation
import Identity
import Testing

/// Compaction and registry snapshots agree (docs/snapshots.md, "Snapshots and compaction"): a run
/// that rewrote segments leaves a snapshot of the compacted log, so the next start folds only what
/// came after it, and the registry it gets is the one a full scan of the compacted log gets. A
/// crash between the rewrite and that snapshot costs a full scan, never a wrong registry.
@Suite struct SnapshotAfterCompactionTests {
    static let day = RetentionPolicy.microsPerDay
    static let now: Int64 = 1_750_000_000_000_000
    static let ring = 4

    final class DataDirectory: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "/findmy-compact-snap-\(UInt64.random(in: 0...UInt64.max))"
        var store: RegistrySnapshotStore { RegistrySnapshotStore(directory: path + "/snapshots") }
        init() { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func openLog() throws -> LogWriter {
            var options = LogOptions()
            options.diagnostics = { _ in }
            options.segmentBytesMax = 2048
            return try LogWriter(directory: path + "/log", options: options)
        }

        var limits: IdentityLimits {
            var limits = IdentityLimits()
            limits.recentBatchesPerDeviceMax = SnapshotAfterCompactionTests.ring
            return limits
        }

        /// The reference: a start that folds every record of the log.
        func fullScan() throws -> Registry {
            let log = try openLog()
            defer { log.close() }
            return try IdentityService(log: log, limits: limits).registrySnapshot
        }

        /// A start from the snapshots, as `findmy serve` makes it.
        func start() throws -> IdentityService {
            let log = try openLog()
            defer { log.close() }
            return try IdentityService(log: log, limits: limits, snapshots: store)
        }

        func snapshotFiles() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: path + "/snapshots")) ?? []).sorted()
        }
    }

    /// Three devices with batches (some with rejections, which a compaction takes away with the
    /// payload) received 100, 40 and 1 day ago, more than a ring holds; then an erasure.
    static func appendHistory(to log: LogWriter, serial: inout UInt64) throws {
        func fix(_ at: Int64) -> Fix {
            Fix(
                latitude: 48.1, longitude: 11.5, accuracyMeters: 8, source: "significant",
                recordedAtMicros: at)
        }
        for age: Int64 in [100, 40, 1] {
            for device: UInt64 in 1...3 {
                for _ in 0..<3 {
                    serial += 1
                    let at = now - age * day + Int64(serial)
                    _ = try log.append(
                        .fixBatch(
                            FixBatch(
                                deviceID: device, batchID: UUID128(high: device, low: serial),
                                fixes: [fix(at), fix(at + 1)],
                                rejections: [Rejection(index: 2, reason: "out_of_range: latitude \(serial)")])
                        ),
                        receivedAtMicros: at)
                }
            }
        }
    }

    static func appendRegistry(to log: LogWriter) throws {
        _ = try log.append(
            .userCreated(
                UserCreated(userID: 1, name: "ada", role: .admin, tokenHash: Array(repeating: 1, count: 32))),
            receivedAtMicros: now - 200 * day)
        for device: UInt64 in 1...3 {
            _ = try log.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: 1, deviceUUID: UUID128(high: 9, low: device),
                        name: "d\(device)",
                        platform: "ios", model: "")), receivedAtMicros: now - 200 * day)
        }
        // Commands: an old closed locate and an old closed lost (dropped by the compaction), an
        // old open lost (kept), a recent closed sound (kept): the registry folded from the
        // compacted log must still be the one a full scan gets (docs/retention.md, "Commands").
        for (serial, kind, age, closed) in [
            (1, CommandKindCode.locate, Int64(40), true), (2, .lost, 50, true), (3, .lost, 45, false),
            (4, .sound, 1, true),
        ] {
            let id = UUID128(high: 77, low: UInt64(serial))
            let at = now - age * day
            _ = try log.append(
                .commandRequested(
                    CommandRequested(
                        commandID: id, deviceID: 1, kind: kind, message: "lost message \(serial)",
                        phone: "+1 555 \(serial)", requestedByUserID: 1, requestedAtMicros: at)),
                receivedAtMicros: at)
            _ = try log.append(
                .commandSent(
                    CommandSent(commandID: id, deviceID: 1, channel: "apns", providerID: "p\(serial)")),
                receivedAtMicros: at + 1)
            if closed {
                _ = try log.append(
                    .commandExpired(CommandExpired(commandID: id, deviceID: 1, reason: "found")),
                    receivedAtMicros: at + 2)
            }
        }
    }

    /// 1,500 single-fix batches of devices 1-3 from an hour ago, one a second (batch ids
    /// `batchIDHigh`/index), then device 2's history erased: every segment, the open one included,
    /// holds something dead, so a run that went on would roll and rewrite.
    static func appendRecentBatchesThenErasure(to log: LogWriter, batchIDHigh: UInt64) throws {
        let recent = wallClockMicros() - 3_600_000_000
        for index in 0..<1_500 {
            let at = recent + Int64(index) * 1_000_000
            _ = try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(index % 3 + 1),
                        batchID: UUID128(high: batchIDHigh, low: UInt64(index)),
                        fixes: [
                            Fix(
                                latitude: 48.1, longitude: 11.5, accuracyMeters: 8, source: "significant",
                                recordedAtMicros: at)
                        ])), receivedAtMicros: at)
        }
        _ = try log.append(.historyErased(HistoryErased(deviceID: 2)), receivedAtMicros: wallClockMicros())
    }

    @Test func aCompactionLeavesASnapshotTheNextStartLoads() throws {
        let data = DataDirectory()
        var serial: UInt64 = 0
        var compacted: CompactionReport?
        var tail = 0
        do {
            let log = try data.openLog()
            defer { log.close() }
            let identity = try IdentityService(log: log, limits: data.limits, snapshots: data.store)
            let snapshotter = RegistrySnapshotter(registry: identity.store, store: data.store)
            try Self.appendRegistry(to: log)
            try Self.appendHistory(to: log, serial: &serial)
            _ = try log.append(.historyErased(HistoryErased(deviceID: 2)), receivedAtMicros: Self.now)
            // The snapshot a running server had written before the compaction.
            #expect(snapshotter.snapshotNow() != nil)
            let compactor = Compactor(
                writer: log, client: nil, options: Compactor.Options(),
                snapshotAfterRewrite: { snapshotter.snapshotAfterCompaction(stop: $0) })
            compacted = try compactor.run(asOfMicros: Self.now)
            #expect(compacted?.registrySnapshotOffset == log.durableEnd)
            // Reports that arrive after the compaction: the start folds them after the snapshot.
            try Self.appendHistory(to: log, serial: &serial)
            tail = 27
        }
        let report = try #require(compacted)
        #expect(report.log.segmentsRewritten + report.log.segmentsDeleted > 0)
        #expect(report.log.envelopesMade > 0 && report.log.recordsDropped > 0)
        #expect(report.log.commandEventsRemoved == 6)

        let reference = try data.fullScan()
        let restarted = try data.start()
        #expect(restarted.store.startReport.snapshotOffset == report.registrySnapshotOffset)
        #expect(restarted.store.startReport.recordsReplayed == UInt64(tail))
        #expect(restarted.store.startReport.skipped.isEmpty)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
        // What the compaction took from the log is in no snapshot file either: the rejections of
        // batch 12 (device 1, 40 days old: an envelope now) and 22 (device 2, erased), which the
        // snapshot from before the compaction held in their devices' rings. Batch 21's stay.
        let files = data.snapshotFiles()
        #expect(files == [RegistrySnapshotFormat.fileName(offset: report.registrySnapshotOffset ?? 0)])
        for name in files {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: data.path + "/snapshots/" + name))
            #expect(bytes.ranges(of: Data("latitude 12".utf8)).isEmpty, "\(name)")
            #expect(bytes.ranges(of: Data("latitude 22".utf8)).isEmpty, "\(name)")
            #expect(!bytes.ranges(of: Data("latitude 21".utf8)).isEmpty, "\(name)")
        }
    }

    @Test func aCrashBetweenTheRewriteAndTheSnapshotCostsAFullScan() throws {
        let data = DataDirectory()
        var serial: UInt64 = 0
        do {
            let log = try data.openLog()
            defer { log.close() }
            let identity = try IdentityService(log: log, limits: data.limits, snapshots: data.store)
            let snapshotter = RegistrySnapshotter(registry: identity.store, store: data.store)
            try Self.appendRegistry(to: log)
            try Self.appendHistory(to: log, serial: &serial)
            #expect(snapshotter.snapshotNow() != nil)
            // The log half of a run, and the process dies before the snapshot (the same as a
            // compactor without one): every snapshot on disk lists a segment file that is gone.
            let compactor = Compactor(writer: log, client: nil, options: Compactor.Options())
            let report = try compactor.run(asOfMicros: Self.now)
            #expect(report.log.segmentsRewritten + report.log.segmentsDeleted > 0)
            #expect(report.registrySnapshotOffset == nil)
            // And a snapshot cut short while being written.
            try Data("FMREGSNP".utf8).write(
                to: URL(
                    fileURLWithPath: data.path + "/snapshots/"
                        + RegistrySnapshotFormat.fileName(offset: log.durableEnd) + ".tmp"))
        }
        let reference = try data.fullScan()
        let restarted = try data.start()
        #expect(restarted.store.startReport.snapshotOffset == nil)
        #expect(restarted.store.startReport.skipped.first?.deleted == true)
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
    }
}
