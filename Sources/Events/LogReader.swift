import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A record as read from the log: its header (always), its stored payload (unless skipped).
public struct LogRecord: Sendable {
    public var header: RecordHeader
    /// The payload as stored (compressed); empty when the reader was asked to skip it.
    public var storedPayload: [UInt8]
    public var segmentPath: String
    public var position: Int

    public var offset: UInt64 { header.offset }

    public init(header: RecordHeader, storedPayload: [UInt8], segmentPath: String, position: Int) {
        self.header = header
        self.storedPayload = storedPayload
        self.segmentPath = segmentPath
        self.position = position
    }

    /// Decodes the event; decompresses the payload.
    public func event() throws -> Event {
        try EventCodec.decode(header: header, stored: storedPayload)
    }
}

/// Reads a log directory, from this process or another, without taking the writer lock.
///
/// Reads never go past the durable watermark: a record that is written but not yet synced is not
/// visible, so a projection can never get ahead of what a crash would keep. With a `writer` (same
/// process) the watermark comes from memory and tailing wakes at once; otherwise it is read from
/// `log/durable` and tailing polls it.
public struct LogReader: Sendable {
    public let directory: String
    let io: any FileIO
    let writer: LogWriter?
    /// How often a reader in another process looks for new durable records while tailing.
    public var tailPollMicros: Int64 = 20_000
    /// Where the last read stopped, so that the next read from there (tailing, a projector's
    /// next batch) continues in place instead of rescanning the segment from its start.
    private let resumePoint = ResumePoint()

    public init(directory: String, io: any FileIO = PosixFileIO(), writer: LogWriter? = nil) {
        self.directory = directory
        self.io = io
        self.writer = writer
    }

    var segments: SegmentDirectory { SegmentDirectory(path: directory, io: io) }

    /// Every offset below this is durable and may be read.
    public func durableEnd() -> UInt64 {
        if let writer { return writer.durableEnd }
        return Watermark.read(path: segments.watermarkPath, io: io) ?? 0
    }

    /// The log's identity (docs/log-format.md, "Log identity"): the id in the newest segment header
    /// that has one, usually the newest's own (one 64-byte read). nil when no segment has one: a
    /// log written before log ids that no writer of this version has opened yet.
    public func logID() throws -> UUID128? {
        if let writer { return writer.logID == .zero ? nil : writer.logID }
        let scanner = SegmentScanner(io: io)
        for base in try segments.bases().reversed() {
            let path = segments.segmentPath(base: base)
            // A newest segment being created (not yet a whole header), or a first one a compaction
            // just deleted: the one before (or after) says the same.
            guard let fd = try? io.open(path, flags: O_RDONLY, mode: 0) else { continue }
            defer { io.close(fd) }
            guard let header = try? scanner.header(path: path, fd: fd) else { continue }
            if header.logID != .zero { return header.logID }
        }
        return nil
    }

    /// The first offset still in the log (older segments may have been removed by the compactor).
    public func firstOffset() throws -> UInt64 {
        try segments.bases().first ?? 0
    }

    /// Visits the records with offsets in `from..<end` (end defaults to the durable watermark), in
    /// order. `wantPayload` decides per header whether the payload is kept (a scan for one type
    /// skips the rest without decompressing anything). `visit` returns false to stop. Returns the
    /// offset after the last record visited (or `end` when the range was read to its end).
    @discardableResult
    public func read(
        from start: UInt64, upTo end: UInt64? = nil, wantPayload: (RecordHeader) -> Bool = { _ in true },
        _ visit: (LogRecord) throws -> Bool
    ) throws -> UInt64 {
        let limit = end ?? durableEnd()
        guard start < limit else { return start }
        let bases = try segments.bases()
        let startIndex = (bases.lastIndex { $0 <= start }) ?? 0
        var next = start
        let scanner = SegmentScanner(io: io)
        for base in bases[startIndex...] {
            if base >= limit { break }
            let path = segments.segmentPath(base: base)
            var stopped = false
            var lastFrameEnd: ScanPosition?
            let resume = resumePoint.get(base: base, nextOffset: start)
            let scan = try scanner.scan(path: path, resume: resume) { frame in
                if frame.header.offset >= limit { return false }
                if frame.endOffset <= start { return true }
                var finished = true
                defer {
                    // After a whole frame, resume after it; after part of a group, at its start
                    // (the members below the next start are skipped again).
                    lastFrameEnd = ScanPosition(
                        salt: frame.header.salt,
                        position: finished ? frame.position + frame.frameBytes : frame.position,
                        nextOffset: finished ? frame.endOffset : frame.header.offset)
                }
                guard frame.group != nil else {
                    var record = LogRecord(
                        header: frame.header, storedPayload: [], segmentPath: path, position: frame.position)
                    if wantPayload(frame.header) { record.storedPayload = frame.payload }
                    next = frame.header.offset + 1
                    if try !visit(record) {
                        stopped = true
                        return false
                    }
                    return true
                }
                for member in try frame.members(path: path, wantPayload: wantPayload) {
                    let offset = member.header.offset
                    if offset < start { continue }
                    if offset >= limit {
                        finished = false
                        return false
                    }
                    let record = LogRecord(
                        header: member.header,
                        storedPayload: member.payload,
                        segmentPath: path, position: frame.position)
                    next = offset + 1
                    if try !visit(record) {
                        stopped = true
                        finished = member.header.offset + 1 == frame.endOffset
                        return false
                    }
                }
                return true
            }
            if let lastFrameEnd { resumePoint.set(base: base, lastFrameEnd) }
            if stopped { return next }
            if let (damage, position, expected) = scan.damage, expected < limit {
                throw LogError.corrupt(
                    file: path, position: position, reason: "\(damage) at offset \(expected)")
            }
        }
        // Every record below `limit` was visited; offsets a rewrite dropped are gaps, not missing.
        return limit
    }

