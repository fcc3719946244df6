/// Little-endian writing and bounds-checked reading of the log's binary layouts.
///
/// `ByteWriter` appends to an array; `ByteReader` never reads past its slice and throws
/// `DecodeError.truncated` instead, so a damaged payload can never trap the reader.
public struct ByteWriter {
    public var bytes: [UInt8]

    public init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    @inline(__always) public mutating func u8(_ value: UInt8) { bytes.append(value) }

    @inline(__always) public mutating func u16(_ value: UInt16) { integer(value) }
    @inline(__always) public mutating func u32(_ value: UInt32) { integer(value) }
    @inline(__always) public mutating func u64(_ value: UInt64) { integer(value) }
    @inline(__always) public mutating func i64(_ value: Int64) { integer(value) }

    @inline(__always) mutating func integer<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    public mutating func raw(_ data: some Collection<UInt8>) { bytes.append(contentsOf: data) }

    /// LEB128: 7 bits per byte, low group first, high bit set on every byte but the last.
    @inline(__always) public mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    /// A string as varint length + UTF-8 (the fix batch payload, version 2).
    public mutating func varintString(_ value: String) {
        let utf8 = Array(value.utf8)
        varint(UInt64(utf8.count))
        raw(utf8)
    }

    /// A string as u16 length + UTF-8. Longer strings are a programmer error: ingest enforces
    /// much smaller limits on every field before it builds an event.
    public mutating func string(_ value: String) {
        let utf8 = Array(value.utf8)
        precondition(utf8.count <= Int(UInt16.max), "string field over 65535 bytes")
        u16(UInt16(utf8.count))
        raw(utf8)
    }
}

public enum DecodeError: Error, Equatable, CustomStringConvertible {
    case truncated(needed: Int, at: Int)
    case invalid(String)

    public var description: String {
        switch self {
        case .truncated(let needed, let at): "payload truncated: needed \(needed) bytes at byte \(at)"
        case .invalid(let reason): "invalid payload: \(reason)"
        }
    }
}

public struct ByteReader {
    public let bytes: ArraySlice<UInt8>
    public private(set) var position: Int

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        self.position = bytes.startIndex
    }

    public init(_ bytes: [UInt8]) { self.init(bytes[...]) }

    public var remaining: Int { bytes.endIndex - position }

    @inline(__always) mutating func need(_ count: Int) throws {
        if count > remaining { throw DecodeError.truncated(needed: count, at: position - bytes.startIndex) }
    }

    @inline(__always) mutating func integer<T: FixedWidthInteger>(_: T.Type) throws -> T {
        try need(MemoryLayout<T>.size)
        let value = bytes.withUnsafeBytes {
            $0.loadUnaligned(fromByteOffset: position - bytes.startIndex, as: T.self)
        }
        position += MemoryLayout<T>.size
        return T(littleEndian: value)
    }

    public mutating func u8() throws -> UInt8 { try integer(UInt8.self) }
    public mutating func u16() throws -> UInt16 { try integer(UInt16.self) }
    public mutating func u32() throws -> UInt32 { try integer(UInt32.self) }
    public mutating func u64() throws -> UInt64 { try integer(UInt64.self) }
    public mutating func i64() throws -> Int64 { try integer(Int64.self) }

    public mutating func raw(_ count: Int) throws -> ArraySlice<UInt8> {
        try need(count)
        defer { position += count }
        return bytes[position..<position + count]
    }

    /// LEB128 as `ByteWriter.varint` writes it; at most 10 bytes, and a 10th byte above 1 (bits
    /// past 64) is damage, not a value.
    @inline(__always) public mutating func varint() throws -> UInt64 {
        let start = position - bytes.startIndex
        let end = bytes.endIndex - bytes.startIndex
        var value: UInt64 = 0
        var index = start
        let complete: Bool = bytes.withUnsafeBufferPointer { buffer in
            var shift: UInt64 = 0
            while index < end {
                let byte = buffer[index]
                index += 1
                if shift == 63 && byte > 1 { return false }
                value |= UInt64(byte & 0x7f) << shift
                if byte < 0x80 { return true }
                shift += 7
                if shift > 63 { return false }
            }
            return false
        }
        guard complete else {
            if index >= end { throw DecodeError.truncated(needed: 1, at: end) }
            throw DecodeError.invalid("varint at byte \(start) is longer than 64 bits")
        }
        position = bytes.startIndex + index
        return value
    }

    public mutating func varintString() throws -> String {
        let count = try varint()
        guard count <= UInt64(remaining) else {
            throw DecodeError.truncated(needed: Int(clamping: count), at: position - bytes.startIndex)
        }
        return try utf8String(try raw(Int(count)))
    }

    public mutating func string() throws -> String {
        try utf8String(try raw(Int(try u16())))
    }

    private func utf8String(_ utf8: ArraySlice<UInt8>) throws -> String {
        guard let value = String(validating: utf8, as: UTF8.self) else {
            throw DecodeError.invalid("string field is not valid UTF-8")
        }
        return value
    }
}
