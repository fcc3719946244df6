import CNATS
import Events

// Retention on JetStream (docs/scale.md, "Retention by deletion"): a message cannot be rewritten in
// place, so what the local log's compactor does by rewriting a segment is done here by erasing the
// message (`js_EraseMsg`: removed from the stream on every replica, its bytes overwritten in the
// replicas' message blocks) and, when part of it lives on, publishing that part as a new message
// first. The policy (which fixes are dead) is the compactor's, applied by JetStreamRetention.

extension JetStreamLog {
    /// Opens the stream as it exists, with the partition count it was created with (a projector or
    /// a retention job needs no `--log-partitions`: the stream says it). Never creates it.
    public static func openExisting(_ configuration: JetStreamLogConfiguration) throws -> JetStreamLog {
        var existing = configuration
        existing.createsStream = false
        do {
            return try JetStreamLog(existing)
        } catch JetStreamLogError.wrongPartitionCount(_, let found, _) {
            existing.partitionCount = found
            return try JetStreamLog(existing)
        }
    }

    /// The log's identity, which a projection is bound to (`findmy_meta.generations.log_id`): a
    /// function of the stream's name and creation time, so every process sees the same id, and a
    /// stream deleted and created again is another log (its projection is rebuilt, as for a new
    /// local log at the same directory).
    public func logID() throws -> UUID128 {
        let created = try withStreamInfo { $0.Created }
        let identity = Array("findmy-jetstream-log:\(streamName.text):\(created)".utf8)
        return UUID128(high: Self.fnv1a64(identity, seed: 0), low: Self.fnv1a64(identity, seed: 1))
    }

    /// Erases the message at `offset` from the stream: gone from every replica's view, its bytes
    /// overwritten in their message blocks. Returns false when there is no message there (erased
    /// already, by an earlier run that crashed after it, say). Retried while no leader answers.
    @discardableResult
    public func erase(offset: UInt64) throws -> Bool {
        var code = jsErrCode(0)
        let (status, _) = retrying {
            code = jsErrCode(0)
            return (js_EraseMsg(jetStream, streamName.constant, offset + 1, nil, &code), code)
        }
        if status == NATS_OK { return true }
        if code == JSSequenceNotFoundErr || code == JSNoMessageFoundErr || status == NATS_NOT_FOUND {
            return false
        }
        throw JetStreamLogError.requestFailed("erase message \(offset + 1): \(Self.describe(status, code))")
    }

    /// Publishes `record`, what retention keeps of the message at `offset`, to its device's
    /// partition, and returns its offset once acknowledged (quorum, as an append). Its Msg-Id is
    /// `x<offset>`: a retention run repeated within the duplicate window (after a crash between
    /// this and the erase) gets the first copy back instead of storing a second.
    public func appendReplacement(_ record: EncodedEvent, replacing offset: UInt64) throws -> UInt64 {
        let partition = partition(ofDevice: record.header.deviceKey)
        return try publish(Self.messageBytes(record), partition: partition, messageID: "x\(offset)").sequence
            - 1
    }

    static func fnv1a64(_ bytes: [UInt8], seed: UInt8) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in [seed] + bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }
}
