// The on-disk format of the findmy event log, version 2 (reads version 1 too). The full
// specification, with the recovery decision table, is docs/log-format.md; change both together,
// and never in a way that stops a golden segment in Fixtures/ (log-v1, log-v2) from reading.
//
//   segment  = header(64) frame* seal-frame?
//              version 1: every frame a record of its own; version 2: every frame (but the seal)
//              a group record, type 254, holding the requests of one group commit, each with its
//              own offset (GroupRecord.swift). An offset names a request in both versions.
//   header   = "FINDMYSG" u16 version u16 headerBytes u32 flags u64 salt u64 baseOffset
//              i64 createdAtMicros u32 generation [16] logID u32 crc32c(bytes 0..<60)
//   frame    = u32 B | u32 crc32c(body) | body: record-header(80) payload(B-80) | u32 B
//   record-header = u16 headerBytes u8 type u8 codec u16 flags u16 eventVersion u64 salt u64 offset
//                   i64 receivedAtMicros i64 recordedMinMicros i64 recordedMaxMicros u32 fixCount
//                   u32 uncompressedBytes u64 deviceKey [16] idempotencyKey
//
// A reader accepts a frame only if, in order: 12 bytes remain; 80 <= B <= recordBytesMax; 12 + B
// bytes remain; the CRC matches; the trailer equals B; 80 <= headerBytes <= B; the salt is the
// segment's; the offset is the expected one (dense; increasing in a rewritten segment); a seal is
// the last frame. The first rule that fails names the damage (`FrameDamage`).
//
// logID (bytes 44..<60, once "reserved, zero") is the identity of the log: 16 random bytes chosen
// when the log's first segment is created and copied into every later segment; rewrites and repair
// keep it. Zero means a segment written before log ids. Rule 10: all non-zero log ids of one log
// directory are equal; otherwise the writer refuses to open the log, naming the file. Still version
// 1: every version-1 decoder ignores these bytes (the CRC covers them, any value passes), so old
// logs read here with id zero and old binaries read logs with ids. A projection in PostgreSQL is
// bound to the id of the log it was folded from (docs/postgres.md).

/// Constants of the format. Version 2 differs from version 1 only in
/// what a segment's records are: group records (one per group commit, `GroupRecord.swift`) instead
/// of one record per request. A reader reads both; the segment header says which.
public enum LogFormat {
    /// The version this findmy writes in new segments.
    public static let version: UInt16 = 2
    /// Versions this findmy reads.
    public static let readableVersions: ClosedRange<UInt16> = 1...2
    /// Type of a group record (version-2 segments only).
    public static let groupType: UInt8 = 254
    /// A group record's header: the 80 bytes of a version-1 header and `GroupExtent`'s 16.
    public static let groupHeaderBytes = 96
    public static let segmentMagic: [UInt8] = Array("FINDMYSG".utf8)
    public static let segmentHeaderBytes = 64
    public static let recordHeaderBytes = 80
    /// Bytes of a frame besides its body: leading length, CRC, trailing length.
    public static let frameOverheadBytes = 12
    /// The largest record body a reader accepts; ingest limits keep real records far below it.
    public static let recordBytesMax = 64 << 20
    public static let sealType: UInt8 = 255
    public static let sealPayloadBytes = 64

    public static let segmentFlagRewritten: UInt32 = 1
    public static let recordFlagPayloadRemoved: UInt16 = 1
    public static let recordFlagEncryptionMask: UInt16 = 0x0F00
    /// Bits 12-15 of a fix batch's flags: its `ClientProtocol` (0, native, in older records).
    public static let recordFlagProtocolMask: UInt16 = 0xF000
    public static let recordFlagProtocolShift: UInt16 = 12

    public static func segmentFileName(baseOffset: UInt64) -> String {
        let digits = String(baseOffset)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".seg"
    }

