// The log export file (`findmy log export` / `findmy log import`, docs/scale.md "Migrating a
// single-machine log"): every record of a local log, in offset order, in the form a JetStream log
// holds it, so that a single-machine log can be moved into a cluster. Version 1.
//
//   file    = header, entry*, trailer; nothing after the trailer
//   header  (64 bytes)
//             0   8  magic "FMYLOGX1"
//             8   2  version (1)
//            10   2  flags: bit 0 = exported while a server held the log (records at or after
//                    `endOffset` may exist that are not in the file)
//            12   4  reserved, 0
//            16  16  the source log's id (zero: a log written before log ids)
//            32   8  the source's first offset when exported (earlier segments were compacted away)
//            40   8  end offset: every record of the source below it is in the file (offsets a
//                    compaction dropped are gaps, in the source and here)
//            48   8  exported at, microseconds since 1970 (information only)
//            56   4  reserved, 0
//            60   4  CRC-32C of bytes 0..<60
//   entry   = u8 0x52 ('R') | u64 source offset | u32 N | N bytes: the message | u32 CRC-32C of the
//             entry's bytes before it (tag to message)
//   message = ONE version-1 record frame exactly as `JetStreamLog` publishes it (docs/log-format.md,
//             "Record frame"): salt 0, offset 0, the payload in its codec (`EventCodec.standalone`)
//   trailer = u8 0x54 ('T') | u64 records | u64 fixes | u32 CRC-32C of every byte of the file
//             before the trailer | u32 CRC-32C of the trailer's bytes before it        (25 bytes)
//
// All integers little-endian, as in the log. A group record (format v2) is split into its
// members, each becoming one entry at its own offset, with the header it has as a record of its
// own and its payload in the form `EventCodec.encode` gives a request: a member the group stored
// raw (codec 0) because it was small is compressed again when `encode` would have compressed it,
// so an imported record is byte for byte the message an ingest node would have published.
//
// Validity rules a reader applies, in order (any failure refuses the whole file: an import stores
// nothing from a file that is not entirely valid):
//   1. The header is 64 bytes with the magic, version 1 (another version: written by another
//      findmy), and its CRC.
//   2. Each entry has tag 'R', N from 92 (the smallest frame) to recordBytesMax + 12, and its CRC.
//   3. Its message is exactly one record frame valid by rules 1-6 of docs/log-format.md, neither a
//      group record nor a seal, with salt 0 and offset 0.
//   4. Source offsets increase strictly, from the header's first offset, below its end offset.
//   5. The trailer follows the last entry: tag 'T', its CRC, record and fix counts equal to the
//      entries', the file CRC equal to the bytes before it; and the file ends right after it.
//   A file that ends before its trailer is truncated (rule 5).

/// The 64 bytes at the start of an export file.
public struct LogExportHeader: Equatable, Sendable {
    public static let magic: [UInt8] = Array("FMYLOGX1".utf8)
    public static let version: UInt16 = 1
    public static let bytes = 64
    public static let flagServerRunning: UInt16 = 1

    public var flags: UInt16
    public var logID: UUID128
    public var firstOffset: UInt64
    public var endOffset: UInt64
    public var exportedAtMicros: Int64

    public init(
        flags: UInt16 = 0, logID: UUID128, firstOffset: UInt64, endOffset: UInt64, exportedAtMicros: Int64
    ) {
        self.flags = flags
        self.logID = logID
        self.firstOffset = firstOffset
        self.endOffset = endOffset
        self.exportedAtMicros = exportedAtMicros
    }

    /// Whether a server held the log while it was exported (the file may not hold its end).
    public var serverWasRunning: Bool { flags & Self.flagServerRunning != 0 }

    public var encoded: [UInt8] {
        var writer = ByteWriter(capacity: Self.bytes)
        writer.raw(Self.magic)
        writer.u16(Self.version)
        writer.u16(flags)
        writer.u32(0)
        writer.raw(logID.bytes)
        writer.u64(firstOffset)
        writer.u64(endOffset)
        writer.i64(exportedAtMicros)
        writer.u32(0)
        writer.u32(CRC32C.checksum(writer.bytes))
        return writer.bytes
    }

