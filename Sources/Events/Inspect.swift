#if canImport(Glibc)
    import Glibc
#endif

/// One problem `verify` found.
public struct LogProblem: Sendable, Equatable {
    public var file: String
    public var position: Int
    public var reason: String
}

public struct VerifyReport: Sendable {
    public var segments = 0
    public var records = 0
    public var fixes = 0
    public var firstOffset: UInt64?
    public var lastOffset: UInt64?
    public var bytes = 0
    /// The log's id (rule 10's common one), nil when no segment has one.
    public var logID: UUID128?
    public var recordsByType: [UInt8: Int] = [:]
    public var unknownRecords = 0
    public var tornBytesTruncated = 0
    /// True when the writer lock was free, so recovery ran before the check.
    public var recovered = false
    public var problems: [LogProblem] = []

    public var ok: Bool { problems.isEmpty }
}

/// Checks, summarises and repairs a log directory (the `findmy log` commands).
public struct LogInspector {
    public let directory: String
    let io: any FileIO

    public init(directory: String, io: any FileIO = PosixFileIO()) {
        self.directory = directory
        self.io = io
    }

    /// Checks every frame of every segment (CRC, framing, offsets, seals, contiguity) and decodes
    /// every payload. If no writer holds the log, opens it first so that a torn tail is truncated
    /// (and reported) exactly as a restart would; otherwise checks only up to the durable watermark.
    public func verify(decodePayloads: Bool = true) throws -> VerifyReport {
        var report = VerifyReport()
        let writer = try openToRecover(&report)
        defer { writer?.close() }
        let segments = SegmentDirectory(path: directory, io: io)
        let durableEnd = writer?.durableEnd ?? Watermark.read(path: segments.watermarkPath, io: io) ?? 0
        let bases = try segments.bases()
        let scanner = SegmentScanner(io: io)
        var expectedBase = bases.first
        for (index, base) in bases.enumerated() {
            let path = segments.segmentPath(base: base)
            let isLast = index == bases.count - 1
            report.segments += 1
            let scan: SegmentScan
            do {
                scan = try scanner.scan(path: path) { frame in
                    let members: [GroupMember]
                    do {
                        members = try frame.members(path: path)
                    } catch LogError.corrupt(let file, let position, let reason) {
                        report.problems.append(LogProblem(file: file, position: position, reason: reason))
                        return true
                    }
                    for member in members {
                        count(
                            member, position: frame.position, into: &report, path: path,
                            decode: decodePayloads)
                    }
                    return true
                }
            } catch LogError.corrupt(let file, let position, let reason) {
                report.problems.append(LogProblem(file: file, position: position, reason: reason))
                continue
            }
            report.bytes += scan.fileSize
            checkHeader(scan, path: path, base: base, expectedBase: expectedBase, into: &report)
            if let (damage, position, expected) = scan.damage, !(isLast && expected >= durableEnd) {
                report.problems.append(
                    LogProblem(file: path, position: position, reason: "\(damage) at offset \(expected)"))
            } else if !isLast && scan.seal == nil {
                report.problems.append(
                    LogProblem(
                        file: path, position: scan.fileSize, reason: "a segment before the last has no seal"))
            }
            expectedBase = scan.seal?.endOffset ?? scan.nextOffset
        }
        return report
    }

    /// Opens the log as a restart would, so that a torn tail is truncated and reported; nil when a
    /// writer holds it, or when its segments break a rule (reported with the rule, or segment by
    /// segment below).
    private func openToRecover(_ report: inout VerifyReport) throws -> LogWriter? {
        do {
            let writer = try LogWriter(directory: directory, options: quietOptions())
            report.recovered = true
            report.tornBytesTruncated = writer.recovery.tornBytesTruncated
            return writer
        } catch LogError.locked {
            return nil
        } catch LogError.corrupt(let file, let position, let reason) {
            report.problems.append(LogProblem(file: file, position: position, reason: reason))
            return nil
        } catch LogError.mixedLogs {
            // Reported segment by segment, like every other rule.
            return nil
        }
    }

    /// A segment header's log id (the same in every segment), base offset (its file name's) and
    /// place (where the previous segment ended).
    private func checkHeader(
        _ scan: SegmentScan, path: String, base: UInt64, expectedBase: UInt64?,
        into report: inout VerifyReport
    ) {
        if scan.header.logID != .zero {
            if let logID = report.logID, logID != scan.header.logID {
                report.problems.append(
                    LogProblem(
                        file: path, position: 44,
                        reason: LogError.mixedLogs(file: path, found: scan.header.logID, expected: logID)
                            .description))
            } else {
                report.logID = scan.header.logID
            }
        }
        if scan.header.baseOffset != base {
            report.problems.append(
                LogProblem(
                    file: path, position: 24, reason: "header says base offset \(scan.header.baseOffset)")
            )
        }
        if let expectedBase, base != expectedBase {
            report.problems.append(
                LogProblem(
                    file: path, position: 0,
                    reason: "segments are not contiguous: expected base offset \(expectedBase)"))
        }
    }

