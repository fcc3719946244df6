import Events

#if canImport(Glibc)
    import Glibc
#endif

// A registry snapshot: the registry folded from log[firstOffset..<offset], written so that a start
// replays only the records after `offset` (docs/snapshots.md is the full specification; change both
// together).
//
//   file     = "FMREGSNP" u16 version u16 headerBytes(52) u32 recentBatchesPerDeviceMax u64 offset
//              [16] logID u32 segmentCount u64 bodyBytes segment* body u32 crc32c(all bytes before it)
//   segment  = u64 base u64 salt u32 generation        (every segment file with base < offset)
//   body     = the registry's fields, little-endian, strings as u16 length + UTF-8 (see `encodeBody`),
//              then u8 flag [u64 recordsFolded]: how many records the fold applied below `offset`;
//              set on a snapshot of a JetStream log, absent (flag 0) on a local log
//
// A loader accepts a snapshot only if, in order: (1) the file is whole: magic, version 10, the
// sizes add up, the CRC matches, the body decodes to its last byte; (2) its log id is the log's;
// (3) `offset` <= the log's durable end; (4) its segment list equals the identities (base, salt,
// generation) of the log's segments below `offset` now; (5) its ring capacity is the server's
// `recentBatchesPerDeviceMax`. Offsets never change in this log (compaction rewrites records in
// place or drops them, docs/log-format.md "Rewrite"), but a rewrite changes what a full scan of
// the segment folds to (a shrunk batch's accepted count, an envelope's rejections, a dropped
// record's batch result), so rule 4 makes every compaction that touched the covered range
// invalidate the snapshot. A snapshot failing rule 1 or 5 is skipped; one failing 2, 3 or 4 is stale
// for good and deleted, so that a snapshot never keeps what compaction removed from the log.
//
// A file of another version fails rule 1: skipped, not deleted (a findmy of that version may still
// read it), and pruned once newer snapshots are written. A version 1 to 9 file is not read because
// its open commands lack the offsets of their `command_requested` (the command stream's event ids,
// which a resuming client's Last-Event-ID is compared with) and it holds no found notices nor alert
// targets (FoundNotices.swift); versions 1 to 8 also lack import batches (ImportedBatches.swift).
// The first start of version 10 folds the whole log once instead.
//
// On a JetStream log (an ingest node; docs/snapshots.md "Ingest nodes") the log id is the
// stream's (`JetStreamLog.logID`: its name and creation time), there are no segments (the list is
// empty), and rule 4 reads: (4J) the snapshot has `recordsFolded`, and the stream holds exactly
// `recordsFolded + (lastOffsetEnd - offset)` messages. Sequences are only ever added at the end,
// and a message, once gone (retention erases it), never comes back; so that count holds exactly
// when every message the fold applied is still there and none above `offset` is gone. Retention
// erasing anything the fold applied makes the snapshot stale for good (deleted); an erasure above
// `offset` does too (conservative: it cannot be told apart with one stream-info answer).

/// Constants and file names of the snapshot format, version 10 (reads 10 only).
public enum RegistrySnapshotFormat {
    /// 2 appends the Web Push keys of push tokens; 3 appends share permissions and open
    /// commands; 4 appends the users' OwnTracks Friends setting; 5 presence;
    /// 6 the geofences; 7 their notification settings; 8 the count
    /// of records folded, which a snapshot of a JetStream log needs (rule 4J); 9 the fix batches of
    /// imports; 10 the open commands' request offsets, the devices' ntfy topics, the users' alert
    /// targets and the armed found notices. Versions 1 to 9 are no longer read (see the format's
    /// comment above).
    public static let version: UInt16 = 10
    public static let versionsRead: ClosedRange<UInt16> = 10...10
    public static let magic: [UInt8] = Array("FMREGSNP".utf8)
    public static let headerBytes = 52
    public static let segmentEntryBytes = 20
    /// How many snapshot files are kept: the newest, and older ones to fall back to if it is damaged.
    public static let snapshotsKeptMax = 3

