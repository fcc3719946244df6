/// A ByteSource behind a class, for the C libraries that pull bytes through a callback with one
/// context pointer (libxml2's xmlReaderForIO, libarchive's archive_read_open): the callback is a
/// free `@convention(c)` function that reaches the source through `Unmanaged<CallbackInput>`.
/// A source's error cannot cross the C library, so it is kept here and thrown by the Swift caller
/// once the library reports a failure.
class CallbackInput {
    /// The first error the source threw; the library only sees a failed read.
    var sourceError: ImportError?
    /// Bytes handed to the library so far (an archive's compressed bytes, for the inflation ratio).
    var bytesRead: Int64 = 0

    /// Fills `buffer` from the source; 0 at its end. Overridden by `SourceInput`.
    func fill(_ buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int { 0 }

    /// `fill` for a C callback: -1 after an error, which is kept in `sourceError`.
    final func fillForC(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard sourceError == nil else { return -1 }
        do {
            let count = try fill(buffer)
            bytesRead += Int64(count)
            return count
        } catch {
            sourceError = error
            return -1
        }
    }
}

/// The CallbackInput of one ByteSource, which it owns.
final class SourceInput<Source: ByteSource>: CallbackInput {
    private var source: Source

    init(_ source: Source) { self.source = source }

    override func fill(_ buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        try source.read(into: buffer)
    }
}
