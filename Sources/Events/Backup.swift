#if canImport(Glibc)
    import Glibc
#endif

/// A consistent copy of a log directory, taken while a writer and a compactor may be working on it
/// (`findmy backup`, docs/backup.md).
///
/// Why it is consistent without stopping anyone:
///
/// 1. The segment files are listed first, then the durable watermark `W` is read. Every segment
///    but the last of that listing is sealed: complete and durable.
/// 2. A sealed segment's file is never changed in place: a compaction writes a new file and renames
///    it over the name, and deletes only whole first segments. Each file is opened **once** and
///    copied from that descriptor, so the copy is one version of it, old or new, never a mix; both
///    versions hold the same offsets (rewrites keep the seal's first and end offsets), so a copy that
///    mixes rewritten and older segments is still a contiguous log. A first segment that is gone
///    when it is opened was deleted by a compaction: it is skipped (the log then starts later, as
///    it does after such a deletion).
/// 3. The last segment only grows. Its bytes are copied, then the copy is scanned and cut at the
///    last frame whose offset is below `W` (every such frame is complete on disk before `W` says
///    so); a seal is kept when every record before it is. The copy's own watermark is written to
///    match its end. The copy is thus a valid log whose every record was durable at `W`.
/// 4. Every copied file, the watermark and the directory are fsynced.
///
/// Segments are copied byte for byte, headers included, so the copy is the same log: it keeps the
/// log id (docs/log-format.md, "Log identity"), and a projection of it stays bound to it.
public struct LogBackup {
    public struct Report: Sendable, Equatable {
        public var segments = 0
        public var bytes = 0
        public var firstOffset: UInt64 = 0
        /// Every offset below this is in the copy (the copy's watermark).
        public var durableEnd: UInt64 = 0
        /// The source's watermark when the copy was cut.
        public var sourceDurableEnd: UInt64 = 0
        /// First segments a concurrent compaction deleted between listing and copying.
        public var segmentsGoneMeanwhile = 0
        /// The id of the log copied (the copy's own, being the same log); nil for a log written
        /// before log ids that no writer of this version has opened.
        public var logID: UUID128?
    }

    static let copyChunkBytes = 1 << 20

    let io: any FileIO

    public init(io: any FileIO = PosixFileIO()) { self.io = io }

    /// Copies the log in `source` into `destination`, which must exist and be empty.
    public func copy(from source: String, to destination: String) throws -> Report {
        let directory = SegmentDirectory(path: source, io: io)
        let bases = try directory.bases()
        guard !bases.isEmpty else {
            throw LogError.corrupt(file: source, position: 0, reason: "no segment to back up")
        }
        guard let watermark = Watermark.read(path: directory.watermarkPath, io: io) else {
            throw LogError.corrupt(
                file: directory.watermarkPath, position: 0, reason: "unreadable durable watermark")
        }
        var report = Report(sourceDurableEnd: watermark)
        var copied: [UInt64] = []
        for (index, base) in bases.enumerated() {
            let name = LogFormat.segmentFileName(baseOffset: base)
            let bytes: Int
            do {
                bytes = try copyFile(directory.segmentPath(base: base), to: destination + "/" + name)
            } catch let error as IOError
                where error.errno == ENOENT && copied.isEmpty && index < bases.count - 1
            {
                report.segmentsGoneMeanwhile += 1
                continue
            }
            copied.append(base)
            report.bytes += bytes
        }
        guard let last = copied.last else {
            throw LogError.corrupt(file: source, position: 0, reason: "no segment copied")
        }
        let cut = try cutActive(
            path: destination + "/" + LogFormat.segmentFileName(baseOffset: last), below: watermark)
        report.bytes -= cut.bytesDropped
        report.durableEnd = cut.end
        report.segments = copied.count
        report.firstOffset = copied[0]
        report.logID = try LogReader(directory: destination, io: io).logID()
        let watermarkPath = destination + "/durable"
        let fd = try io.open(watermarkPath, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        defer { io.close(fd) }
        try io.writeAll(fd, Watermark.encode(cut.end), at: 0, path: watermarkPath)
        try io.fsync(fd, path: watermarkPath)
        try io.syncDirectory(destination)
        return report
    }

    /// Copies one file from a single descriptor (one version of it), fsyncs the copy; returns bytes.
    public func copyFile(_ from: String, to: String) throws -> Int {
        let input = try io.open(from, flags: O_RDONLY, mode: 0)
        defer { io.close(input) }
        let output = try io.open(to, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
        defer { io.close(output) }
        var position = 0
        while true {
            let chunk = try io.read(input, count: Self.copyChunkBytes, at: position, path: from)
            if chunk.isEmpty { break }
            try io.writeAll(output, chunk, at: position, path: to)
            position += chunk.count
        }
        try io.fsync(output, path: to)
        return position
    }

    /// Cuts the copied last segment after its last frame below `watermark`; returns the copy's end.
    func cutActive(path: String, below watermark: UInt64) throws -> (end: UInt64, bytesDropped: Int) {
        var keptEnd = LogFormat.segmentHeaderBytes
        var nextOffset: UInt64?
        var refused = false
        let scan = try SegmentScanner(io: io).scan(path: path) { frame in
            // A group record is durable whole or not at all: its end, not its start, is compared.
            guard frame.endOffset <= watermark else {
                refused = true
                return false
            }
            keptEnd = frame.position + frame.frameBytes
            nextOffset = frame.endOffset
            return true
        }
        var end = nextOffset ?? scan.header.baseOffset
        if !refused, let seal = scan.seal, seal.endOffset <= watermark {
            keptEnd = scan.validEnd
            end = seal.endOffset
        } else if !refused, let damage = scan.damage, damage.expectedOffset < watermark {
            throw LogError.corrupt(
                file: path, position: damage.position,
                reason: "damaged below the durable watermark: \(damage.0)")
        }
        let dropped = scan.fileSize - keptEnd
        if dropped > 0 {
            let fd = try io.open(path, flags: O_WRONLY, mode: 0)
            defer { io.close(fd) }
            try io.ftruncate(fd, size: keptEnd, path: path)
            try io.fsync(fd, path: path)
        }
        return (end, dropped)
    }
}