    public static func fileName(offset: UInt64) -> String {
        let digits = String(offset)
        return "registry-" + String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".snap"
    }

    /// The offset a snapshot file name states, or nil if the name is not a snapshot's.
    public static func offset(fileName: String) -> UInt64? {
        guard fileName.hasPrefix("registry-"), fileName.hasSuffix(".snap"), fileName.utf8.count == 34 else {
            return nil
        }
        let digits = fileName.dropFirst(9).dropLast(5)
        guard digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return UInt64(digits)
    }
}

/// A snapshot as stored: where it stands in which log, and the registry.
public struct RegistrySnapshot: Sendable {
    public var offset: UInt64
    public var logID: UUID128
    public var segments: [SegmentIdentity]
    public var registry: Registry
    /// How many records the fold applied below `offset`; nil on a local log, whose segment list
    /// says what the fold read.
    public var recordsFolded: UInt64?

    public init(
        offset: UInt64, logID: UUID128, segments: [SegmentIdentity], registry: Registry,
        recordsFolded: UInt64? = nil
    ) {
        self.offset = offset
        self.logID = logID
        self.segments = segments
        self.registry = registry
        self.recordsFolded = recordsFolded
    }

    public func encoded() -> [UInt8] {
        var body = registry.encodeBody()
        body.append(recordsFolded == nil ? 0 : 1)
        if let recordsFolded {
            withUnsafeBytes(of: recordsFolded.littleEndian) { body.append(contentsOf: $0) }
        }
        var writer = ByteWriter(
            capacity: RegistrySnapshotFormat.headerBytes + segments.count
                * RegistrySnapshotFormat.segmentEntryBytes
                + body.count + 4)
        writer.raw(RegistrySnapshotFormat.magic)
        writer.u16(RegistrySnapshotFormat.version)
        writer.u16(UInt16(RegistrySnapshotFormat.headerBytes))
        writer.u32(UInt32(registry.recentBatchesPerDeviceMax))
        writer.u64(offset)
        writer.u64(logID.high.bigEndian)
        writer.u64(logID.low.bigEndian)
        writer.u32(UInt32(segments.count))
        writer.u64(UInt64(body.count))
        assert(writer.bytes.count == RegistrySnapshotFormat.headerBytes)
        for segment in segments {
            writer.u64(segment.base)
            writer.u64(segment.salt)
            writer.u32(segment.generation)
        }
        writer.raw(body)
        writer.u32(CRC32C.checksum(writer.bytes))
        return writer.bytes
    }

    /// Rule 1 of the format: a whole, checksummed, decodable file, or a `SnapshotDamage`.
    public static func decode(_ bytes: [UInt8]) throws(SnapshotDamage) -> RegistrySnapshot {
        let format = RegistrySnapshotFormat.self
        guard bytes.count >= format.headerBytes + 4 else { throw .short(bytes: bytes.count) }
        guard bytes.prefix(8).elementsEqual(format.magic) else { throw .badMagic }
        let stored = bytes.suffix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
        guard CRC32C.checksum(Array(bytes.dropLast(4))) == UInt32(littleEndian: stored) else { throw .badCRC }
        do {
            var reader = ByteReader(bytes.dropLast(4).dropFirst(8))
            let version = try reader.u16()
            guard format.versionsRead.contains(version) else { throw SnapshotDamage.unknownVersion(version) }
            guard try reader.u16() == UInt16(format.headerBytes) else {
                throw SnapshotDamage.invalid("header size is not \(format.headerBytes)")
            }
            let capacity = Int(try reader.u32())
            let offset = try reader.u64()
            let logID = UUID128(
                high: UInt64(bigEndian: try reader.u64()), low: UInt64(bigEndian: try reader.u64()))
            let segmentCount = Int(try reader.u32())
            let bodyBytes = try reader.u64()
            guard
                UInt64(reader.remaining)
                    == UInt64(segmentCount) * UInt64(format.segmentEntryBytes) + bodyBytes
            else { throw SnapshotDamage.invalid("segment list and body sizes do not add up to the file's") }
            var segments: [SegmentIdentity] = []
            for _ in 0..<segmentCount {
                segments.append(
                    SegmentIdentity(
                        base: try reader.u64(), salt: try reader.u64(), generation: try reader.u32()))
            }
            guard capacity > 0 else { throw SnapshotDamage.invalid("recent batch capacity is zero") }
            let registry = try Registry.decodeBody(&reader, recentBatchesPerDeviceMax: capacity)
            var recordsFolded: UInt64?
            switch try reader.u8() {
            case 0: break
            case 1: recordsFolded = try reader.u64()
            case let flag: throw SnapshotDamage.invalid("records-folded flag \(flag)")
            }
            guard reader.remaining == 0 else { throw SnapshotDamage.invalid("bytes after the registry") }
            return RegistrySnapshot(
                offset: offset, logID: logID, segments: segments, registry: registry,
                recordsFolded: recordsFolded)
        } catch let damage as SnapshotDamage {
            throw damage
        } catch {
            throw .invalid("\(error)")
        }
    }
}

