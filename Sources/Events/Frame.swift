/// Record frames: `u32 B | u32 crc32c(body) | body | u32 B`, where body = record header + payload.
public enum Frame {
    /// Appends one complete frame to `buffer` and returns its size in bytes.
    @discardableResult
    public static func append(
        header: RecordHeader, headerExtension: [UInt8] = [], payload: some Collection<UInt8>,
        to buffer: inout [UInt8]
    )
        -> Int
    {
        let headerBytes = LogFormat.recordHeaderBytes + headerExtension.count
        let bodyBytes = headerBytes + payload.count
        precondition(
            bodyBytes <= LogFormat.recordBytesMax, "record body of \(bodyBytes) bytes over recordBytesMax")
        var writer = ByteWriter()
        swap(&writer.bytes, &buffer)
        let start = writer.bytes.count
        writer.u32(UInt32(bodyBytes))
        writer.u32(0)  // the CRC, patched below once the body is in place
        header.write(to: &writer, headerBytes: headerBytes)
        writer.raw(headerExtension)
        writer.raw(payload)
        writer.u32(UInt32(bodyBytes))
        swap(&writer.bytes, &buffer)
        let crc = buffer.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[(start + 8)..<(start + 8 + bodyBytes)]))
        }
        buffer.withUnsafeMutableBytes {
            $0.storeBytes(of: crc.littleEndian, toByteOffset: start + 4, as: UInt32.self)
        }
        return bodyBytes + LogFormat.frameOverheadBytes
    }

    public static func encoded(header: RecordHeader, payload: some Collection<UInt8>) -> [UInt8] {
        var buffer: [UInt8] = []
        append(header: header, payload: payload, to: &buffer)
        return buffer
    }

    /// A record as a message of a JetStream log or an entry of a log export: one record frame with
    /// salt and offset 0, because its position is the log's (JetStream's sequence), not its own.
    public static func message(_ record: EncodedEvent) -> [UInt8] {
        var header = record.header
        header.salt = 0
        header.offset = 0
        return encoded(header: header, payload: record.payload)
    }
}

/// Why a frame was refused; the cases follow the validity rules of docs/log-format.md in order.
public enum FrameDamage: Equatable, Sendable, CustomStringConvertible {
    case shortFrame
    case badLength(UInt32)
    case badCRC
    case badTrailer
    case badHeader
    case badSalt
    case badOffset(expected: UInt64, found: UInt64)
    case badSeal(String)
    case badGroup

    public var description: String {
        switch self {
        case .shortFrame: "incomplete frame (short-frame)"
        case .badLength(let length): "frame length \(length) out of range (bad-length)"
        case .badCRC: "checksum mismatch (bad-crc)"
        case .badTrailer: "trailing length differs from the leading one (bad-trailer)"
        case .badHeader: "record header size out of range (bad-header)"
        case .badSalt: "record salt is not the segment's: a stale record (bad-salt)"
        case .badOffset(let expected, let found):
            "offset \(found) where \(expected) was expected (bad-offset)"
        case .badSeal(let why): "seal record inconsistent: \(why) (bad-seal)"
        case .badGroup:
            "a version-2 segment holds a record that is not a group record, or a group whose member count and "
                + "offset span disagree, or a version-1 segment holds a group record (bad-group)"
        }
    }
}

/// A frame as read: its header, its payload as stored (still compressed), and where it was.
public struct DecodedFrame: Sendable {
    public var header: RecordHeader
    public var payload: [UInt8]
    /// Byte position of the frame in the stream that was fed to the decoder.
    public var position: Int
    public var frameBytes: Int
    /// Set for a group record (type 254 with a header of at least 96 bytes).
    public var group: GroupExtent?

    /// The offset after the last one this frame covers.
    public var endOffset: UInt64 { header.offset + UInt64(group?.offsetSpan ?? 1) }
}

/// Splits a byte stream into frames, checking rules 1–6 of the format (the per-frame rules; salt,
/// offset and seal are the segment scanner's). Feeding the same bytes whole, in pieces or one
/// byte at a time gives the same frames: a frame is only returned once all of it has arrived.
public struct FrameDecoder {
    public enum Next {
        case frame(DecodedFrame)
        case needMore
        case damaged(FrameDamage, position: Int)
    }