    private func count(
        _ frame: GroupMember, position: Int, into report: inout VerifyReport, path: String, decode: Bool
    ) {
        let header = frame.header
        report.records += 1
        // An envelope (payload removed by the compactor) keeps its original count but holds no fix.
        if !header.isPayloadRemoved { report.fixes += Int(header.fixCount) }
        report.firstOffset = min(report.firstOffset ?? header.offset, header.offset)
        report.lastOffset = max(report.lastOffset ?? header.offset, header.offset)
        report.recordsByType[header.type, default: 0] += 1
        guard decode, !header.isPayloadRemoved else { return }
        do {
            if case .unknown = try EventCodec.decode(header: header, stored: frame.payload) {
                report.unknownRecords += 1
            }
        } catch {
            report.problems.append(
                LogProblem(file: path, position: position, reason: "offset \(header.offset): \(error)"))
        }
    }

    public struct RepairReport: Sendable {
        public var cutFile: String?
        public var cutPosition = 0
        /// The log now ends here; offsets from it on were moved to quarantine.
        public var newEndOffset: UInt64 = 0
        public var quarantine: String?
        public var movedFiles: [String] = []
    }

    /// Cuts the log at its first damaged frame: the damaged tail of that segment and every later
    /// segment are moved to `log/quarantine/<time>/` (never deleted), the cut segment is sealed if it
    /// is not the last, and the watermark is set to the new end. Needs the writer lock.
    public func repair(nowMicros: Int64 = wallClockMicros()) throws -> RepairReport {
        let segments = SegmentDirectory(path: directory, io: io)
        let lock = try io.open(segments.lockPath, flags: O_CREAT | O_RDWR, mode: 0o600)
        defer { io.close(lock) }
        guard try io.lockExclusive(lock, path: segments.lockPath) else {
            throw LogError.locked(directory: directory)
        }
        var report = RepairReport()
        let bases = try segments.bases()
        let scanner = SegmentScanner(io: io)
        var expectedBase = bases.first ?? 0
        for (index, base) in bases.enumerated() {
            let path = segments.segmentPath(base: base)
            let isLast = index == bases.count - 1
            let scan: SegmentScan
            do {
                scan = try scanner.scan(path: path)
            } catch LogError.corrupt {
                try quarantine(Array(bases[index...]), cut: nil, &report, nowMicros)
                report.newEndOffset = expectedBase
                break
            }
            let broken = scan.damage != nil || (!isLast && scan.seal == nil) || base != expectedBase
            if !broken {
                expectedBase = scan.seal?.endOffset ?? scan.nextOffset
                report.newEndOffset = expectedBase
                continue
            }
            if base != expectedBase {
                try quarantine(Array(bases[index...]), cut: nil, &report, nowMicros)
                break
            }
            try quarantine(Array(bases[(index + 1)...]), cut: (scan, path), &report, nowMicros)
            report.newEndOffset = scan.nextOffset
            break
        }
        let watermark = try io.open(segments.watermarkPath, flags: O_CREAT | O_WRONLY, mode: 0o600)
        defer { io.close(watermark) }
        try io.writeAll(watermark, Watermark.encode(report.newEndOffset), at: 0, path: segments.watermarkPath)
        try io.fdatasync(watermark, path: segments.watermarkPath)
        try io.syncDirectory(directory)
        return report
    }

    private func quarantine(
        _ bases: [UInt64], cut: (SegmentScan, String)?, _ report: inout RepairReport, _ nowMicros: Int64
    ) throws {
        let segments = SegmentDirectory(path: directory, io: io)
        let folder = directory + "/quarantine/" + String(nowMicros)
        try io.makeDirectory(directory + "/quarantine")
        try io.makeDirectory(folder)
        report.quarantine = folder
        if let (scan, path) = cut {
            // Keep the damaged bytes, then cut and seal the segment where the valid frames end.
            let fd = try io.open(path, flags: O_RDWR, mode: 0)
            defer { io.close(fd) }
            let tail = try io.read(fd, count: scan.fileSize - scan.validEnd, at: scan.validEnd, path: path)
            let tailPath =
                folder + "/" + LogFormat.segmentFileName(baseOffset: scan.header.baseOffset)
                + ".tail-at-\(scan.validEnd)"
            let tailFD = try io.open(tailPath, flags: O_CREAT | O_TRUNC | O_WRONLY, mode: 0o600)
            try io.writeAll(tailFD, tail, at: 0, path: tailPath)
            try io.fdatasync(tailFD, path: tailPath)
            io.close(tailFD)
            try io.ftruncate(fd, size: scan.validEnd, path: path)
            var seal = scan.accumulated
            seal.endOffset = scan.nextOffset
            let frame = Frame.encoded(
                header: seal.recordHeader(salt: scan.header.salt, sealedAtMicros: nowMicros),
                payload: seal.encoded())
            try io.writeAll(fd, frame, at: scan.validEnd, path: path)
            try io.fdatasync(fd, path: path)
            report.cutFile = path
            report.cutPosition = scan.validEnd
            report.movedFiles.append(tailPath)
        }
        for base in bases {
            let from = segments.segmentPath(base: base)
            let to = folder + "/" + LogFormat.segmentFileName(baseOffset: base)
            try io.rename(from, to)
            report.movedFiles.append(to)
        }
        try io.syncDirectory(folder)
    }

    private func quietOptions() -> LogOptions {
        var options = LogOptions()
        options.io = io
        options.diagnostics = { _ in }
        options.assignsLogID = false
        return options
    }
}