/// Why a snapshot file was not used (rule 1 of the format).
public enum SnapshotDamage: Error, Equatable, Sendable, CustomStringConvertible {
    case short(bytes: Int)
    case badMagic
    case badCRC
    case unknownVersion(UInt16)
    case invalid(String)

    public var description: String {
        switch self {
        case .short(let bytes): "snapshot is incomplete (\(bytes) bytes)"
        case .badMagic: "not a findmy registry snapshot (bad magic)"
        case .badCRC: "snapshot checksum mismatch"
        case .unknownVersion(let version):
            "snapshot format version \(version) is not one this findmy reads (versions \(RegistrySnapshotFormat.versionsRead.lowerBound) to \(RegistrySnapshotFormat.versionsRead.upperBound))"
        case .invalid(let reason): "snapshot is malformed: \(reason)"
        }
    }
}

/// The snapshot files of one data directory (`DATA_DIR/snapshots`): written atomically (temporary
/// file, fsync, rename, directory fsync), the newest `snapshotsKeptMax` kept.
public struct RegistrySnapshotStore: Sendable {
    public let directory: String
    let io: any FileIO

    public init(directory: String, io: any FileIO = PosixFileIO()) {
        self.directory = directory
        self.io = io
    }

    /// What a load found, for the start-up log line and tests.
    public struct LoadReport: Sendable, Equatable {
        /// The offset of the snapshot used, nil when none was usable (a full scan follows).
        public var usedOffset: UInt64?
        /// Snapshots passed over, newest first, each with why.
        public var skipped: [Skipped] = []

        public struct Skipped: Sendable, Equatable {
            public var fileName: String
            public var reason: String
            /// Stale for good (another log, beyond the log's end, compacted since): removed.
            public var deleted: Bool
        }
    }

    /// Snapshot file names, newest (highest offset) first.
    func snapshotFiles() throws -> [(name: String, offset: UInt64)] {
        let names: [String]
        do {
            names = try io.list(directory)
        } catch let error as IOError where error.errno == ENOENT {
            return []
        }
        return names.compactMap { name in RegistrySnapshotFormat.offset(fileName: name).map { (name, $0) } }
            .sorted { $0.offset > $1.offset }
    }

    /// Writes `snapshot` and removes all but the newest `snapshotsKeptMax`. Returns the file's path
    /// and size.
    @discardableResult
    public func write(_ snapshot: RegistrySnapshot) throws -> (path: String, bytes: Int) {
        try io.makeDirectory(directory)
        let path = directory + "/" + RegistrySnapshotFormat.fileName(offset: snapshot.offset)
        let temporary = path + ".tmp"
        let bytes = snapshot.encoded()
        let fd = try io.open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        do {
            try io.writeAll(fd, bytes, at: 0, path: temporary)
            try io.fsync(fd, path: temporary)
            io.close(fd)
        } catch {
            io.close(fd)
            try? io.unlink(temporary)
            throw error
        }
        try io.rename(temporary, path)
        try io.syncDirectory(directory)
        try prune()
        return (path, bytes.count)
    }

