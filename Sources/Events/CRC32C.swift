/// CRC-32C (Castagnoli), the checksum of every segment header and record frame.
///
/// Software slicing-by-8: eight 256-entry tables let the loop consume eight bytes per step, which
/// is several times faster than the bytewise form and fast enough that checksumming is never the
/// bottleneck of an append or a replay (see docs/benchmarks.md).
public enum CRC32C {
    private static let polynomialReflected: UInt32 = 0x82F6_3B78

    private static let tables: [[UInt32]] = {
        var tables = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for index in 0..<256 {
            var crc = UInt32(index)
            for _ in 0..<8 {
                crc = (crc & 1) != 0 ? (crc >> 1) ^ polynomialReflected : crc >> 1
            }
            tables[0][index] = crc
        }
        for index in 0..<256 {
            var crc = tables[0][index]
            for slice in 1..<8 {
                crc = tables[0][Int(crc & 0xFF)] ^ (crc >> 8)
                tables[slice][index] = crc
            }
        }
        return tables
    }()

    private static let flatTable: [UInt32] = tables.flatMap { $0 }

    /// Continues a CRC over `bytes`; start with `checksum(bytes)` or pass a previous result.
    public static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var state = ~crc
        flatTable.withUnsafeBufferPointer { table in
            var index = 0
            let count = bytes.count
            while index + 8 <= count {
                let word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self).littleEndian
                let low = UInt32(truncatingIfNeeded: word) ^ state
                let high = UInt32(truncatingIfNeeded: word >> 32)
                state =
                    table[7 * 256 + Int(low & 0xFF)] ^ table[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ table[5 * 256 + Int((low >> 16) & 0xFF)] ^ table[4 * 256 + Int(low >> 24)]
                    ^ table[3 * 256 + Int(high & 0xFF)] ^ table[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ table[1 * 256 + Int((high >> 16) & 0xFF)] ^ table[Int(high >> 24)]
                index += 8
            }
            while index < count {
                state = table[Int((state ^ UInt32(bytes[index])) & 0xFF)] ^ (state >> 8)
                index += 1
            }
        }
        return ~state
    }

    public static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        update(0, bytes)
    }

    public static func checksum(_ bytes: some ContiguousBytes) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}

/// Byte containers whose storage can be read in place; `[UInt8]` and `ArraySlice<UInt8>` conform.
public protocol ContiguousBytes {
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: ContiguousBytes where Element == UInt8 {}
extension ArraySlice: ContiguousBytes where Element == UInt8 {}