    /// The base offset a segment file name states, or nil if the name is not a segment's.
    public static func baseOffset(fileName: String) -> UInt64? {
        guard fileName.hasSuffix(".seg"), fileName.utf8.count == 24 else { return nil }
        let digits = fileName.dropLast(4)
        guard digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return UInt64(digits)
    }
}

public enum Codec: UInt8, Sendable {
    case none = 0
    case lz4 = 1
}

public struct SegmentHeader: Equatable, Sendable {
    public var version: UInt16 = LogFormat.version
    public var flags: UInt32 = 0
    public var salt: UInt64
    public var baseOffset: UInt64
    public var createdAtMicros: Int64
    public var generation: UInt32 = 0
    /// The log this segment belongs to; `.zero` in a segment written before log ids.
    public var logID: UUID128 = .zero

    public init(
        salt: UInt64, baseOffset: UInt64, createdAtMicros: Int64, flags: UInt32 = 0, generation: UInt32 = 0,
        logID: UUID128 = .zero
    ) {
        self.salt = salt
        self.baseOffset = baseOffset
        self.createdAtMicros = createdAtMicros
        self.flags = flags
        self.generation = generation
        self.logID = logID
    }

    public var isRewritten: Bool { flags & LogFormat.segmentFlagRewritten != 0 }

    public func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: LogFormat.segmentHeaderBytes)
        writer.raw(LogFormat.segmentMagic)
        writer.u16(version)
        writer.u16(UInt16(LogFormat.segmentHeaderBytes))
        writer.u32(flags)
        writer.u64(salt)
        writer.u64(baseOffset)
        writer.i64(createdAtMicros)
        writer.u32(generation)
        writer.u64(logID.high.bigEndian)
        writer.u64(logID.low.bigEndian)
        writer.u32(CRC32C.checksum(writer.bytes))
        assert(writer.bytes.count == LogFormat.segmentHeaderBytes)
        return writer.bytes
    }

    public enum Damage: Error, Equatable, CustomStringConvertible {
        case short(bytes: Int)
        case badMagic
        case badCRC
        case unknownVersion(UInt16)

        public var description: String {
            switch self {
            case .short(let bytes): "segment header is incomplete (\(bytes) of 64 bytes)"
            case .badMagic: "not a findmy segment (bad magic)"
            case .badCRC: "segment header checksum mismatch"
            case .unknownVersion(let version):
                "segment format version \(version) is newer than this findmy understands (\(LogFormat.version))"
            }
        }
    }

    public static func decode(_ bytes: ArraySlice<UInt8>) throws(Damage) -> SegmentHeader {
        guard bytes.count >= LogFormat.segmentHeaderBytes else { throw .short(bytes: bytes.count) }
        let header = bytes.prefix(LogFormat.segmentHeaderBytes)
        guard header.prefix(8).elementsEqual(LogFormat.segmentMagic) else { throw .badMagic }
        var reader = ByteReader(header.dropFirst(8))
        do {
            let version = try reader.u16()
            let stored = header.suffix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
            guard CRC32C.checksum(Array(header.prefix(60))) == UInt32(littleEndian: stored) else {
                throw Damage.badCRC
            }
            guard LogFormat.readableVersions.contains(version) else { throw Damage.unknownVersion(version) }
            _ = try reader.u16()
            let flags = try reader.u32()
            let salt = try reader.u64()
            let base = try reader.u64()
            let created = try reader.i64()
            let generation = try reader.u32()
            let logIDHigh = UInt64(bigEndian: try reader.u64())
            let logIDLow = UInt64(bigEndian: try reader.u64())
            var decoded = SegmentHeader(
                salt: salt, baseOffset: base, createdAtMicros: created, flags: flags, generation: generation,
                logID: UUID128(high: logIDHigh, low: logIDLow))
            decoded.version = version
            return decoded
        } catch let damage as Damage {
            throw damage
        } catch {
            throw .short(bytes: bytes.count)
        }
    }
}