    static func decode(_ bytes: ArraySlice<UInt8>) -> Result<LogExportHeader, LogExportDamage> {
        precondition(bytes.count == Self.bytes)
        guard bytes.prefix(8).elementsEqual(Self.magic) else { return .failure(.notAnExport) }
        var reader = ByteReader(bytes.dropFirst(8))
        // The sizes were checked above: these reads cannot run out.
        let version = try! reader.u16()
        guard version == Self.version else { return .failure(.version(version)) }
        let flags = try! reader.u16()
        _ = try! reader.u32()
        let logID = UUID128(bytes: try! reader.raw(16))
        let first = try! reader.u64()
        let end = try! reader.u64()
        let exportedAt = try! reader.i64()
        _ = try! reader.u32()
        let stored = try! reader.u32()
        guard stored == CRC32C.checksum(Array(bytes.prefix(60))) else { return .failure(.headerChecksum) }
        return .success(
            LogExportHeader(
                flags: flags, logID: logID, firstOffset: first, endOffset: end, exportedAtMicros: exportedAt))
    }
}

/// One entry: a record of the source log, at its source offset, as a JetStream message.
public struct LogExportRecord: Sendable {
    public var sourceOffset: UInt64
    /// The record's header as the message carries it (salt 0, offset 0).
    public var header: RecordHeader
    /// The payload as the message stores it (in `header.codec`).
    public var payload: [UInt8]

    public init(sourceOffset: UInt64, header: RecordHeader, payload: [UInt8]) {
        self.sourceOffset = sourceOffset
        self.header = header
        self.payload = payload
    }

    public var encodedEvent: EncodedEvent { EncodedEvent(header: header, payload: payload) }
}

/// What the trailer says.
public struct LogExportTrailer: Equatable, Sendable {
    public static let bytes = 25
    public var records: UInt64
    public var fixes: UInt64
}

/// Why an export file was refused; each names the rule of the format (top of LogExport.swift).
public enum LogExportDamage: Error, Equatable, Sendable, CustomStringConvertible {
    case notAnExport
    case version(UInt16)
    case headerChecksum
    case badTag(UInt8)
    case badLength(UInt32)
    case entryChecksum
    case badMessage(String)
    case offsetOrder(previous: UInt64?, found: UInt64)
    case trailerChecksum
    case counts(String)
    case fileChecksum
    case bytesAfterTrailer
    case truncated

    public var description: String {
        switch self {
        case .notAnExport: "not a findmy log export (no FMYLOGX1 magic) (rule 1)"
        case .version(let version):
            "export format version \(version); this findmy reads version \(LogExportHeader.version) (rule 1)"
        case .headerChecksum: "the header's checksum does not match (rule 1)"
        case .badTag(let tag):
            "an entry starts with byte 0x\(String(tag, radix: 16)), not 'R' or 'T' (rules 2, 5)"
        case .badLength(let length): "an entry of \(length) bytes, out of range (rule 2)"
        case .entryChecksum: "an entry's checksum does not match (rule 2)"
        case .badMessage(let why): "an entry's message is not one findmy record: \(why) (rule 3)"
        case .offsetOrder(let previous, let found):
            "source offset \(found) after \(previous.map { "\($0)" } ?? "the header's range") (rule 4)"
        case .trailerChecksum: "the trailer's checksum does not match (rule 5)"
        case .counts(let why): "the trailer's counts differ from the entries: \(why) (rule 5)"
        case .fileChecksum: "the file's checksum in the trailer does not match its bytes (rule 5)"
        case .bytesAfterTrailer: "bytes after the trailer (rule 5)"
        case .truncated: "the file ends before its trailer: it is cut short (rule 5)"
        }
    }
}

/// Writes an export file: the bytes of the header, of each entry, and of the trailer, in order;
/// the caller writes them out. Keeps the counts and the file checksum.
public struct LogExportWriter {
    public private(set) var records: UInt64 = 0
    public private(set) var fixes: UInt64 = 0
    private var fileCRC: UInt32
    private var lastOffset: UInt64?
    private let header: LogExportHeader

    /// Returns the writer and the header's bytes.
    public static func start(_ header: LogExportHeader) -> (LogExportWriter, [UInt8]) {
        let bytes = header.encoded
        return (LogExportWriter(header: header, fileCRC: CRC32C.checksum(bytes)), bytes)
    }

