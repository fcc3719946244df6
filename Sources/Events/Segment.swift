#if canImport(Glibc)
    import Glibc
#endif

/// Errors a user of the log can act on.
public enum LogError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Another process holds the writer lock.
    case locked(directory: String)
    /// Damage that recovery must not repair by itself: acknowledged data, or a sealed segment.
    case corrupt(file: String, position: Int, reason: String)
    /// A write failed (ENOSPC, EIO, ...): nothing of the failed appends was acknowledged.
    case writeFailed(IOError)
    case io(IOError)
    case closed
    /// Rule 10: `file` carries log id `found`, while the log's other segments carry `expected`.
    case mixedLogs(file: String, found: UUID128, expected: UUID128)

    /// Any error from the log's own code or its file layer, as a LogError.
    public init(_ error: any Error) {
        if let error = error as? LogError {
            self = error
        } else {
            self = .io(IOError(error))
        }
    }

    public var description: String {
        switch self {
        case .locked(let directory):
            "another findmy process is writing to \(directory) (the log has exactly one writer); stop it, or run this "
                + "command through the running server"
        case .corrupt(let file, let position, let reason):
            "log segment \(file) is damaged at byte \(position): \(reason). Run `findmy log verify` to see all "
                + "damage and `findmy log repair` to cut the log there (the damaged part is moved, not deleted)"
        case .writeFailed(let error):
            "append failed, nothing was acknowledged: \(error)"
                + (error.isNoSpace ? "; free disk space and retry" : "")
        case .io(let error): "\(error)"
        case .closed: "the log is closed"
        case .mixedLogs(let file, let found, let expected):
            "log segment \(file) belongs to log \(found), but the other segments of this directory belong to log "
                + "\(expected): segments of two different logs were mixed (copied in from another server?). "
                + "Move the segments of the wrong log out of the directory; nothing was changed"
        }
    }
}

/// What scanning one segment file found.
struct SegmentScan {
    var path: String
    var header: SegmentHeader
    var fileSize: Int
    /// Byte position just past the last valid frame (seal included).
    var validEnd: Int
    /// The offset expected after the last valid record.
    var nextOffset: UInt64
    var seal: Seal?
    /// The first frame that broke a rule, with the offset that was expected there.
    var damage: (FrameDamage, position: Int, expectedOffset: UInt64)?
    /// What the scanned records add up to, for sealing or checking a seal.
    var accumulated: Seal
    /// The scan started at a remembered position rather than at the first record.
    var resumed = false
}

/// A frame boundary in a segment, remembered so that tailing does not rescan the file.
struct ScanPosition: Sendable, Equatable {
    var salt: UInt64
    var position: Int
    var nextOffset: UInt64
}

/// Reads a segment file frame by frame, applying every validity rule of docs/log-format.md.
struct SegmentScanner {
    /// The most one read asks for. A read asks for what the file holds past the position, up to
    /// this, straight into the decoder's buffer: a tailing reader (a projector at the log's end)
    /// reads a few new records at a time, and a fixed chunk cost each of its reads a zeroed
    /// mebibyte from malloc, twice (the read, then the one that finds the end).
    static let readChunkBytes = 1 << 20

    let io: any FileIO

    func header(path: String, fd: Int32) throws -> SegmentHeader {
        let bytes = try io.read(fd, count: LogFormat.segmentHeaderBytes, at: 0, path: path)
        do {
            return try SegmentHeader.decode(bytes[...])
        } catch {
            throw LogError.corrupt(file: path, position: 0, reason: error.description)
        }
    }

    /// Scans `path`; `visit` sees every valid record (not the seal) and returns false to stop early.
    /// Stops at the first damage and reports it rather than throwing: the caller decides whether
    /// it is a torn tail or corruption.
    ///
    /// `resume` starts at a frame boundary found by an earlier scan of the same file (same salt, so
    /// not rewritten since) instead of the first record; the seal's record count is then not checked.
    func scan(
        path: String, resume: ScanPosition? = nil, visit: (DecodedFrame) throws -> Bool = { _ in true }
    ) throws -> SegmentScan {
        let fd = try io.open(path, flags: O_RDONLY, mode: 0)
        defer { io.close(fd) }
        let header = try header(path: path, fd: fd)
        let fileSize = try io.fileSize(fd, path: path)
        let start = resume.flatMap { $0.salt == header.salt ? $0 : nil }
        var result = SegmentScan(
            path: path, header: header, fileSize: fileSize,
            validEnd: start?.position ?? LogFormat.segmentHeaderBytes,
            nextOffset: start?.nextOffset ?? header.baseOffset, seal: nil, damage: nil,
            accumulated: Seal(firstOffset: header.baseOffset), resumed: start != nil)
        var decoder = FrameDecoder(startPosition: result.validEnd)
        var readPosition = result.validEnd
        var readableEnd = fileSize
        scanning: while true {
            switch decoder.next() {
            case .frame(let frame):
                if let damage = check(frame, in: result, fileSize: fileSize) {
                    result.damage = (damage, frame.position, result.nextOffset)
                    break scanning
                }
                result.validEnd = frame.position + frame.frameBytes
                if frame.header.isSeal {
                    result.seal = try? Seal.decode(frame.payload[...])
                    break scanning
                }
                if let extent = frame.group {
                    result.accumulated.add(group: frame.header, extent: extent)
                } else {
                    result.accumulated.add(frame.header)
                }
                result.nextOffset = frame.endOffset
                if try !visit(frame) { break scanning }
            case .damaged(let damage, let position):
                result.damage = (damage, position, result.nextOffset)
                break scanning
            case .needMore:
                // A file being appended to may have grown since `fileSize`: its end is looked up
                // again once everything before it is read, as a read past it would find.
                if readPosition >= readableEnd { readableEnd = try io.fileSize(fd, path: path) }
                let count = min(Self.readChunkBytes, readableEnd - readPosition)
                let got =
                    count <= 0
                    ? 0
                    : try decoder.fill(count: count) { buffer in
                        try readFully(fd, into: buffer, at: readPosition, path: path)
                    }
                if got == 0 {
                    if decoder.pendingBytes > 0 {
                        result.damage = (.shortFrame, decoder.position, result.nextOffset)
                    }
                    break scanning
                }
                readPosition += got
            }
        }
        return result
    }

