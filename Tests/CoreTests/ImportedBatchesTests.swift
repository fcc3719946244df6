import Events
import Foundation
import Testing

@testable import Core

/// The fix batches of an import are remembered beyond the ring of recent results, so that a file
/// of more chunks than the ring holds, imported again, is answered chunk by chunk as duplicates:
/// live, after a replay (from records and from envelopes), across a snapshot, and until the device
/// is removed.
@Suite struct ImportedBatchesTests {
    /// The server's default ring (`IdentityLimits.recentBatchesPerDeviceMax`).
    static let ring = 256
    static let chunks = 300
    let gpx = ClientProtocol.imported(format: "gpx")!
    let fix = Fix(
        latitude: 52.5, longitude: 13.4, accuracyMeters: nil, source: "visit",
        recordedAtMicros: 1_700_000_000_000_000)

    func chunk(_ index: Int, device: UInt64 = 1, clientProtocol: ClientProtocol? = nil) -> FixBatch {
        FixBatch(
            deviceID: device, batchID: UUID128(high: 0xA, low: UInt64(index)), fixes: [fix, fix],
            rejections: [Rejection(index: 2, reason: "expired: recorded_at before the retention window")],
            clientProtocol: clientProtocol ?? gpx)
    }

    func enrolled() -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: Self.ring)
        registry.apply(
            .userCreated(
                UserCreated(
                    userID: 1, name: "alice", role: .member, tokenHash: Array(repeating: 1, count: 32))),
            offset: 0)
        for device: UInt64 in [1, 2] {
            registry.apply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: 1, deviceUUID: UUID128(high: 1, low: device), name: "d",
                        platform: "linux", model: "")),
                offset: device)
        }
        return registry
    }

    /// A log directory that goes away with the test.
    final class Directory: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "/findmy-imported-\(UInt64.random(in: 0...UInt64.max))"
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func writer() throws -> LogWriter {
            var options = LogOptions()
            options.diagnostics = { _ in }
            return try LogWriter(directory: path, options: options)
        }
    }

    @Test func theFirstOfThreeHundredImportChunksIsStillADuplicate() {
        var registry = enrolled()
        for index in 0..<Self.chunks { registry.apply(.fixBatch(chunk(index)), offset: UInt64(10 + index)) }
        // The ring forgot the first 44; the import's own book did not.
        #expect(registry.recentBatches[1]?.results[chunk(0).batchID] == nil)
        let first = registry.batchResult(deviceID: 1, batchID: chunk(0).batchID)
        #expect(first == Registry.BatchResult(offset: 10, accepted: 2, rejections: []))
        #expect(registry.importedBatchCount(deviceID: 1) == Self.chunks)
        // A recent chunk is answered from the ring, with its rejections.
        #expect(
            registry.batchResult(deviceID: 1, batchID: chunk(Self.chunks - 1).batchID)?.rejections
                == chunk(0).rejections)
        // Batch ids are per device: the same id on another device is not a duplicate.
        #expect(registry.batchResult(deviceID: 2, batchID: chunk(0).batchID) == nil)
    }

    /// The control: batches of an app's protocol are the ring's alone, as before.
    @Test func otherProtocolsAreForgottenBeyondTheRing() {
        var registry = enrolled()
        for index in 0..<Self.chunks {
            registry.apply(
                .fixBatch(chunk(index, clientProtocol: .owntracksHTTP)), offset: UInt64(10 + index))
        }
        #expect(registry.batchResult(deviceID: 1, batchID: chunk(0).batchID) == nil)
        #expect(registry.batchResult(deviceID: 1, batchID: chunk(Self.chunks - 1).batchID) != nil)
        #expect(registry.importedBatchCount(deviceID: 1) == 0)
    }

    /// A restart replays the log: from the records' headers, and from envelopes (records whose
    /// payload the compactor removed), whose flags still carry the protocol.
    @Test func aReplayRemembersThemFromRecordsAndEnvelopes() throws {
        let directory = Directory()
        let writer = try directory.writer()
        var live = enrolled()
        _ = try writer.append(
            .userCreated(
                UserCreated(
                    userID: 1, name: "alice", role: .member, tokenHash: Array(repeating: 1, count: 32))),
            receivedAtMicros: 1)
        for device: UInt64 in [1, 2] {
            _ = try writer.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: 1, deviceUUID: UUID128(high: 1, low: device), name: "d",
                        platform: "linux", model: "")),
                receivedAtMicros: 1)
        }
        for index in 0..<Self.chunks {
            let offset = try writer.append(.fixBatch(chunk(index)), receivedAtMicros: 2)
            live.apply(.fixBatch(chunk(index)), offset: offset)
        }
        try writer.roll()
        let first = try writer.segmentLayout().sealed[0].base
        _ = try writer.rewriteSegment(base: first) { record in
            guard record.header.type == EventType.fixBatch.rawValue, record.header.idempotencyKey.low < 100
            else {
                return .keep
            }
            var envelope = record.header
            envelope.flags |= LogFormat.recordFlagPayloadRemoved
            envelope.codec = Codec.none.rawValue
            envelope.uncompressedBytes = 0
            return .replace(EncodedEvent(header: envelope, payload: []))
        }
        writer.close()
        let replayed = try Registry.replay(
            LogReader(directory: directory.path), recentBatchesPerDeviceMax: Self.ring)
        #expect(replayed.importedBatches == live.importedBatches)
        #expect(replayed.batchResult(deviceID: 1, batchID: chunk(0).batchID)?.accepted == 2)
        #expect(replayed.batchResult(deviceID: 1, batchID: chunk(150).batchID)?.accepted == 2)
    }

    @Test func aSnapshotKeepsThem() throws {
        var registry = enrolled()
        for index in 0..<Self.chunks { registry.apply(.fixBatch(chunk(index)), offset: UInt64(10 + index)) }
        registry.apply(.fixBatch(chunk(7, device: 2)), offset: 400)
        let snapshot = RegistrySnapshot(
            offset: 401, logID: UUID128(high: 5, low: 5), segments: [], registry: registry)
        let loaded = try RegistrySnapshot.decode(snapshot.encoded()).registry
        #expect(loaded.differences(from: registry) == [])
        #expect(loaded.batchResult(deviceID: 1, batchID: chunk(0).batchID)?.offset == 10)
        #expect(loaded.batchResult(deviceID: 2, batchID: chunk(7).batchID)?.offset == 400)
    }

    /// A file of format version 8 (before import batches) or 9 (before found notices) is not read:
    /// every rule-1 failure is a `SnapshotDamage`, which the loader skips.
    @Test func aSnapshotOfAnOlderVersionIsNotRead() throws {
        var bytes = RegistrySnapshot(
            offset: 3, logID: UUID128(high: 5, low: 5), segments: [], registry: enrolled()
        ).encoded()
        #expect(bytes[8] == 10 && bytes[9] == 0)
        for older in [UInt8(8), 9] {
            bytes[8] = older
            let crc = CRC32C.checksum(Array(bytes.dropLast(4)))
            for index in 0..<4 {
                bytes[bytes.count - 4 + index] = UInt8(truncatingIfNeeded: crc >> (8 * UInt32(index)))
            }
            #expect(throws: SnapshotDamage.unknownVersion(UInt16(older))) {
                try RegistrySnapshot.decode(bytes)
            }
        }
    }

    @Test func removingTheDeviceForgetsThem() throws {
        var registry = enrolled()
        for index in 0..<Self.chunks { registry.apply(.fixBatch(chunk(index)), offset: UInt64(10 + index)) }
        registry.apply(.fixBatch(chunk(0, device: 2)), offset: 400)
        registry.apply(.deviceRemoved(DeviceRemoved(deviceID: 1)), offset: 401)
        #expect(registry.batchResult(deviceID: 1, batchID: chunk(0).batchID) == nil)
        #expect(registry.importedBatchCount(deviceID: 1) == 0)
        #expect(registry.batchResult(deviceID: 2, batchID: chunk(0).batchID)?.offset == 400)
        let snapshot = RegistrySnapshot(
            offset: 402, logID: UUID128(high: 5, low: 5), segments: [], registry: registry)
        let loaded = try RegistrySnapshot.decode(snapshot.encoded()).registry
        #expect(loaded.importedBatchCount(deviceID: 1) == 0 && loaded.importedBatchCount(deviceID: 2) == 1)
    }
}
