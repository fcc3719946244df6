import Events
import Projector

/// What one transaction of the geofence projection folds: the records that matter to it, in log
/// order, decoded. The evaluation itself needs the projection's stored state (each pair's state, the
/// fixes a recompute replays), so it happens in `GeofenceProjection.apply`, inside the transaction.
public struct GeofenceBatch: LogProjectionBatch, Sendable {
    /// One fix with a known accuracy: the only kind that can decide (docs/geofences.md).
    public struct FixRow: Sendable, Equatable {
        public var deviceID: UInt64
        public var recordedAtMicros: Int64
        public var receivedAtMicros: Int64
        public var latitude: Double
        public var longitude: Double
        public var accuracyMeters: Double
        public var logOffset: UInt64
        public var fixIndex: Int32
    }

    /// A transition the device reported itself (OwnTracks `transition`, event 25): its own view,
    /// stored as reported, never evaluated.
    public struct DeviceTransitionRow: Sendable, Equatable {
        public var deviceID: UInt64
        public var enter: Bool
        public var recordedAtMicros: Int64
        public var receivedAtMicros: Int64
        public var regionID: String
        public var regionName: String
        /// The fence this region is, when the phone got it from findmy (`rid` "findmy-<id>",
        /// FenceWaypoints).
        public var geofenceID: UInt64?
        public var accuracyMeters: Double?
        public var logOffset: UInt64

        /// The fence id in a region id findmy handed out (`findmy-<id>`), or nil.
        public static func geofenceID(regionID: String) -> UInt64? {
            guard regionID.hasPrefix("findmy-"), let id = UInt64(regionID.dropFirst("findmy-".count)),
                id > 0, id <= UInt64(Int64.max)
            else { return nil }
            return id
        }
    }

    /// A fix batch with at least one accepted fix, as "notify when found" reads it: the batch's
    /// record and its newest fix (by `recorded_at`, a clock-suspect one only when all are). A
    /// compacted batch's envelope still counts (the registry's fold counts it from its header): its
    /// time is the header's latest `recorded_at`, and it has no position.
    public struct ReportRow: Sendable, Equatable {
        public var deviceID: UInt64
        public var logOffset: UInt64
        public var receivedAtMicros: Int64
        public var recordedAtMicros: Int64
        public var latitude: Double?
        public var longitude: Double?
        public var accuracyMeters: Double?

        static func newest(_ batch: FixBatch, offset: UInt64, receivedAtMicros: Int64) -> ReportRow? {
            let trusted = batch.fixes.filter { !$0.clockSuspect }
            guard
                let fix = (trusted.isEmpty ? batch.fixes : trusted).max(by: {
                    $0.recordedAtMicros < $1.recordedAtMicros
                })
            else { return nil }
            return ReportRow(
                deviceID: batch.deviceID, logOffset: offset, receivedAtMicros: receivedAtMicros,
                recordedAtMicros: fix.recordedAtMicros, latitude: fix.latitude, longitude: fix.longitude,
                accuracyMeters: fix.accuracyMeters.flatMap { $0.isFinite ? $0 : nil })
        }
    }

    public enum Item: Sendable {
        /// The decidable fixes of one fix batch record (all of one device).
        case fixes([FixRow])
        case defined(GeofenceDefined, offset: UInt64)
        case deleted(GeofenceDeleted)
        case erased(HistoryErased)
        case removed(deviceID: UInt64)
        case deviceTransition(DeviceTransitionRow)
        /// "Notify when found" armed or disarmed (event 42), at its record's offset and time.
        case foundNoticeSet(FoundNoticeSet, offset: UInt64, receivedAtMicros: Int64)
        /// A batch with an accepted fix: fires the device's armed notice, if any.
        case reported(ReportRow)
    }

    public var firstOffset: UInt64
    public var nextOffset: UInt64
    public var lastReceivedAtMicros: Int64?
    /// The items with the offset of the record each came from.
    public private(set) var items: [(offset: UInt64, item: Item)] = []
    public private(set) var fixCount = 0

    public init(firstOffset: UInt64) {
        self.firstOffset = firstOffset
        nextOffset = firstOffset
    }

    private mutating func append(_ offset: UInt64, _ item: Item) { items.append((offset, item)) }

    public mutating func add(_ record: LogRecord) throws {
        precondition(record.offset >= nextOffset, "records are folded in offset order")
        nextOffset = record.offset + 1
        let received = record.header.receivedAtMicros
        lastReceivedAtMicros = received
        // A compacted envelope holds no fixes; records of types this projection ignores are not decoded.
        guard !record.header.isPayloadRemoved else {
            let header = record.header
            if header.type == EventType.fixBatch.rawValue, header.fixCount > 0 {
                append(
                    record.offset,
                    .reported(
                        ReportRow(
                            deviceID: header.deviceKey, logOffset: record.offset, receivedAtMicros: received,
                            recordedAtMicros: header.recordedMaxMicros, latitude: nil, longitude: nil,
                            accuracyMeters: nil)))
            }
            return
        }
        switch EventType(rawValue: record.header.type) {
        case .fixBatch?:
            guard case .fixBatch(let batch) = try record.event() else { return }
            var rows: [FixRow] = []
            rows.reserveCapacity(batch.fixes.count)
            for (index, fix) in batch.fixes.enumerated() {
                // Without accuracy a fix never decides. A clock-suspect fix (recorded in the future of
                // its arrival) would set the pair's horizon there and pin its state: it decides nothing.
                guard let accuracy = fix.accuracyMeters, !fix.clockSuspect else { continue }
                rows.append(
                    FixRow(
                        deviceID: batch.deviceID, recordedAtMicros: fix.recordedAtMicros,
                        receivedAtMicros: received,
                        latitude: fix.latitude, longitude: fix.longitude, accuracyMeters: accuracy,
                        logOffset: record.offset, fixIndex: Int32(truncatingIfNeeded: index)))
            }
            if let report = ReportRow.newest(batch, offset: record.offset, receivedAtMicros: received) {
                append(record.offset, .reported(report))
            }
            if !rows.isEmpty {
                fixCount += rows.count
                append(record.offset, .fixes(rows))
            }
        case .regionTransition?:
            guard case .regionTransition(let transition) = try record.event() else { return }
            append(
                record.offset,
                .deviceTransition(
                    DeviceTransitionRow(
                        deviceID: transition.deviceID, enter: transition.kind == .enter,
                        recordedAtMicros: transition.recordedAtMicros, receivedAtMicros: received,
                        regionID: transition.regionID, regionName: transition.regionName,
                        geofenceID: DeviceTransitionRow.geofenceID(regionID: transition.regionID),
                        accuracyMeters: transition.accuracyMeters.flatMap { $0.isFinite ? $0 : nil },
                        logOffset: record.offset)))
        case .foundNoticeSet?:
            guard case .foundNoticeSet(let set) = try record.event() else { return }
            append(record.offset, .foundNoticeSet(set, offset: record.offset, receivedAtMicros: received))
        case .geofenceDefined?, .geofenceDeleted?, .historyErased?, .deviceRemoved?:
            switch try record.event() {
            case .geofenceDefined(let fence): append(record.offset, .defined(fence, offset: record.offset))
            case .geofenceDeleted(let deleted): append(record.offset, .deleted(deleted))
            case .historyErased(let erase): append(record.offset, .erased(erase))
            case .deviceRemoved(let removed): append(record.offset, .removed(deviceID: removed.deviceID))
            default: break
            }
        default:
            break
        }
    }
}