    /// Removes the oldest snapshots beyond `snapshotsKeptMax`, and temporary files a crash left.
    func prune() throws {
        var removed = false
        for (name, _) in try snapshotFiles().dropFirst(RegistrySnapshotFormat.snapshotsKeptMax) {
            try io.unlink(directory + "/" + name)
            removed = true
        }
        for name in try io.list(directory) where name.hasSuffix(".snap.tmp") {
            try io.unlink(directory + "/" + name)
            removed = true
        }
        if removed { try io.syncDirectory(directory) }
    }

    /// The newest snapshot that passes every rule of the format against `reader`'s log, or nil;
    /// stale snapshots are deleted on the way (see the format's rules).
    public func loadNewestValid(reader: LogReader, recentBatchesPerDeviceMax: Int) throws -> (
        RegistrySnapshot?, LoadReport
    ) {
        var log: (id: UUID128, durableEnd: UInt64)?
        return try loadNewestValid(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax) { snapshot in
            if log == nil { log = (try reader.logID() ?? .zero, reader.durableEnd()) }
            return try staleness(of: snapshot, reader: reader, logID: log!.id, durableEnd: log!.durableEnd)
        }
    }

    /// The loader's walk, whatever the log: newest file first, rule 1, then `staleness` (rules 2 to
    /// 4 of the log at hand: a reason means stale for good, and the file is deleted), then rule 5.
    public func loadNewestValid(
        recentBatchesPerDeviceMax: Int, staleness: (RegistrySnapshot) throws -> String?
    ) throws -> (RegistrySnapshot?, LoadReport) {
        var report = LoadReport()
        for (name, _) in try snapshotFiles() {
            let path = directory + "/" + name
            let snapshot: RegistrySnapshot
            do {
                snapshot = try RegistrySnapshot.decode(try readFile(path))
            } catch {
                report.skipped.append(.init(fileName: name, reason: "\(error)", deleted: false))
                continue
            }
            if let stale = try staleness(snapshot) {
                try io.unlink(path)
                try io.syncDirectory(directory)
                report.skipped.append(.init(fileName: name, reason: stale, deleted: true))
                continue
            }
            guard snapshot.registry.recentBatchesPerDeviceMax == recentBatchesPerDeviceMax else {
                report.skipped.append(
                    .init(
                        fileName: name,
                        reason:
                            "it keeps \(snapshot.registry.recentBatchesPerDeviceMax) batch results per device, the server \(recentBatchesPerDeviceMax)",
                        deleted: false))
                continue
            }
            report.usedOffset = snapshot.offset
            return (snapshot, report)
        }
        return (nil, report)
    }

    /// Why `snapshot` can never be loaded on `reader`'s log again (rules 2 to 4), or nil.
    func staleness(of snapshot: RegistrySnapshot, reader: LogReader, logID: UUID128, durableEnd: UInt64)
        throws
        -> String?
    {
        if snapshot.logID != logID {
            return "it belongs to log \(snapshot.logID), not this log (\(logID))"
        }
        if snapshot.offset > durableEnd {
            return "it stands at offset \(snapshot.offset), beyond the log's end \(durableEnd)"
        }
        if try reader.segmentIdentities(below: snapshot.offset) != snapshot.segments {
            return "the log's segments below its offset were rewritten or removed since (compaction)"
        }
        return nil
    }

    /// Deletes every snapshot that can never be loaded on `reader`'s log again (rules 2 to 4): after
    /// a compaction, the older snapshots hold batch results the compaction took out of the log
    /// (docs/snapshots.md, "Privacy"). Returns the names deleted; unreadable files are left to `prune`.
    @discardableResult
    public func removeStale(reader: LogReader) throws -> [String] {
        let logID = try reader.logID() ?? .zero
        let durableEnd = reader.durableEnd()
        return try removeStale { snapshot in
            try staleness(of: snapshot, reader: reader, logID: logID, durableEnd: durableEnd)
        }
    }

