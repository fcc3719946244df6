import Crypto
import Events
import Foundation
import Synchronization
import Testing

@testable import Core
@testable import Identity

/// Registry snapshots of an ingest node (docs/snapshots.md, "Ingest nodes") against an in-memory
/// stream that numbers messages as JetStream does (offsets only ever added at the end, erased ones
/// gone for good): a start from a snapshot and the stream after it gives the registry a fold of the
/// whole stream gives; a snapshot of another log, a local log's, a damaged one, or one whose
/// messages retention erased since, is never loaded.
@Suite struct SharedRegistrySnapshotTests {
    typealias Source = RegistrySnapshotTests.EventSource
    static let ring = RegistrySnapshotTests.smallRing

    /// The stream: records by offset, the next offset, an id. Also the node's shared log, so that an
    /// identity service can start on it (appends are not used here).
    final class MemoryStream: SnapshotSharedLog, SharedEventLog, @unchecked Sendable {
        let id: UUID128
        private let state = Mutex<(records: [UInt64: LogRecord], end: UInt64)>(([:], 0))

        init(id: UUID128 = UUID128(high: 0x5354_5245_414d, low: UInt64.random(in: 1...UInt64.max))) {
            self.id = id
        }

        @discardableResult
        func append(_ event: Event) -> UInt64 {
            state.withLock { stream in
                var encoded = EventCodec.encode(event, receivedAtMicros: 1_700_000_000_000_000)
                encoded.header.offset = stream.end
                stream.records[stream.end] = LogRecord(
                    header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
                stream.end += 1
                return stream.end - 1
            }
        }

        /// What retention does to a message: its live part republished at the end, then erased.
        func republishAndErase(_ offset: UInt64) throws {
            let record = try #require(state.withLock { $0.records[offset] })
            append(try record.event())
            state.withLock { _ = $0.records.removeValue(forKey: offset) }
        }

        func erase(_ offset: UInt64) { state.withLock { _ = $0.records.removeValue(forKey: offset) } }

        var present: [LogRecord] { state.withLock { $0.records.values.sorted { $0.offset < $1.offset } } }

        func logID() throws -> UUID128 { id }
        func storedCounts() throws -> SharedLogCounts {
            state.withLock { SharedLogCounts(end: $0.end, messages: UInt64($0.records.count)) }
        }
        func readAll(from start: UInt64, upTo end: UInt64, _ visit: (LogRecord) throws -> Bool) throws
            -> UInt64
        {
            for record in present where record.offset >= start && record.offset < end {
                if try !visit(record) { return record.offset + 1 }
            }
            return end
        }

        var partitionCount: Int { 1 }
        func appendShared(_ record: EncodedEvent, messageID: String) throws -> SharedAppend {
            preconditionFailure("not appended through in these tests")
        }
        func appendSharedLater(
            _ record: EncodedEvent, messageID: String,
            completion: @escaping @Sendable (Result<SharedAppend, any Error>) -> Void
        ) { preconditionFailure("not appended through in these tests") }
        func durableEndOffset() throws -> UInt64 { try storedCounts().end }

        /// The registry a node without snapshots folds: every message present, in offset order.
        func fullFold() throws -> Registry {
            var registry = Registry(recentBatchesPerDeviceMax: SharedRegistrySnapshotTests.ring)
            for record in present { try registry.apply(record) }
            return registry
        }
    }

    /// A node starting on `stream` with `data`'s snapshots: the follower's part done by hand (every
    /// present record from where the snapshot left off), then its snapshotter.
    static func startNode(_ stream: MemoryStream, _ data: RegistrySnapshotTests.DataDirectory) throws -> (
        IdentityService, SharedRegistrySnapshotter
    ) {
        let shared = SharedRegistry(log: stream, digest: { SHA256.hash($0) })
        let identity = IdentityService(
            shared: shared, limits: data.limits(ring), snapshots: data.store, snapshotLog: stream)
        for record in stream.present where record.offset >= shared.appliedEnd {
            try shared.deliver(record, into: identity.store)
        }
        return (identity, SharedRegistrySnapshotter(registry: identity.store, log: stream, store: data.store))
    }

    /// A batch of one fix with a rejection (what a snapshot must not bring back once erased) for a
    /// device the source enrolled. The source's own mix holds none.
    static func batch(_ source: inout Source) -> Event {
        let fix = Fix(
            latitude: 52.5, longitude: 13.4, accuracyMeters: 10, source: "significant",
            recordedAtMicros: 1_700_000_000_000_000)
        let rejection = Rejection(
            index: 1, reason: "out_of_range: latitude must be within [-90, 90], got 91.5")
        return .fixBatch(
            FixBatch(
                deviceID: source.device(), batchID: source.uuid(1 << 40), fixes: [fix],
                rejections: [rejection]))
    }