    private init(header: LogExportHeader, fileCRC: UInt32) {
        self.header = header
        self.fileCRC = fileCRC
    }

    /// The entry for a record as `LogReader` hands it out (a group's member or a version-1 record).
    public mutating func entry(_ record: LogRecord) -> [UInt8] {
        entry(
            sourceOffset: record.offset,
            EventCodec.standalone(header: record.header, stored: record.storedPayload))
    }

    public mutating func entry(sourceOffset: UInt64, _ record: EncodedEvent) -> [UInt8] {
        precondition(
            lastOffset.map { sourceOffset > $0 } ?? true, "export entries in increasing offset order")
        precondition(
            sourceOffset >= header.firstOffset && sourceOffset < header.endOffset,
            "entry outside the header's range")
        lastOffset = sourceOffset
        let message = Frame.message(record)
        var writer = ByteWriter(capacity: message.count + 17)
        writer.u8(LogExport.recordTag)
        writer.u64(sourceOffset)
        writer.u32(UInt32(message.count))
        writer.raw(message)
        writer.u32(CRC32C.checksum(writer.bytes))
        records += 1
        fixes += UInt64(record.header.fixCount)
        fileCRC = writer.bytes.withUnsafeBytes { CRC32C.update(fileCRC, $0) }
        return writer.bytes
    }

    public func trailer() -> [UInt8] {
        var writer = ByteWriter(capacity: LogExportTrailer.bytes)
        writer.u8(LogExport.trailerTag)
        writer.u64(records)
        writer.u64(fixes)
        writer.u32(fileCRC)
        writer.u32(CRC32C.checksum(writer.bytes))
        return writer.bytes
    }
}

public enum LogExport {
    static let recordTag: UInt8 = 0x52
    static let trailerTag: UInt8 = 0x54
    /// Tag, source offset, length before the message; its CRC after.
    static let entryOverheadBytes = 1 + 8 + 4 + 4
    static let messageBytesMin = UInt32(LogFormat.recordHeaderBytes + LogFormat.frameOverheadBytes)
    static let messageBytesMax = UInt32(LogFormat.recordBytesMax + LogFormat.frameOverheadBytes)
}

/// Reads an export file, checking every rule (top of this file). Feeding the bytes whole, in
/// pieces or one byte at a time gives the same items; after the last byte, `finish()` says whether
/// the file was whole.
public struct LogExportDecoder {
    public enum Item {
        case header(LogExportHeader)
        case record(LogExportRecord)
        case trailer(LogExportTrailer)
        case needMore
        case damaged(LogExportDamage, position: Int)
    }

    private var input = StreamInput()
    private var header: LogExportHeader?
    private var lastOffset: UInt64?
    private var records: UInt64 = 0
    private var fixes: UInt64 = 0
    private var fileCRC: UInt32 = 0
    private var ended = false
    private var damage: (LogExportDamage, Int)?

    public init() {}

    /// Byte position (in the file) of the next byte not yet decoded.
    public var position: Int { input.position }
    public var sawTrailer: Bool { ended }

    public mutating func append(_ bytes: some Collection<UInt8>) { input.append(bytes) }

    /// The next item; after `.damaged`, the same damage again.
    public mutating func next() -> Item {
        if let (damage, position) = damage { return .damaged(damage, position: position) }
        let item = decodeNext()
        if case .damaged(let why, let position) = item { damage = (why, position) }
        return item
    }

    /// Called after the last byte: nil when the file was whole and valid, else why not.
    public mutating func finish() -> (LogExportDamage, position: Int)? {
        if let damage { return damage }
        guard ended else { return (.truncated, position) }
        return nil
    }

