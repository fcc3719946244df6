#if canImport(Glibc)
    import Glibc
#endif

/// A sealed segment, as its file and seal describe it.
public struct SealedSegment: Sendable, Equatable {
    public var base: UInt64
    /// The seal's `endOffset`: the next segment's base.
    public var endOffset: UInt64
    public var bytes: Int

    public init(base: UInt64, endOffset: UInt64, bytes: Int) {
        self.base = base
        self.endOffset = endOffset
        self.bytes = bytes
    }
}

/// The segment files of the log: the sealed ones in order, and the base of the open one.
public struct SegmentLayout: Sendable, Equatable {
    public var sealed: [SealedSegment]
    /// nil right after a roll, until the next append starts a segment.
    public var active: UInt64?
}

extension LogWriter {
    /// The segments as they are now. Sealed segments never change except by this writer's
    /// rewrites and deletions, which the (single) compactor makes.
    public func segmentLayout() throws -> SegmentLayout {
        let active = activeBase
        let scanner = SegmentScanner(io: options.io)
        var sealed: [SealedSegment] = []
        for base in try segments.bases() where active.map({ base < $0 }) ?? true {
            let path = segments.segmentPath(base: base)
            let (_, seal) = try Self.readSealed(path: path, scanner: scanner)
            let fd = try options.io.open(path, flags: O_RDONLY, mode: 0)
            defer { options.io.close(fd) }
            sealed.append(
                SealedSegment(
                    base: base, endOffset: seal.endOffset, bytes: try options.io.fileSize(fd, path: path)))
        }
        return SegmentLayout(sealed: sealed, active: active)
    }

    /// Deletes the first segment of the log, which must be sealed and followed by another segment
    /// (docs/log-format.md, "Rewrite"): the log then starts at the next segment's base. Unlink, then
    /// fsync the directory; a crash in between leaves the file or not, and either is a valid log.
    public func deleteFirstSegment(base: UInt64) throws {
        let bases = try segments.bases()
        precondition(bases.first == base && bases.count >= 2, "only the first of several segments is deleted")
        if let activeBase, base >= activeBase {
            preconditionFailure("the active segment \(base) is never deleted")
        }
        do {
            try options.io.unlink(segments.segmentPath(base: base))
            try options.io.syncDirectory(directory)
        } catch {
            throw LogError(error)
        }
    }
}
