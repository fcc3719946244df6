/// The lines of a byte source (LF or CRLF), for the line-oriented formats (CSV, OwnTracks
/// Recorder). Memory: one buffer, grown only for a line longer than it, up to `lineBytesMax`.
struct LineReader<Source: ByteSource> {
    private var source: Source
    private var buffer: [UInt8]
    private var start = 0
    private var filled = 0
    private var atEnd = false
    /// The file's offset of `buffer[0]`.
    private var bufferOffset: Int64 = 0
    /// The last line's number (1-based) and its offset in the file.
    private(set) var lineNumber = 0
    private(set) var lineOffset: Int64 = 0

    static var lineBytesMax: Int { 1024 * 1024 }

    init(_ source: Source, bufferBytes: Int = 64 * 1024) {
        self.source = source
        buffer = [UInt8](repeating: 0, count: bufferBytes)
    }

    /// The next line without its line ending, or nil at the end of the file.
    mutating func next() throws(ImportError) -> ArraySlice<UInt8>? {
        var scanned = start
        while true {
            if let newline = buffer[scanned..<filled].firstIndex(of: 0x0A) {
                return take(upTo: newline, skipping: 1)
            }
            scanned = filled
            if atEnd {
                if start == filled { return nil }
                return take(upTo: filled, skipping: 0)
            }
            try refill(scanned: &scanned)
        }
    }

    private mutating func take(upTo end: Int, skipping: Int) -> ArraySlice<UInt8> {
        lineNumber += 1
        lineOffset = bufferOffset + Int64(start)
        var lineEnd = end
        if lineEnd > start && buffer[lineEnd - 1] == 0x0D { lineEnd -= 1 }
        let line = buffer[start..<lineEnd]
        start = end + skipping
        return line
    }

    private mutating func refill(scanned: inout Int) throws(ImportError) {
        if start > 0 {
            buffer.replaceSubrange(0..<filled - start, with: buffer[start..<filled])
            bufferOffset += Int64(start)
            filled -= start
            scanned -= start
            start = 0
        }
        if filled == buffer.count {
            guard buffer.count < Self.lineBytesMax else {
                throw ImportError(
                    "a line longer than \(Self.lineBytesMax) bytes", byteOffset: bufferOffset,
                    line: lineNumber + 1)
            }
            buffer.append(
                contentsOf: repeatElement(0, count: min(buffer.count, Self.lineBytesMax - buffer.count)))
        }
        // The source apart from the buffer while the buffer is lent out (one access to self each).
        var reading = source
        let start = filled
        let result = buffer.withUnsafeMutableBytes { bytes in
            Result { () throws(ImportError) -> Int in
                try reading.read(into: UnsafeMutableRawBufferPointer(rebasing: bytes[start...]))
            }
        }
        source = reading
        let count = try result.get()
        if count == 0 { atEnd = true }
        filled += count
    }
}