    private var input: StreamInput

    public init(startPosition: Int = 0) {
        input = StreamInput(origin: startPosition)
    }

    /// Stream position of the next undecoded byte.
    public var position: Int { input.position }
    /// Bytes fed but not yet returned as a frame.
    public var pendingBytes: Int { input.available }

    public mutating func append(_ bytes: some Collection<UInt8>) { input.append(bytes) }

    /// Appends up to `count` bytes that `read` writes into the decoder's own buffer (it returns
    /// how many it wrote): no intermediate array, and the buffer's storage is reused from one
    /// fill to the next. Returns what `read` returned.
    public mutating func fill(count: Int, _ read: (UnsafeMutableRawBufferPointer) throws -> Int) rethrows
        -> Int
    {
        try input.fill(count: count, read)
    }

    public mutating func next() -> Next {
        let available = input.bytes.count - input.start
        guard available >= 8 else { return .needMore }
        let (bodyLength, storedCRC) = input.bytes.withUnsafeBytes { raw in
            (
                UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: input.start, as: UInt32.self)),
                UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: input.start + 4, as: UInt32.self))
            )
        }
        guard bodyLength >= LogFormat.recordHeaderBytes, bodyLength <= LogFormat.recordBytesMax else {
            return .damaged(.badLength(bodyLength), position: position)
        }
        let body = Int(bodyLength)
        let frameBytes = body + LogFormat.frameOverheadBytes
        guard available >= frameBytes else { return .needMore }
        let bodyStart = input.start + 8
        let (crc, trailer) = input.bytes.withUnsafeBytes { raw in
            (
                CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[bodyStart..<(bodyStart + body)])),
                UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: bodyStart + body, as: UInt32.self))
            )
        }
        guard crc == storedCRC else { return .damaged(.badCRC, position: position) }
        guard trailer == bodyLength else { return .damaged(.badTrailer, position: position) }
        let bodySlice = input.bytes[bodyStart..<(bodyStart + body)]
        guard let (header, headerBytes) = try? RecordHeader.read(from: bodySlice),
            headerBytes >= LogFormat.recordHeaderBytes, headerBytes <= body
        else { return .damaged(.badHeader, position: position) }
        var group: GroupExtent?
        if header.isGroup {
            guard headerBytes >= LogFormat.groupHeaderBytes,
                let extent = try? GroupExtent.read(
                    bodySlice.dropFirst(LogFormat.recordHeaderBytes).prefix(GroupExtent.bytes))
            else { return .damaged(.badHeader, position: position) }
            group = extent
        }
        let frame = DecodedFrame(
            header: header, payload: Array(bodySlice.dropFirst(headerBytes)), position: position,
            frameBytes: frameBytes, group: group)
        input.start += frameBytes
        return .frame(frame)
    }
}

/// What a streaming decoder was fed and has not consumed yet: `bytes[start...]`, at stream position
/// `origin + start`. Consumed bytes are dropped once they are half the buffer, so feeding a long
/// stream in pieces costs linear time and bounded memory.
struct StreamInput {
    var bytes: [UInt8] = []
    var start = 0
    /// Stream position of `bytes[0]`.
    var origin: Int

    init(origin: Int = 0) { self.origin = origin }

    var position: Int { origin + start }
    var available: Int { bytes.count - start }

    mutating func append(_ more: some Collection<UInt8>) {
        compact()
        bytes.append(contentsOf: more)
    }

    mutating func fill(count: Int, _ read: (UnsafeMutableRawBufferPointer) throws -> Int) rethrows -> Int {
        precondition(count >= 0)
        compact()
        let end = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: count))
        var got = 0
        defer { bytes.removeLast(count - got) }
        got = try bytes.withUnsafeMutableBytes { raw in
            try read(UnsafeMutableRawBufferPointer(rebasing: raw[end...]))
        }
        precondition(got >= 0 && got <= count, "a fill wrote \(got) bytes into \(count)")
        return got
    }

    /// Drops the bytes already returned once they are half the buffer, keeping its storage.
    private mutating func compact() {
        if start > 0 && start >= bytes.count / 2 {
            bytes.removeFirst(start)
            origin += start
            start = 0
        }
    }
}