    static func isBatch(_ record: LogRecord) throws -> Bool {
        if case .fixBatch = try record.event() { true } else { false }
    }

    static func written(_ outcome: RegistrySnapshotter.Outcome?) -> UInt64? {
        if case .written(_, let offset, _, _)? = outcome { offset } else { nil }
    }

    @Test(arguments: 1...6 as ClosedRange<UInt64>)
    func snapshotAndTailEqualAFullFold(seed: UInt64) throws {
        let data = RegistrySnapshotTests.DataDirectory()
        let stream = MemoryStream()
        var source = Source(random: RegistrySnapshotTests.SeededGenerator(state: seed))
        for index in 0..<Int.random(in: 50...300, using: &source.random) {
            stream.append(index % 4 == 3 ? Self.batch(&source) : source.next())
        }
        let snapshotAt = try stream.storedCounts().end
        let (_, snapshotter) = try Self.startNode(stream, data)
        #expect(Self.written(snapshotter.snapshotNow()) == snapshotAt, "seed \(seed)")
        let tail = Int.random(in: 1...200, using: &source.random)
        for index in 0..<tail { stream.append(index % 4 == 3 ? Self.batch(&source) : source.next()) }

        let (restarted, _) = try Self.startNode(stream, data)
        #expect(restarted.store.startReport.snapshotOffset == snapshotAt, "seed \(seed)")
        #expect(
            restarted.sharedLog?.recordsDelivered == UInt64(tail), "seed \(seed): only the tail is folded")
        #expect(restarted.registrySnapshot.differences(from: try stream.fullFold()) == [], "seed \(seed)")
    }

    @Test func aSnapshotOfAnotherStreamOrOfALocalLogIsRefusedAndDeleted() throws {
        let data = RegistrySnapshotTests.DataDirectory()
        let other = MemoryStream()
        var source = Source(random: RegistrySnapshotTests.SeededGenerator(state: 3))
        for _ in 0..<80 { other.append(source.next()) }
        let (_, snapshotter) = try Self.startNode(other, data)
        #expect(Self.written(snapshotter.snapshotNow()) == 80)
        // A local log's snapshot (segments, no record count) with this stream's id, at offset 40.
        let stream = MemoryStream()
        for _ in 0..<100 { stream.append(source.next()) }
        try data.store.write(
            RegistrySnapshot(
                offset: 40, logID: stream.id, segments: [SegmentIdentity(base: 0, salt: 9, generation: 0)],
                registry: Registry(recentBatchesPerDeviceMax: Self.ring)))

        let (started, _) = try Self.startNode(stream, data)
        #expect(started.store.startReport.snapshotOffset == nil)
        #expect(started.store.startReport.skipped.map(\.deleted) == [true, true])
        #expect(started.store.startReport.skipped.first?.reason.contains("not this stream") == true)
        #expect(started.store.startReport.skipped.last?.reason.contains("local log") == true)
        #expect(try data.snapshotFiles().isEmpty)
        #expect(started.sharedLog?.recordsDelivered == 100)
        #expect(started.registrySnapshot.differences(from: try stream.fullFold()) == [])
    }

