import Threads

#if canImport(Glibc)
    import Glibc
#endif

// Opening a log directory: the lock, then recovery as docs/log-format.md specifies it ("Recovery"):
// unfinished rewrites removed, sealed segments checked end to end and for contiguity, and the last
// segment scanned, its torn tail truncated when nothing in it was ever acknowledged. Kept beside the
// writer and apart from it, as SQLite keeps its WAL recovery: the writer's hot path never runs it.
/// What opening the log found and did.
public struct RecoveryReport: Sendable, Equatable {
    public var tornBytesTruncated = 0
    public var tornFile: String?
    public var removedTemporaryFiles = 0
    public var removedIncompleteSegment: String?
    public var firstOffset: UInt64 = 0
    public var nextOffset: UInt64 = 0
    /// Set when this open gave a log written before log ids its id, from this offset on.
    public var logIDAssignedAtOffset: UInt64?
}

extension LogWriter {
    static let lockAttemptsMax = 50
    static let lockRetryMicros: UInt32 = 10_000

    static func takeLock(_ segments: SegmentDirectory, _ io: any FileIO) throws -> Int32 {
        let fd: Int32
        do {
            fd = try io.open(segments.lockPath, flags: O_CREAT | O_RDWR, mode: 0o600)
        } catch {
            throw LogError(error)
        }
        // A lock found taken is asked again for a short while: a process spawned by another thread
        // of ours shares our descriptors between its fork and its exec, so the lock of a writer we
        // just closed can outlive the close by that moment (seen in the test suite, where many
        // threads start servers). A real second writer still holds it after the wait.
        var locked = false
        for attempt in 0..<lockAttemptsMax {
            do {
                locked = try io.lockExclusive(fd, path: segments.lockPath)
            } catch {
                io.close(fd)
                throw LogError(error)
            }
            if locked || attempt == lockAttemptsMax - 1 { break }
            usleep(lockRetryMicros)
        }
        guard locked else {
            io.close(fd)
            throw LogError.locked(directory: segments.path)
        }
        return fd
    }

    struct Recovered {
        var active: ActiveSegment?
        var nextOffset: UInt64
        /// The non-zero log id the segments share (rule 10), or zero when none has one.
        var logID: UUID128 = .zero
        /// The id in the newest remaining segment's header.
        var newestLogID: UUID128 = .zero
    }

    /// Rule 10: every non-zero log id of the directory is the same one.
    static func checkLogID(_ header: SegmentHeader, path: String, _ logID: inout UUID128) throws {
        guard header.logID != .zero else { return }
        if logID == .zero {
            logID = header.logID
        } else if header.logID != logID {
            throw LogError.mixedLogs(file: path, found: header.logID, expected: logID)
        }
    }

    /// Every segment before the last: a valid header and seal, one log id, and contiguity. Returns
    /// where the last of them ends (nil when there is none) and their log ids.
    static func checkSealed(
        _ bases: ArraySlice<UInt64>, _ segments: SegmentDirectory, _ scanner: SegmentScanner
    ) throws -> (endOffset: UInt64?, logID: UUID128, newestLogID: UUID128) {
        var expectedBase = bases.first ?? 0
        var logID = UUID128.zero
        var newestSealedLogID = UUID128.zero
        for base in bases {
            let path = segments.segmentPath(base: base)
            let (header, seal) = try readSealed(path: path, scanner: scanner)
            try checkLogID(header, path: path, &logID)
            newestSealedLogID = header.logID
            guard header.baseOffset == base else {
                throw LogError.corrupt(
                    file: path, position: 24, reason: "header says base offset \(header.baseOffset)")
            }
            guard base == expectedBase else {
                throw LogError.corrupt(
                    file: path, position: 0,
                    reason: "segments are not contiguous: expected base offset \(expectedBase)")
            }
            expectedBase = seal.endOffset
        }
        return (bases.isEmpty ? nil : expectedBase, logID, newestSealedLogID)
    }

