import Events

#if canImport(Glibc)
    import Glibc
#endif

/// A device's history read from the local event log itself, as the server would still show it:
/// without the fixes an erasure covers, without a removed device's, and without those past the
/// device's retention window (`RetentionPolicy.fixDeath`, the compactor's and the projector's own
/// rule), whether or not a compaction has taken them out of the log yet. It needs no PostgreSQL and
/// no writer lock, so it works beside a running server and with the database down.
///
/// Two passes over the log up to one durable end, each in constant memory: the first folds the
/// device's enrolment, erasures, removal and the retention changes that reach it (`facts`); the
/// second hands out its fixes (`write`), a batch at a time, in log order (the order they arrived
/// in, each batch in its own order), which is not the API's `recorded_at` order.
public enum LogHistory {
    /// What the first pass learned about one device.
    public struct DeviceFacts: Sendable {
        public var deviceID: UInt64
        public var name: String
        /// Where the log stood when the first pass began. The second reads up to the same point,
        /// so the file is the history as of one offset (what the server shows once its projection
        /// is there): a fix appended after the erasures and windows were read is not in it.
        public var endOffset: UInt64
        /// The device's erasures and removal, its own and its user's windows, every other user's
        /// window (a handful of numbers), and the server's default.
        public var policy: RetentionPolicy
    }

    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        case unknownDevice(UInt64)
        case removedDevice(UInt64, offset: UInt64)

        public var description: String {
            switch self {
            case .unknownDevice(let id):
                "no device \(id) in this log: `findmy log dump --data-dir DIR` lists the device_enrolled "
                    + "records, with each device's id"
            case .removedDevice(let id, let offset):
                "device \(id) was removed (log offset \(offset)): the server shows none of its history, "
                    + "and an export gives none either"
            }
        }
    }

    /// How the second pass went: fixes written, and those of the range it left out and why.
    public struct Counts: Equatable, Sendable {
        public var written = 0
        public var expired = 0
        public var erased = 0
        public init() {}
    }

    /// First pass: the records that decide what of the device is shown. Fix batches and every
    /// other device's records are passed over by their header, without decompressing them.
    public static func facts(
        device: UInt64, reader: LogReader, settings: RetentionSettings
    ) throws -> DeviceFacts {
        let end = reader.durableEnd()
        var policy = RetentionPolicy(settings: settings)
        var name: String?
        let wanted: (RecordHeader) -> Bool = { header in
            switch EventType(rawValue: header.type) {
            case .deviceEnrolled, .historyErased, .deviceRemoved: header.deviceKey == device
            // A user's window has no device in its header (0): read them all, they are few.
            case .retentionChanged: header.deviceKey == device || header.deviceKey == 0
            default: false
            }
        }
        try readSkippingDeletedSegments(reader, upTo: end, wantPayload: wanted) { record in
            let event = try record.event()
            if case .deviceEnrolled(let enrolled) = event, enrolled.deviceID == device {
                name = name ?? enrolled.name
            }
            policy.apply(event, offset: record.offset)
        }
        guard let name else { throw Failure.unknownDevice(device) }
        if let removed = policy.removedAt[device] { throw Failure.removedDevice(device, offset: removed) }
        return DeviceFacts(deviceID: device, name: name, endOffset: end, policy: policy)
    }

    /// Second pass: each live fix of the device with `recorded_at` in `fromMicros..<toMicros`
    /// (either bound optional, as the API's `from` and `to`), handed to `write` with its
    /// `received_at`. A batch wholly outside the range is passed over by its header.
    public static func fixes(
        of facts: DeviceFacts, reader: LogReader, fromMicros: Int64?, toMicros: Int64?, nowMicros: Int64,
        _ write: (Fix, _ receivedAtMicros: Int64) throws -> Void
    ) throws -> Counts {
        let device = facts.deviceID
        let wanted: (RecordHeader) -> Bool = { header in
            header.type == EventType.fixBatch.rawValue && header.deviceKey == device
                && !header.isPayloadRemoved && header.fixCount > 0
                && (fromMicros.map { header.recordedMaxMicros >= $0 } ?? true)
                && (toMicros.map { header.recordedMinMicros < $0 } ?? true)
        }
        var counts = Counts()
        try readSkippingDeletedSegments(reader, upTo: facts.endOffset, wantPayload: wanted) { record in
            guard case .fixBatch(let batch) = try record.event() else { return }
            let received = record.header.receivedAtMicros
            for fix in batch.fixes {
                if let fromMicros, fix.recordedAtMicros < fromMicros { continue }
                if let toMicros, fix.recordedAtMicros >= toMicros { continue }
                switch facts.policy.fixDeath(
                    device: device, recordOffset: record.offset, receivedAtMicros: received,
                    recordedAtMicros: fix.recordedAtMicros, nowMicros: nowMicros)
                {
                case nil:
                    try write(fix, received)
                    counts.written += 1
                case .expired: counts.expired += 1
                case .erased: counts.erased += 1
                // The first pass refused a removed device; a removal is registry state and stays.
                case .removed: preconditionFailure("device \(device) removed after the first pass")
                }
            }
        }
        return counts
    }

    /// Reads the records below `end` whose header `wantPayload` accepts. A server's compaction
    /// may delete a whole first segment between the listing of the segments and its read: nothing
    /// in it was live, so the read goes on after it (a few times at most: one compaction run
    /// deletes segments once).
    static func readSkippingDeletedSegments(
        _ reader: LogReader, upTo end: UInt64, wantPayload: (RecordHeader) -> Bool,
        _ visit: (LogRecord) throws -> Void
    ) throws {
        var next: UInt64 = 0
        var segmentsGone = 0
        while next < end {
            do {
                next = try reader.read(from: next, upTo: end, wantPayload: wantPayload) { record in
                    next = record.offset + 1
                    if wantPayload(record.header) { try visit(record) }
                    return true
                }
            } catch let error as IOError where error.errno == ENOENT && segmentsGone < 8 {
                segmentsGone += 1
            } catch LogError.io(let error) where error.errno == ENOENT && segmentsGone < 8 {
                segmentsGone += 1
            }
        }
    }
}
