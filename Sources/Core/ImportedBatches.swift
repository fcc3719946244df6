import Events

// The fix batches of imports, kept beyond the ring of recent results. An import cuts a file into
// chunks of at most 1,000 fixes, each a fix batch whose id is derived from the file's content and
// the chunk's position (ImportChunker), so that importing the same file again, or resuming an
// interrupted import, is answered chunk by chunk as duplicates. The ring (`RecentBatches`,
// `recentBatchesPerDeviceMax`, 256 by default) would forget all but the last chunks of a large
// file, and a re-import would store the others twice: so every batch whose protocol is an import
// format is also kept here, per device, with no eviction. It holds what the header tells (offset
// and accepted count, about 40 bytes a chunk in memory, 28 in a snapshot), never the rejections,
// which can be a thousand a chunk (an old history is mostly outside the retention window).
//
// It goes with its device (`device_removed`), and with the envelope: once the compactor drops a
// batch's record past the arrivals window, a full scan no longer finds it. By then every fix of
// it is past the device's window and gone too (an envelope outlives its fixes), so the same file
// imported again still stores nothing twice: its fixes are refused as expired, or, under a window
// widened since, stored once more where nothing of them is left. An erasure keeps the envelopes,
// and so the batch ids: the same file imported after an erasure is answered as duplicates.

extension Registry {
    /// What the registry keeps of one imported fix batch: where it was stored and how many of its
    /// fixes were accepted.
    struct ImportedBatch: Equatable, Sendable {
        var offset: UInt64
        var accepted: UInt32
    }

    /// A stored import batch's result, as far as the registry keeps it (no rejections).
    func importedBatchResult(deviceID: UInt64, batchID: UUID128) -> BatchResult? {
        guard let batch = importedBatches[deviceID]?[batchID] else { return nil }
        return BatchResult(offset: batch.offset, accepted: Int(batch.accepted), rejections: [])
    }

    /// How many import batches the registry keeps for the device (tests, diagnostics).
    public func importedBatchCount(deviceID: UInt64) -> Int { importedBatches[deviceID]?.count ?? 0 }

    /// Keeps a fix batch whose protocol is an import format; any other batch is the ring's alone.
    /// A batch id stored again takes the later result, as the ring does, so that both answer alike.
    mutating func rememberIfImported(
        deviceID: UInt64, batchID: UUID128, _ clientProtocol: ClientProtocol, offset: UInt64, accepted: Int
    ) {
        guard clientProtocol.importFormat != nil else { return }
        precondition(accepted >= 0 && accepted <= Int(UInt32.max), "a fix batch holds at most 2^32-1 fixes")
        importedBatches[deviceID, default: [:]][batchID] = ImportedBatch(
            offset: offset, accepted: UInt32(accepted))
    }
}

// Version 9 of the snapshot body appends the import batches: u32 device count, then per device
// u64 device id, u32 batch count, and per batch 16 bytes batch id, u64 offset, u32 accepted.
extension Registry {
    func encodeImportedBatchesPart(_ w: inout ByteWriter) {
        w.u32(UInt32(importedBatches.count))
        for (device, batches) in importedBatches {
            w.u64(device)
            w.u32(UInt32(batches.count))
            for (id, batch) in batches {
                w.uuid(id)
                w.u64(batch.offset)
                w.u32(batch.accepted)
            }
        }
    }

    mutating func decodeImportedBatchesPart(_ r: inout ByteReader) throws {
        for _ in 0..<(try r.u32()) {
            let device = try r.u64()
            let count = Int(try r.u32())
            // 28 bytes a batch: a count the rest of the file cannot hold is damage, not a reservation.
            guard count <= r.remaining / 28 else {
                throw DecodeError.invalid(
                    "\(count) import batches of device \(device) in \(r.remaining) bytes")
            }
            guard importedBatches[device] == nil, count > 0 else {
                throw DecodeError.invalid("the import batches of device \(device) are inconsistent")
            }
            var batches: [UUID128: ImportedBatch] = [:]
            batches.reserveCapacity(count)
            for _ in 0..<count {
                let id = try r.uuid()
                batches[id] = ImportedBatch(offset: try r.u64(), accepted: try r.u32())
            }
            guard batches.count == count else {
                throw DecodeError.invalid("an import batch of device \(device) is listed twice")
            }
            importedBatches[device] = batches
        }
    }
}
