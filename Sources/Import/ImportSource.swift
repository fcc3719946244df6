#if canImport(Glibc)
    import Glibc
#endif

/// Where an import's bytes come from: a file, or an entry of an archive being inflated. Each reader
/// pulls from one, a buffer at a time, so that a file of any size is read in bounded memory.
public protocol ByteSource {
    /// Fills the start of `buffer` and says how many bytes it wrote; 0 only at the end.
    mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int
}

/// A file read with read(2). The descriptor is closed by `close()` or when the source is dropped.
public final class FileByteSource: ByteSource {
    public let path: String
    private var descriptor: Int32

    public init(path: String) throws(ImportError) {
        self.path = path
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ImportError("cannot open \(path): \(String(cString: strerror(errno)))")
        }
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        guard descriptor >= 0, let base = buffer.baseAddress else { return 0 }
        while true {
            let count = Glibc.read(descriptor, base, buffer.count)
            if count >= 0 { return count }
            if errno == EINTR { continue }
            throw ImportError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
    }

    public func close() {
        if descriptor >= 0 { _ = Glibc.close(descriptor) }
        descriptor = -1
    }

    deinit { close() }
}

/// Bytes already in memory (a test's fixture, the first bytes kept for detection).
public struct MemoryByteSource: ByteSource {
    private let bytes: [UInt8]
    private var position = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        let count = min(buffer.count, bytes.count - position)
        guard count > 0, let base = buffer.baseAddress else { return 0 }
        bytes.withUnsafeBytes { base.copyMemory(from: $0.baseAddress! + position, byteCount: count) }
        position += count
        return count
    }
}