    /// Fills `buffer` from `offset`, continuing after short reads; fewer bytes only at end of file.
    private func readFully(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int, path: String
    )
        throws -> Int
    {
        var done = 0
        while done < buffer.count {
            let got = try io.pread(
                fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: offset + done,
                path: path)
            if got == 0 { break }
            done += got
        }
        return done
    }

    /// Rules 7–9, which need the segment's context.
    private func check(_ frame: DecodedFrame, in scan: SegmentScan, fileSize: Int) -> FrameDamage? {
        let header = frame.header
        guard header.salt == scan.header.salt else { return .badSalt }
        if header.isSeal {
            guard frame.position + frame.frameBytes == fileSize else {
                return .badSeal("data after the seal")
            }
            guard let seal = try? Seal.decode(frame.payload[...]),
                frame.payload.count == LogFormat.sealPayloadBytes
            else { return .badSeal("payload is not 64 bytes") }
            guard seal.firstOffset == scan.header.baseOffset else {
                return .badSeal("first offset differs from the header")
            }
            guard seal.endOffset >= scan.nextOffset, header.offset == seal.endOffset else {
                return .badSeal("end offset \(seal.endOffset) before the records it seals")
            }
            guard scan.resumed || seal.recordCount == scan.accumulated.recordCount else {
                return .badSeal(
                    "counts \(seal.recordCount) records, the segment holds \(scan.accumulated.recordCount)")
            }
            return nil
        }
        // Version 2: every record is a group; version 1: none is (rule 11).
        if scan.header.version >= 2 {
            guard let extent = frame.group, extent.memberCount >= 1,
                extent.offsetSpan >= extent.memberCount,
                scan.header.isRewritten || extent.offsetSpan == extent.memberCount
            else { return .badGroup }
        } else if frame.group != nil {
            return .badGroup
        }
        if scan.header.isRewritten {
            guard header.offset >= scan.nextOffset else {
                return .badOffset(expected: scan.nextOffset, found: header.offset)
            }
        } else if header.offset != scan.nextOffset {
            return .badOffset(expected: scan.nextOffset, found: header.offset)
        }
        return nil
    }
}

/// The segment files of a log directory, in offset order.
struct SegmentDirectory {
    let path: String
    let io: any FileIO

    var lockPath: String { path + "/LOCK" }
    var watermarkPath: String { path + "/durable" }

    func segmentPath(base: UInt64) -> String { path + "/" + LogFormat.segmentFileName(baseOffset: base) }

    /// Base offsets of the segment files present, ascending.
    func bases() throws -> [UInt64] {
        try io.list(path).compactMap { LogFormat.baseOffset(fileName: $0) }.sorted()
    }

    func temporaryFiles() throws -> [String] {
        try io.list(path).filter { $0.hasSuffix(".seg.tmp") }.map { path + "/" + $0 }
    }
}

/// The durable watermark file: `FMDW`, u16 version, u16 0, u64 durableEnd, u32 0, u32 crc32c.
enum Watermark {
    static let magic: [UInt8] = Array("FMDW".utf8)
    static let fileBytes = 24

    static func encode(_ durableEnd: UInt64) -> [UInt8] {
        var writer = ByteWriter(capacity: fileBytes)
        writer.raw(magic)
        writer.u16(1)
        writer.u16(0)
        writer.u64(durableEnd)
        writer.u32(0)
        writer.u32(CRC32C.checksum(writer.bytes))
        return writer.bytes
    }

    static func decode(_ bytes: [UInt8]) -> UInt64? {
        guard bytes.count == fileBytes, bytes.prefix(4).elementsEqual(magic),
            CRC32C.checksum(Array(bytes.prefix(20)))
                == UInt32(
                    littleEndian: bytes.withUnsafeBytes {
                        $0.loadUnaligned(fromByteOffset: 20, as: UInt32.self)
                    })
        else { return nil }
        return UInt64(
            littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self) })
    }

    static func read(path: String, io: any FileIO) -> UInt64? {
        guard let fd = try? io.open(path, flags: O_RDONLY, mode: 0) else { return nil }
        defer { io.close(fd) }
        guard let bytes = try? io.read(fd, count: fileBytes, at: 0, path: path) else { return nil }
        return decode(bytes)
    }
}

/// The writer lock of a log directory (flock on `LOCK`), taken by a command that must keep every
/// writer out while it reads the whole log (`findmy log export`). Held until released or until the
/// process ends; while held, a server cannot open the log (it says the log is locked).
public final class LogDirectoryLock: @unchecked Sendable {
    private let fd: Int32
    private let io: any FileIO

    /// The lock, or nil when a writer (a running server, another command) holds it.
    public static func take(directory: String, io: any FileIO = PosixFileIO()) throws -> LogDirectoryLock? {
        let path = SegmentDirectory(path: directory, io: io).lockPath
        let fd = try io.open(path, flags: O_CREAT | O_RDWR, mode: 0o600)
        guard try io.lockExclusive(fd, path: path) else {
            io.close(fd)
            return nil
        }
        return LogDirectoryLock(fd: fd, io: io)
    }

    private init(fd: Int32, io: any FileIO) {
        self.fd = fd
        self.io = io
    }

    deinit { io.close(fd) }
}