    /// Recovery on open, as docs/log-format.md specifies it ("Recovery on open").
    static func recover(
        _ segments: SegmentDirectory, _ options: LogOptions, _ report: inout RecoveryReport
    )
        throws -> Recovered
    {
        let io = options.io
        try removeUnfinishedRewrites(segments, options, &report)
        let durableHint = Watermark.read(path: segments.watermarkPath, io: io) ?? 0
        var bases = try segments.bases()
        let scanner = SegmentScanner(io: io)
        report.firstOffset = bases.first ?? 0
        let sealed = try checkSealed(bases.dropLast(), segments, scanner)
        let expectedBase = sealed.endOffset ?? bases.first ?? 0
        var logID = sealed.logID
        let newestSealedLogID = sealed.newestLogID

        guard let last = bases.last else { return Recovered(active: nil, nextOffset: 0) }
        let lastPath = segments.segmentPath(base: last)
        let scan: SegmentScan
        do {
            scan = try scanner.scan(path: lastPath)
        } catch LogError.corrupt(_, _, let reason) where last >= durableHint {
            // A crash while creating the segment: nothing in it was ever acknowledged.
            try io.unlink(lastPath)
            report.removedIncompleteSegment = lastPath
            options.diagnostics("log recovery: removed incomplete segment \(lastPath) (\(reason))")
            bases.removeLast()
            if bases.isEmpty { report.firstOffset = last }
            return Recovered(
                active: nil, nextOffset: bases.isEmpty ? last : expectedBase, logID: logID,
                newestLogID: newestSealedLogID)
        }
        try checkLogID(scan.header, path: lastPath, &logID)
        guard scan.header.baseOffset == last else {
            throw LogError.corrupt(
                file: lastPath, position: 24, reason: "header says base offset \(scan.header.baseOffset)")
        }
        guard bases.count == 1 || last == expectedBase else {
            throw LogError.corrupt(
                file: lastPath, position: 0,
                reason: "segments are not contiguous: expected base offset \(expectedBase)")
        }
        let validEnd = try truncateTornTail(
            scan, path: lastPath, durableHint: durableHint, options, &report)
        let nextOffset = scan.seal?.endOffset ?? scan.nextOffset
        guard nextOffset >= durableHint else {
            throw LogError.corrupt(
                file: lastPath, position: validEnd,
                reason:
                    "the log ends at offset \(nextOffset) but the durable watermark says \(durableHint) was durable"
            )
        }
        if scan.seal != nil {
            return Recovered(
                active: nil, nextOffset: nextOffset, logID: logID, newestLogID: scan.header.logID)
        }
        let fd = try io.open(lastPath, flags: O_WRONLY, mode: 0)
        // What a crashed writer left in the page cache becomes durable before anything is built on it.
        try io.fdatasync(fd, path: lastPath)
        let segment = ActiveSegment(
            fd: fd, path: lastPath, header: scan.header, size: validEnd, seal: scan.accumulated)
        return Recovered(
            active: segment, nextOffset: nextOffset, logID: logID, newestLogID: scan.header.logID)
    }

    /// Deletes the temporary files of rewrites a crash interrupted: the old segments are whole.
    private static func removeUnfinishedRewrites(
        _ segments: SegmentDirectory, _ options: LogOptions, _ report: inout RecoveryReport
    ) throws {
        let io = options.io
        for temporary in try segments.temporaryFiles() {
            try io.unlink(temporary)
            report.removedTemporaryFiles += 1
            options.diagnostics("log recovery: removed unfinished rewrite \(temporary)")
        }
    }

    /// Where the last segment's valid records end: a damaged tail past the durable watermark was
    /// never acknowledged and is truncated (and synced); below it, the log is corrupt.
    private static func truncateTornTail(
        _ scan: SegmentScan, path lastPath: String, durableHint: UInt64, _ options: LogOptions,
        _ report: inout RecoveryReport
    ) throws -> Int {
        guard let (damage, position, expected) = scan.damage else { return scan.fileSize }
        let io = options.io
        guard expected >= durableHint else {
            throw LogError.corrupt(
                file: lastPath, position: position,
                reason: "\(damage) at offset \(expected), below the durable watermark \(durableHint)")
        }
        let fd = try io.open(lastPath, flags: O_WRONLY, mode: 0)
        defer { io.close(fd) }
        try io.ftruncate(fd, size: position, path: lastPath)
        try io.fdatasync(fd, path: lastPath)
        report.tornBytesTruncated = scan.fileSize - position
        report.tornFile = lastPath
        options.diagnostics(
            "log recovery: truncated a torn tail of \(scan.fileSize - position) bytes at byte \(position) of \(lastPath) "
                + "(\(damage)); records from offset \(expected) on were never acknowledged")
        return position
    }

    /// The header and seal of a sealed segment, read from its two ends.
    static func readSealed(path: String, scanner: SegmentScanner) throws -> (SegmentHeader, Seal) {
        let io = scanner.io
        let fd = try io.open(path, flags: O_RDONLY, mode: 0)
        defer { io.close(fd) }
        let header = try scanner.header(path: path, fd: fd)
        let size = try io.fileSize(fd, path: path)
        let noSeal = LogError.corrupt(
            file: path, position: size, reason: "a segment before the last has no valid seal")
        guard size >= LogFormat.segmentHeaderBytes + 4 else { throw noSeal }
        let trailer = try io.read(fd, count: 4, at: size - 4, path: path)
        let body = Int(UInt32(littleEndian: trailer.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }))
        let frameStart = size - body - LogFormat.frameOverheadBytes
        guard body <= LogFormat.recordBytesMax, frameStart >= LogFormat.segmentHeaderBytes else {
            throw noSeal
        }
        var decoder = FrameDecoder(startPosition: frameStart)
        decoder.append(try io.read(fd, count: size - frameStart, at: frameStart, path: path))
        guard case .frame(let frame) = decoder.next(), frame.header.isSeal, frame.header.salt == header.salt,
            let seal = try? Seal.decode(frame.payload[...]), seal.firstOffset == header.baseOffset
        else { throw noSeal }
        return (header, seal)
    }
}
