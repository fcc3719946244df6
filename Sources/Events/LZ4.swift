import CLZ4

/// LZ4 block compression (liblz4's `LZ4_compress_default` / `LZ4_decompress_safe`).
public enum LZ4 {
    /// Compresses `input`; returns nil when it would not get smaller, so the caller stores it raw.
    public static func compress(_ input: [UInt8]) -> [UInt8]? {
        guard !input.isEmpty, input.count <= Int(LZ4_MAX_INPUT_SIZE) else { return nil }
        let bound = Int(LZ4_compressBound(Int32(input.count)))
        var output = [UInt8](repeating: 0, count: bound)
        let written = input.withUnsafeBytes { source in
            output.withUnsafeMutableBytes { destination in
                LZ4_compress_default(
                    source.baseAddress!.assumingMemoryBound(to: CChar.self),
                    destination.baseAddress!.assumingMemoryBound(to: CChar.self),
                    Int32(input.count), Int32(bound))
            }
        }
        guard written > 0, Int(written) < input.count else { return nil }
        output.removeLast(bound - Int(written))
        return output
    }

    /// Decompresses a block that must expand to exactly `uncompressedBytes`.
    public static func decompress(_ input: some ContiguousBytes, uncompressedBytes: Int) throws -> [UInt8] {
        guard uncompressedBytes > 0 else { return [] }
        var output = [UInt8](repeating: 0, count: uncompressedBytes)
        let written = input.withUnsafeBytes { source in
            output.withUnsafeMutableBytes { destination in
                LZ4_decompress_safe(
                    source.baseAddress?.assumingMemoryBound(to: CChar.self),
                    destination.baseAddress!.assumingMemoryBound(to: CChar.self),
                    Int32(source.count), Int32(uncompressedBytes))
            }
        }
        guard written == Int32(uncompressedBytes) else {
            throw DecodeError.invalid("LZ4 block does not expand to \(uncompressedBytes) bytes")
        }
        return output
    }
}