    private mutating func decodeNext() -> Item {
        let available = input.bytes.count - input.start
        if ended {
            return available > 0 ? .damaged(.bytesAfterTrailer, position: position) : .needMore
        }
        guard let header else {
            guard available >= LogExportHeader.bytes else {
                // A file that does not even input.start like one is said so at once.
                let seen = min(available, 8)
                if !input.bytes[input.start..<(input.start + seen)].elementsEqual(
                    LogExportHeader.magic.prefix(seen))
                {
                    return .damaged(.notAnExport, position: position)
                }
                return .needMore
            }
            let bytes = input.bytes[input.start..<(input.start + LogExportHeader.bytes)]
            switch LogExportHeader.decode(bytes) {
            case .failure(let why): return .damaged(why, position: position)
            case .success(let decoded):
                header = decoded
                fileCRC = bytes.withUnsafeBytes { CRC32C.checksum($0) }
                input.start += LogExportHeader.bytes
                return .header(decoded)
            }
        }
        guard available >= 1 else { return .needMore }
        switch input.bytes[input.start] {
        case LogExport.recordTag: return decodeRecord(header, available: available)
        case LogExport.trailerTag: return decodeTrailer(available: available)
        case let tag: return .damaged(.badTag(tag), position: position)
        }
    }

    private mutating func decodeRecord(_ header: LogExportHeader, available: Int) -> Item {
        guard available >= 13 else { return .needMore }
        var reader = ByteReader(input.bytes[(input.start + 1)..<(input.start + 13)])
        let sourceOffset = try! reader.u64()
        let length = try! reader.u32()
        guard length >= LogExport.messageBytesMin, length <= LogExport.messageBytesMax else {
            return .damaged(.badLength(length), position: position)
        }
        let entryBytes = Int(length) + LogExport.entryOverheadBytes
        guard available >= entryBytes else { return .needMore }
        let body = input.bytes[input.start..<(input.start + entryBytes - 4)]
        let storedCRC = UInt32(
            littleEndian: input.bytes.withUnsafeBytes {
                $0.loadUnaligned(fromByteOffset: input.start + entryBytes - 4, as: UInt32.self)
            })
        guard body.withUnsafeBytes({ CRC32C.checksum($0) }) == storedCRC else {
            return .damaged(.entryChecksum, position: position)
        }
        guard sourceOffset >= header.firstOffset, sourceOffset < header.endOffset,
            lastOffset.map({ sourceOffset > $0 }) ?? true
        else { return .damaged(.offsetOrder(previous: lastOffset, found: sourceOffset), position: position) }
        var frames = FrameDecoder()
        frames.append(input.bytes[(input.start + 13)..<(input.start + 13 + Int(length))])
        guard case .frame(let frame) = frames.next(), frames.pendingBytes == 0 else {
            return .damaged(.badMessage("not exactly one valid record frame"), position: position)
        }
        guard frame.group == nil, !frame.header.isGroup, !frame.header.isSeal else {
            return .damaged(.badMessage("a group record or a seal"), position: position)
        }
        guard frame.header.salt == 0, frame.header.offset == 0 else {
            return .damaged(.badMessage("salt or offset not 0"), position: position)
        }
        let entry = input.bytes[input.start..<(input.start + entryBytes)]
        fileCRC = entry.withUnsafeBytes { CRC32C.update(fileCRC, $0) }
        input.start += entryBytes
        lastOffset = sourceOffset
        records += 1
        fixes += UInt64(frame.header.fixCount)
        return .record(
            LogExportRecord(sourceOffset: sourceOffset, header: frame.header, payload: frame.payload))
    }

    private mutating func decodeTrailer(available: Int) -> Item {
        guard available >= LogExportTrailer.bytes else { return .needMore }
        var reader = ByteReader(input.bytes[(input.start + 1)..<(input.start + LogExportTrailer.bytes)])
        let trailer = LogExportTrailer(records: try! reader.u64(), fixes: try! reader.u64())
        let storedFileCRC = try! reader.u32()
        let storedCRC = try! reader.u32()
        let covered = input.bytes[input.start..<(input.start + LogExportTrailer.bytes - 4)]
        guard covered.withUnsafeBytes({ CRC32C.checksum($0) }) == storedCRC else {
            return .damaged(.trailerChecksum, position: position)
        }
        guard trailer.records == records, trailer.fixes == fixes else {
            return .damaged(
                .counts(
                    "\(trailer.records) records and \(trailer.fixes) fixes, the entries hold \(records) and \(fixes)"
                ),
                position: position)
        }
        guard storedFileCRC == fileCRC else { return .damaged(.fileChecksum, position: position) }
        input.start += LogExportTrailer.bytes
        ended = true
        return .trailer(trailer)
    }
}