/// The uncompressed header every record carries: what scans and retention read without
/// touching the payload.
public struct RecordHeader: Equatable, Sendable {
    public var type: UInt8
    public var codec: UInt8
    public var flags: UInt16 = 0
    public var eventVersion: UInt16
    public var salt: UInt64 = 0
    public var offset: UInt64 = 0
    public var receivedAtMicros: Int64
    public var recordedMinMicros: Int64 = 0
    public var recordedMaxMicros: Int64 = 0
    public var fixCount: UInt32 = 0
    public var uncompressedBytes: UInt32
    public var deviceKey: UInt64 = 0
    public var idempotencyKey: UUID128 = .zero

    public init(
        type: UInt8, codec: UInt8, flags: UInt16 = 0, eventVersion: UInt16, salt: UInt64 = 0,
        offset: UInt64 = 0,
        receivedAtMicros: Int64, recordedMinMicros: Int64 = 0, recordedMaxMicros: Int64 = 0,
        fixCount: UInt32 = 0,
        uncompressedBytes: UInt32, deviceKey: UInt64 = 0, idempotencyKey: UUID128 = .zero
    ) {
        self.type = type
        self.codec = codec
        self.flags = flags
        self.eventVersion = eventVersion
        self.salt = salt
        self.offset = offset
        self.receivedAtMicros = receivedAtMicros
        self.recordedMinMicros = recordedMinMicros
        self.recordedMaxMicros = recordedMaxMicros
        self.fixCount = fixCount
        self.uncompressedBytes = uncompressedBytes
        self.deviceKey = deviceKey
        self.idempotencyKey = idempotencyKey
    }

    public var isSeal: Bool { type == LogFormat.sealType }
    public var isGroup: Bool { type == LogFormat.groupType }
    public var isPayloadRemoved: Bool { flags & LogFormat.recordFlagPayloadRemoved != 0 }
    /// The wire format of a fix batch; readable from an envelope too.
    public var clientProtocol: ClientProtocol {
        ClientProtocol(
            rawValue: UInt8((flags & LogFormat.recordFlagProtocolMask) >> LogFormat.recordFlagProtocolShift))!
    }

    func write(to writer: inout ByteWriter, headerBytes: Int = LogFormat.recordHeaderBytes) {
        writer.u16(UInt16(headerBytes))
        writer.u8(type)
        writer.u8(codec)
        writer.u16(flags)
        writer.u16(eventVersion)
        writer.u64(salt)
        writer.u64(offset)
        writer.i64(receivedAtMicros)
        writer.i64(recordedMinMicros)
        writer.i64(recordedMaxMicros)
        writer.u32(fixCount)
        writer.u32(uncompressedBytes)
        writer.u64(deviceKey)
        writer.u64(idempotencyKey.high.bigEndian)
        writer.u64(idempotencyKey.low.bigEndian)
    }

    /// Reads a header; returns it and the header's own declared size (to skip later fields).
    static func read(from body: ArraySlice<UInt8>) throws -> (RecordHeader, Int) {
        var reader = ByteReader(body)
        let headerBytes = Int(try reader.u16())
        let type = try reader.u8()
        let codec = try reader.u8()
        let flags = try reader.u16()
        let version = try reader.u16()
        let salt = try reader.u64()
        let offset = try reader.u64()
        let received = try reader.i64()
        let recordedMin = try reader.i64()
        let recordedMax = try reader.i64()
        let fixCount = try reader.u32()
        let uncompressed = try reader.u32()
        let device = try reader.u64()
        let keyHigh = UInt64(bigEndian: try reader.u64())
        let keyLow = UInt64(bigEndian: try reader.u64())
        let header = RecordHeader(
            type: type, codec: codec, flags: flags, eventVersion: version, salt: salt, offset: offset,
            receivedAtMicros: received, recordedMinMicros: recordedMin, recordedMaxMicros: recordedMax,
            fixCount: fixCount, uncompressedBytes: uncompressed, deviceKey: device,
            idempotencyKey: UUID128(high: keyHigh, low: keyLow))
        return (header, headerBytes)
    }
}

