import Crypto
import Events
import Synchronization

/// A file's fixes cut into chunks, each stored as one log record through the report path, each with
/// a batch id derived from the file's content and the chunk's position
/// (docs/import-export.md, "How an import is stored"):
///
///     batch id = the first 16 bytes of SHA-256(file SHA-256 (32 bytes) || format name (UTF-8)
///                || chunk index (8 bytes, big-endian)), with the UUID version set to 8 and the
///                variant to RFC 9562's
///
/// The same file read again cuts the same chunks with the same ids, so a second import, or the
/// rest of one that was interrupted, is answered as the batches already stored and adds nothing.
/// The file's SHA-256 must therefore be known before the first chunk: the caller reads the file
/// twice (`ImportFileDigest.sha256`, then the reader), which an upload streamed to disk allows.
///
/// Memory is one chunk: `chunkFixesMax` fixes. Items that are not fixes go to the summary only.
public struct ImportChunker<Reader: FixReader> {
    /// Fixes in one chunk by default: a tenth of the report API's batch limit (`batchFixesMax`,
    /// 10,000 in IngestLimits), so that a chunk is a small record and progress moves often.
    public static var chunkFixesMaxDefault: Int { 1_000 }
    /// The report path refuses a batch of more fixes than this (IngestLimits.batchFixesMax).
    public static var chunkFixesMaxLimit: Int { 10_000 }

    private var reader: Reader
    public let fileSHA256: [UInt8]
    public let format: ImportFormat
    public let chunkFixesMax: Int
    private var nextIndex: UInt64 = 0
    private var finished = false
    public private(set) var summary: ImportSummary
    /// The bytes the reader's source handed out, when it is a CountingByteSource: the summary's
    /// `bytesRead`.
    private let bytesCounter: ByteCounter?

    public init(
        reader: Reader, fileSHA256: [UInt8], format: ImportFormat, summary: ImportSummary = ImportSummary(),
        bytesCounter: ByteCounter? = nil, chunkFixesMax: Int = chunkFixesMaxDefault
    ) {
        precondition(fileSHA256.count == SHA256.digestByteCount, "a file's SHA-256 is 32 bytes")
        precondition(
            chunkFixesMax > 0 && chunkFixesMax <= Self.chunkFixesMaxLimit, "chunkFixesMax \(chunkFixesMax)")
        self.reader = reader
        self.fileSHA256 = fileSHA256
        self.format = format
        self.summary = summary
        self.chunkFixesMax = chunkFixesMax
        self.bytesCounter = bytesCounter
    }

    /// The next chunk, nil after the last. A file without fixes has no chunk. An error of the
    /// reader ends the import: the fixes read since the last chunk are not handed out, so a
    /// damaged file stores none of a chunk it could not read whole.
    public mutating func next() throws(ImportError) -> ImportChunk? {
        guard !finished else { return nil }
        var fixes: [Fix] = []
        fixes.reserveCapacity(chunkFixesMax)
        while fixes.count < chunkFixesMax {
            guard let item = try reader.next() else {
                finished = true
                break
            }
            summary.add(item)
            if case .fix(let fix) = item { fixes.append(fix) }
        }
        if let bytesCounter { summary.bytesRead = bytesCounter.bytes }
        guard !fixes.isEmpty else { return nil }
        let index = nextIndex
        nextIndex += 1
        return ImportChunk(
            index: index, batchID: Self.batchID(fileSHA256: fileSHA256, format: format, chunkIndex: index),
            fixes: fixes)
    }

    public static func batchID(fileSHA256: [UInt8], format: ImportFormat, chunkIndex: UInt64) -> UUID128 {
        var input = fileSHA256
        input.append(contentsOf: format.rawValue.utf8)
        withUnsafeBytes(of: chunkIndex.bigEndian) { input.append(contentsOf: $0) }
        var bytes = Array(SHA256.hash(input).prefix(16))
        // RFC 9562's UUIDv8 ("custom"): a well-formed UUID to any tool that checks, and one that
        // says it was not drawn at random.
        bytes[6] = bytes[6] & 0x0F | 0x80
        bytes[8] = bytes[8] & 0x3F | 0x80
        return UUID128(bytes: bytes)
    }
}

/// One chunk of an import: its position in the file (from 0), its batch id and its fixes.
public struct ImportChunk: Equatable, Sendable {
    public var index: UInt64
    public var batchID: UUID128
    public var fixes: [Fix]
}

/// A file's SHA-256, read a buffer at a time (the first of an import's two passes).
public enum ImportFileDigest {
    public static let bufferBytes = 256 << 10

    public static func sha256<Source: ByteSource>(_ source: Source) throws(ImportError) -> (
        digest: [UInt8], bytes: Int64
    ) {
        var source = source
        let stream = SHA256.Stream()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferBytes, alignment: 16)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        while true {
            let count = try source.read(into: buffer)
            if count == 0 { break }
            stream.update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            total += Int64(count)
        }
        return (stream.finish(), total)
    }

    public static func sha256(path: String) throws(ImportError) -> (digest: [UInt8], bytes: Int64) {
        let file = try FileByteSource(path: path)
        defer { file.close() }
        return try sha256(file)
    }
}

/// Bytes a CountingByteSource has handed out. A class, because the reader owns the source and the
/// import's progress reads the count beside it; atomic, because that progress is read on other
/// threads (an import job's status) while the reading thread adds to it.
public final class ByteCounter: Sendable {
    private let count = Atomic<Int64>(0)
    public init() {}

    public var bytes: Int64 { count.load(ordering: .relaxed) }

    /// Starts over, for a second pass over the same file.
    public func reset() { count.store(0, ordering: .relaxed) }

    fileprivate func add(_ bytes: Int) { count.add(Int64(bytes), ordering: .relaxed) }
}

/// A ByteSource that counts what it hands out, for an import's progress (bytes read of the file's
/// size).
public struct CountingByteSource<Source: ByteSource>: ByteSource {
    private var source: Source
    public let counter: ByteCounter

    public init(_ source: Source, counter: ByteCounter = ByteCounter()) {
        self.source = source
        self.counter = counter
    }

    public mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        let count = try source.read(into: buffer)
        counter.add(count)
        return count
    }
}