    /// Deletes every snapshot `staleness` gives a reason for; returns the names deleted.
    @discardableResult
    func removeStale(_ staleness: (RegistrySnapshot) throws -> String?) throws -> [String] {
        var removed: [String] = []
        for (name, _) in try snapshotFiles() {
            let path = directory + "/" + name
            guard let snapshot = try? RegistrySnapshot.decode(try readFile(path)),
                try staleness(snapshot) != nil
            else { continue }
            try io.unlink(path)
            removed.append(name)
        }
        if !removed.isEmpty { try io.syncDirectory(directory) }
        return removed
    }

    func readFile(_ path: String) throws -> [UInt8] {
        let fd = try io.open(path, flags: O_RDONLY, mode: 0)
        defer { io.close(fd) }
        let size = try io.fileSize(fd, path: path)
        return try io.read(fd, count: size, at: 0, path: path)
    }
}

extension Registry {
    /// Folds the records of `reader` from `start` to its durable end (or `end`) into `registry`;
    /// returns the registry and the offset reached. A full scan is `start` 0 on an empty registry.
    public static func replay(
        _ reader: LogReader, into registry: Registry, from start: UInt64, upTo end: UInt64? = nil
    ) throws -> (Registry, UInt64) {
        var registry = registry
        let reached = try reader.read(from: start, upTo: end) { record in
            try registry.apply(record)
            return true
        }
        return (registry, max(reached, start))
    }
}

extension Registry {
    /// The names of the parts in which two registries differ, empty when they are the same value:
    /// what the snapshot tests compare (a snapshot plus its tail against a full scan).
    package func differences(from other: Registry) -> [String] {
        var parts: [String] = []
        func check(_ name: String, _ same: Bool) { if !same { parts.append(name) } }
        check("recentBatchesPerDeviceMax", recentBatchesPerDeviceMax == other.recentBatchesPerDeviceMax)
        check("retention.settings", retention.settings == other.retention.settings)
        check("retention.userOfDevice", retention.userOfDevice == other.retention.userOfDevice)
        check("retention.deviceDays", retention.deviceDays == other.retention.deviceDays)
        check("retention.userDays", retention.userDays == other.retention.userDays)
        check(
            "retention.erasures",
            retention.erasures.mapValues { $0.map(\.offset) }
                == other.retention.erasures.mapValues { $0.map(\.offset) }
                && retention.erasures.mapValues { $0.map(\.erase) }
                    == other.retention.erasures.mapValues { $0.map(\.erase) }
        )
        check("retention.removedAt", retention.removedAt == other.retention.removedAt)
        check("users", users == other.users)
        check("devices", devices == other.devices)
        check("pushTokens", pushTokens == other.pushTokens)
        check("shares", shares == other.shares)
        check("userIDsByName", userIDsByName == other.userIDsByName)
        check("deviceIDsByKey", deviceIDsByKey == other.deviceIDsByKey)
        check("deviceIDsByUser", deviceIDsByUser == other.deviceIDsByUser)
        check("principals", principals == other.principals)
        check("userTokenHashes", userTokenHashes == other.userTokenHashes)
        check(
            "recentBatches",
            recentBatches.mapValues { [$0.head, $0.order.count] }
                == other.recentBatches.mapValues { [$0.head, $0.order.count] }
                && recentBatches.mapValues(\.order) == other.recentBatches.mapValues(\.order)
                && recentBatches.mapValues(\.results) == other.recentBatches.mapValues(\.results))
        check("nextOffset", nextOffset == other.nextOffset)
        check("commands", commands == other.commands)
        check("presence", presence == other.presence)
        check("geofences", geofences == other.geofences)
        check("geofenceNotifications", geofenceNotifications == other.geofenceNotifications)
        check("ntfyTopics", ntfyTopics == other.ntfyTopics)
        check("foundNotices", foundNotices == other.foundNotices)
        return parts
    }
}