/// What a seal record says about its segment.
public struct Seal: Equatable, Sendable {
    public var recordCount: UInt64
    public var firstOffset: UInt64
    public var endOffset: UInt64
    public var fixCount: UInt64
    public var receivedMinMicros: Int64
    public var receivedMaxMicros: Int64
    public var recordedMinMicros: Int64
    public var recordedMaxMicros: Int64

    public init(firstOffset: UInt64) {
        self.recordCount = 0
        self.firstOffset = firstOffset
        self.endOffset = firstOffset
        self.fixCount = 0
        self.receivedMinMicros = 0
        self.receivedMaxMicros = 0
        self.recordedMinMicros = 0
        self.recordedMaxMicros = 0
    }

    /// Accounts for the members of one group record, from its header alone: records are requests,
    /// in version 2 as in version 1.
    public mutating func add(group header: RecordHeader, extent: GroupExtent) {
        add(header)
        recordCount += UInt64(extent.memberCount) - 1
        receivedMaxMicros = max(receivedMaxMicros, extent.receivedMaxMicros)
        endOffset = max(endOffset, header.offset + UInt64(extent.offsetSpan))
    }

    /// Accounts for one record of the segment.
    public mutating func add(_ header: RecordHeader) {
        if recordCount == 0 {
            receivedMinMicros = header.receivedAtMicros
            receivedMaxMicros = header.receivedAtMicros
        } else {
            receivedMinMicros = min(receivedMinMicros, header.receivedAtMicros)
            receivedMaxMicros = max(receivedMaxMicros, header.receivedAtMicros)
        }
        if header.fixCount > 0 {
            if fixCount == 0 {
                recordedMinMicros = header.recordedMinMicros
                recordedMaxMicros = header.recordedMaxMicros
            } else {
                recordedMinMicros = min(recordedMinMicros, header.recordedMinMicros)
                recordedMaxMicros = max(recordedMaxMicros, header.recordedMaxMicros)
            }
        }
        recordCount += 1
        fixCount += UInt64(header.fixCount)
        endOffset = max(endOffset, header.offset + 1)
    }

    public func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: LogFormat.sealPayloadBytes)
        writer.u64(recordCount)
        writer.u64(firstOffset)
        writer.u64(endOffset)
        writer.u64(fixCount)
        writer.i64(receivedMinMicros)
        writer.i64(receivedMaxMicros)
        writer.i64(recordedMinMicros)
        writer.i64(recordedMaxMicros)
        return writer.bytes
    }

    public static func decode(_ bytes: ArraySlice<UInt8>) throws -> Seal {
        var reader = ByteReader(bytes)
        var seal = Seal(firstOffset: 0)
        seal.recordCount = try reader.u64()
        seal.firstOffset = try reader.u64()
        seal.endOffset = try reader.u64()
        seal.fixCount = try reader.u64()
        seal.receivedMinMicros = try reader.i64()
        seal.receivedMaxMicros = try reader.i64()
        seal.recordedMinMicros = try reader.i64()
        seal.recordedMaxMicros = try reader.i64()
        return seal
    }

    /// The seal record's header: offset = endOffset (a seal consumes no offset).
    public func recordHeader(salt: UInt64, sealedAtMicros: Int64) -> RecordHeader {
        RecordHeader(
            type: LogFormat.sealType, codec: Codec.none.rawValue, eventVersion: 1, salt: salt,
            offset: endOffset,
            receivedAtMicros: sealedAtMicros, recordedMinMicros: recordedMinMicros,
            recordedMaxMicros: recordedMaxMicros, uncompressedBytes: UInt32(LogFormat.sealPayloadBytes))
    }
}