    @Test func aDamagedNewestSnapshotFallsBackToTheOlderOne() throws {
        let data = RegistrySnapshotTests.DataDirectory()
        let stream = MemoryStream()
        var source = Source(random: RegistrySnapshotTests.SeededGenerator(state: 4))
        let (_, snapshotter) = try Self.startNode(stream, data)
        for _ in 0..<60 { stream.append(source.next()) }
        #expect(Self.written(snapshotter.snapshotNow()) == 60)
        for _ in 0..<60 { stream.append(source.next()) }
        #expect(Self.written(snapshotter.snapshotNow()) == 120)
        for _ in 0..<10 { stream.append(source.next()) }
        try RegistrySnapshotTests.damageSnapshot(data, offset: 120) { $0[$0.count / 2] ^= 0x40 }

        let (started, _) = try Self.startNode(stream, data)
        #expect(started.store.startReport.snapshotOffset == 60)
        #expect(
            started.store.startReport.skipped.map(\.fileName) == [
                RegistrySnapshotFormat.fileName(offset: 120)
            ])
        #expect(started.sharedLog?.recordsDelivered == 70)
        #expect(started.registrySnapshot.differences(from: try stream.fullFold()) == [])
    }

    /// Retention erases a message the snapshot folded and republishes it at the end: the snapshot
    /// no longer describes the stream. A start refuses it (deleted) and folds the stream whole; the
    /// running snapshotter refolds from the first message, and its next snapshot loads and equals a
    /// fold of the stream as retention left it.
    @Test func retentionErasingAFoldedMessageStalesTheSnapshotAndTheSnapshotterRefolds() throws {
        let data = RegistrySnapshotTests.DataDirectory()
        let stream = MemoryStream()
        var source = Source(random: RegistrySnapshotTests.SeededGenerator(state: 11))
        for index in 0..<150 { stream.append(index % 3 == 2 ? Self.batch(&source) : source.next()) }
        let (_, snapshotter) = try Self.startNode(stream, data)
        #expect(Self.written(snapshotter.snapshotNow()) == 150)
        for _ in 0..<20 { stream.append(source.next()) }
        // A batch below the snapshot republished (what lives of it) and erased; a dead one erased.
        let batches = try stream.present.filter { try Self.isBatch($0) && $0.offset < 150 }
        try #require(batches.count >= 2)
        try stream.republishAndErase(batches[0].offset)
        stream.erase(batches[1].offset)

        let (started, _) = try Self.startNode(stream, data)
        #expect(started.store.startReport.snapshotOffset == nil)
        #expect(started.store.startReport.skipped.first?.deleted == true)
        #expect(started.store.startReport.skipped.first?.reason.contains("retention") == true)
        #expect(started.registrySnapshot.differences(from: try stream.fullFold()) == [])

        // The snapshotter that was running through the erasure: it must not continue its fold.
        let end = try stream.storedCounts().end
        #expect(Self.written(snapshotter.snapshotNow()) == end)
        let (again, _) = try Self.startNode(stream, data)
        #expect(again.store.startReport.snapshotOffset == end && again.sharedLog?.recordsDelivered == 0)
        #expect(again.registrySnapshot.differences(from: try stream.fullFold()) == [])
    }

    /// Messages erased before the fold reached them are gaps it never saw: the snapshot is valid.
    @Test func erasuresTheFoldNeverSawKeepTheSnapshotValid() throws {
        let data = RegistrySnapshotTests.DataDirectory()
        let stream = MemoryStream()
        var source = Source(random: RegistrySnapshotTests.SeededGenerator(state: 12))
        for index in 0..<100 { stream.append(index % 3 == 2 ? Self.batch(&source) : source.next()) }
        let batches = try stream.present.filter(Self.isBatch)
        try #require(batches.count >= 1)
        try stream.republishAndErase(batches[0].offset)
        let (_, snapshotter) = try Self.startNode(stream, data)
        #expect(Self.written(snapshotter.snapshotNow()) == 101)
        for _ in 0..<5 { stream.append(source.next()) }
        let (started, _) = try Self.startNode(stream, data)
        #expect(started.store.startReport.snapshotOffset == 101 && started.sharedLog?.recordsDelivered == 5)
        #expect(started.registrySnapshot.differences(from: try stream.fullFold()) == [])
    }

    /// Rule 4J by itself, as a table: counts in, verdict out.
    @Test func theCountRule() {
        let counts = SharedLogCounts(end: 100, messages: 90)
        #expect(counts.covers(offset: 100, records: 90))
        #expect(counts.covers(offset: 80, records: 70))  // 20 above, all present
        #expect(!counts.covers(offset: 80, records: 71))  // one it folded is gone
        #expect(!counts.covers(offset: 80, records: 69))  // never: a count it cannot have
        #expect(!counts.covers(offset: 101, records: 90))  // beyond the end
    }

    @Test func aRecordCountSurvivesTheFileAndALocalSnapshotHasNone() throws {
        let registry = Registry(recentBatchesPerDeviceMax: Self.ring)
        let shared = RegistrySnapshot(
            offset: 7, logID: UUID128(high: 1, low: 2), segments: [], registry: registry, recordsFolded: 5)
        #expect(try RegistrySnapshot.decode(shared.encoded()).recordsFolded == 5)
        let local = RegistrySnapshot(
            offset: 7, logID: UUID128(high: 1, low: 2), segments: [], registry: registry)
        #expect(try RegistrySnapshot.decode(local.encoded()).recordsFolded == nil)
    }
}

extension IdentityService {
    /// The node's position in the shared log, for the follower's counts.
    fileprivate var sharedLog: SharedRegistry? { store.log as? SharedRegistry }
}
