extension EventCodec {
    /// The rejections of a fix batch record, read past its fixes without decoding them; nil for a
    /// record that is not a fix batch of a version this codec decodes (decode it whole instead).
    ///
    /// What a fold that keeps batch results needs (the registry: accepted count, which is the
    /// header's `fixCount`, and rejections). Decoding every fix only to count them was most of the
    /// registry snapshotter's cost per record while the server ingests, and of a start-up replay.
    /// Checks what `decode` checks of the fixes' framing (count, column size, nothing left over),
    /// not the fixes' values.
    public static func fixBatchRejections(header: RecordHeader, stored: [UInt8]) throws -> [Rejection]? {
        guard header.type == EventType.fixBatch.rawValue, header.eventVersion == 1 || header.eventVersion == 2
        else { return nil }
        if header.isPayloadRemoved {
            throw DecodeError.invalid("the payload of record \(header.offset) was removed by the compactor")
        }
        let payload = try rawPayload(header: header, stored: stored)
        var reader = ByteReader(payload)
        // Version 2 puts the rejections before the fixes; the fixes' framing is checked when they
        // are decoded (the projector), not here.
        if header.eventVersion == 2 {
            return try FixCodecV2.rejections(&reader, expectedCount: Int(header.fixCount))
        }
        try FixCodec.skip(&reader, expectedCount: Int(header.fixCount))
        let rejectionCount = Int(try reader.u32())
        guard rejectionCount <= reader.remaining / 6 else {
            throw DecodeError.invalid("rejection count \(rejectionCount) too large")
        }
        var rejections: [Rejection] = []
        for _ in 0..<rejectionCount {
            rejections.append(Rejection(index: try reader.u32(), reason: try reader.string()))
        }
        guard reader.remaining == 0 else {
            throw DecodeError.invalid("\(reader.remaining) unexpected bytes after a fix batch")
        }
        return rejections
    }
}
