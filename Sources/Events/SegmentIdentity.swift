#if canImport(Glibc)
    import Glibc
#endif

/// Which version of a segment file is on disk: its base, and the salt and generation of its header.
/// A rewrite (the compactor's, `LogWriter.rewriteSegment`) changes the salt and raises the
/// generation; appending and sealing change neither. Something derived from a segment's records
/// (a registry snapshot, docs/snapshots.md) is still derived from this file while these agree.
public struct SegmentIdentity: Sendable, Equatable {
    public var base: UInt64
    public var salt: UInt64
    public var generation: UInt32

    public init(base: UInt64, salt: UInt64, generation: UInt32) {
        self.base = base
        self.salt = salt
        self.generation = generation
    }
}

extension LogReader {
    /// The identity of every segment whose base is below `end`, ascending: one 64-byte header read
    /// per segment. A segment whose header cannot be read is reported with generation and salt
    /// zero, which matches no real header's pair of a rewritten segment and makes a caller
    /// comparing identities see a change.
    public func segmentIdentities(below end: UInt64) throws -> [SegmentIdentity] {
        let scanner = SegmentScanner(io: io)
        var identities: [SegmentIdentity] = []
        for base in try segments.bases() where base < end {
            let path = segments.segmentPath(base: base)
            guard let fd = try? io.open(path, flags: O_RDONLY, mode: 0) else {
                identities.append(SegmentIdentity(base: base, salt: 0, generation: 0))
                continue
            }
            defer { io.close(fd) }
            if let header = try? scanner.header(path: path, fd: fd) {
                identities.append(
                    SegmentIdentity(base: base, salt: header.salt, generation: header.generation))
            } else {
                identities.append(SegmentIdentity(base: base, salt: 0, generation: 0))
            }
        }
        return identities
    }
}
