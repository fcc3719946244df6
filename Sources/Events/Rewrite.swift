import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What the retention compactor wants done with one record of a segment being rewritten. In a
/// version-2 segment a record is one request of a group record: the decision is per request, and
/// the group is written again holding the requests kept or replaced.
public enum RewriteDecision: Sendable {
    case keep
    /// Remove the record; its offset becomes a gap (offsets of other records never change).
    case drop
    /// Keep the record's offset, type and `received_at`, with a new payload (fewer fixes, say).
    case replace(EncodedEvent)
}

public struct RewriteReport: Sendable, Equatable {
    public var recordsKept = 0
    public var recordsDropped = 0
    public var recordsReplaced = 0
    public var bytesBefore = 0
    public var bytesAfter = 0
}

extension LogWriter {
    /// Rewrites the sealed segment starting at `base` through `decide`, crash-safely: a temporary
    /// file with a new salt is written and synced, renamed over the old one, and the directory
    /// synced. A crash leaves either the old segment or the new one, never a mix; a leftover
    /// temporary file is deleted on the next open. Readers that opened the old file keep reading it.
    public func rewriteSegment(base: UInt64, _ decide: (LogRecord) throws -> RewriteDecision) throws
        -> RewriteReport
    {
        if let activeBase, base >= activeBase {
            preconditionFailure("only sealed segments are rewritten; \(base) is the active segment")
        }
        let path = segments.segmentPath(base: base)
        let io = options.io
        let scanner = SegmentScanner(io: io)
        let (oldHeader, oldSeal) = try Self.readSealed(path: path, scanner: scanner)
        let header = Self.rewrittenHeader(of: oldHeader, base: base)

        var report = RewriteReport()
        var output = header.encoded()
        var seal = Seal(firstOffset: base)
        /// The record as `decide` wants it, or nil when dropped.
        func rewritten(_ record: LogRecord) throws -> (RecordHeader, [UInt8])? {
            var newHeader = record.header
            var payload = record.storedPayload
            switch try decide(record) {
            case .keep:
                report.recordsKept += 1
            case .drop:
                report.recordsDropped += 1
                return nil
            case .replace(let encoded):
                report.recordsReplaced += 1
                let member = GroupRecord.member(encoded)
                newHeader = header.version >= 2 ? member.header : encoded.header
                payload = header.version >= 2 ? member.payload : encoded.payload
                newHeader.offset = record.header.offset
                newHeader.type = record.header.type
                newHeader.receivedAtMicros = record.header.receivedAtMicros
            }
            newHeader.salt = header.salt
            return (newHeader, payload)
        }
        let scan = try scanner.scan(path: path) { frame in
            guard frame.group != nil else {
                let record = LogRecord(
                    header: frame.header, storedPayload: frame.payload, segmentPath: path,
                    position: frame.position)
                guard let (newHeader, payload) = try rewritten(record) else { return true }
                Frame.append(header: newHeader, payload: payload, to: &output)
                seal.add(newHeader)
                return true
            }
            var survivors: [GroupMember] = []
            for member in try frame.members(path: path) {
                let record = LogRecord(
                    header: member.header, storedPayload: member.payload, segmentPath: path,
                    position: frame.position)
                guard let (newHeader, payload) = try rewritten(record) else { continue }
                survivors.append(GroupMember(header: newHeader, payload: payload))
            }
            // A group none of whose requests survive leaves no record: its offsets become gaps.
            guard !survivors.isEmpty else { return true }
            let (groupHeader, extent) = GroupRecord.append(members: survivors, salt: header.salt, to: &output)
            seal.add(group: groupHeader, extent: extent)
            return true
        }
        if let (damage, position, _) = scan.damage {
            throw LogError.corrupt(file: path, position: position, reason: "\(damage)")
        }
        report.bytesBefore = scan.fileSize
        seal.endOffset = oldSeal.endOffset
        Frame.append(
            header: seal.recordHeader(salt: header.salt, sealedAtMicros: options.clockMicros()),
            payload: seal.encoded(), to: &output)
        report.bytesAfter = output.count

        try install(output, at: path)
        return report
    }

    /// The rewritten segment's header: the old one's creation time, log and format version,
    /// a new salt (no record of the old file validates in the new one), marked rewritten, and the
    /// next generation.
    private static func rewrittenHeader(of oldHeader: SegmentHeader, base: UInt64) -> SegmentHeader {
        var header = SegmentHeader(
            salt: UInt64.random(in: 1...UInt64.max), baseOffset: base,
            createdAtMicros: oldHeader.createdAtMicros,
            flags: oldHeader.flags | LogFormat.segmentFlagRewritten, generation: oldHeader.generation + 1,
            logID: oldHeader.logID)
        // A segment keeps its format version: version-1 records stay records of their own, a
        // version-2 group stays one group holding the requests that survive.
        header.version = oldHeader.version
        return header
    }

    /// Writes and syncs a temporary file beside `path`, renames it over `path` and syncs the
    /// directory. A failed rename or directory sync is a failed sync, handed to `onSyncFailure`,
    /// which does not return.
    private func install(_ output: [UInt8], at path: String) throws {
        let temporaryPath = path + ".tmp"
        let io = options.io
        do {
            let fd = try io.open(temporaryPath, flags: O_CREAT | O_TRUNC | O_WRONLY, mode: 0o600)
            defer { io.close(fd) }
            try io.writeAll(fd, output, at: 0, path: temporaryPath)
            try io.fdatasync(fd, path: temporaryPath)
        } catch {
            try? io.unlink(temporaryPath)
            throw LogError.writeFailed(IOError(error))
        }
        do {
            try io.rename(temporaryPath, path)
            try io.syncDirectory(directory)
        } catch {
            syncFailed.store(true, ordering: .sequentiallyConsistent)
            options.onSyncFailure(IOError(error))
        }
    }
}