    /// Waits until the durable end passes `end`, `stop` is requested, or the timeout elapses. With
    /// the writer in this process it sleeps until the writer rings (records became durable, or it
    /// closed); a log written by another process is looked at every `tailPollMicros`. A stop
    /// request wakes it at once either way.
    public func waitForNewRecords(after end: UInt64, timeoutMicros: Int64, stop: StopSignal? = nil) {
        let bell = Doorbell()
        // Added before the first look, so that a ring between the look and the sleep is kept.
        writer?.addDoorbell(bell)
        stop?.addDoorbell(bell)
        defer {
            writer?.removeDoorbell(bell)
            stop?.removeDoorbell(bell)
        }
        let deadline = monotonicMicros() + timeoutMicros
        while durableEnd() <= end && stop?.isRequested != true && writer?.isClosed != true {
            let now = monotonicMicros()
            guard now < deadline else { return }
            bell.wait(untilMonotonicMicros: writer == nil ? min(deadline, now + tailPollMicros) : deadline)
        }
    }

    /// Reads everything from `start`, then waits for new durable records and reads them too, until
    /// `shouldStop` says so (checked at least every `tailPollMicros`). Returns the next offset.
    @discardableResult
    public func follow(
        from start: UInt64, shouldStop: () -> Bool, wantPayload: (RecordHeader) -> Bool = { _ in true },
        _ visit: (LogRecord) throws -> Void
    ) throws -> UInt64 {
        var next = start
        while !shouldStop() {
            let end = durableEnd()
            if end > next {
                next = try read(from: next, upTo: end, wantPayload: wantPayload) { record in
                    try visit(record)
                    return true
                }
                continue
            }
            waitForNewRecords(after: end, timeoutMicros: tailPollMicros)
        }
        return next
    }
}

extension DecodedFrame {
    /// The requests of a group record, as records of their own; a damaged body is reported as
    /// damage at the frame's position (the CRC matched: a writer bug or a flipped bit it missed).
    func members(path: String, wantPayload: (RecordHeader) -> Bool = { _ in true }) throws -> [GroupMember] {
        guard let extent = group else { return [GroupMember(header: header, payload: payload)] }
        do {
            return try GroupRecord.members(
                header: header, extent: extent, stored: payload, wantPayload: wantPayload)
        } catch {
            throw LogError.corrupt(
                file: path, position: position, reason: "group record at offset \(header.offset): \(error)")
        }
    }
}

/// The one remembered position of a reader (the end of the last frame it handed out).
private final class ResumePoint: @unchecked Sendable {
    private let lock = ConditionLock(conditions: 0)
    private var base: UInt64 = 0
    private var position: ScanPosition?

    /// The remembered position if it is in segment `wanted` at or before `nextOffset` (a reader
    /// skips the records between, so resuming before is correct; only resuming after is not).
    func get(base wanted: UInt64, nextOffset: UInt64) -> ScanPosition? {
        lock.withLock {
            guard base == wanted, let position, position.nextOffset <= nextOffset else { return nil }
            return position
        }
    }

    func set(base newBase: UInt64, _ newPosition: ScanPosition) {
        lock.withLock {
            base = newBase
            position = newPosition
        }
    }
}
