import Events

/// One fix as a row of `device_locations` (and a candidate for `device_latest`).
public struct LocationRow: Equatable, Sendable {
    public var deviceID: UInt64
    public var logOffset: UInt64
    public var fixIndex: Int
    public var receivedAtMicros: Int64
    public var fix: Fix

    public init(deviceID: UInt64, logOffset: UInt64, fixIndex: Int, receivedAtMicros: Int64, fix: Fix) {
        self.deviceID = deviceID
        self.logOffset = logOffset
        self.fixIndex = fixIndex
        self.receivedAtMicros = receivedAtMicros
        self.fix = fix
    }
}

/// One accepted request, as a row of `device_batches` ("what arrived when").
public struct BatchRow: Equatable, Sendable {
    public var logOffset: UInt64
    public var deviceID: UInt64
    public var batchID: UUID128
    public var receivedAtMicros: Int64
    public var fixCount: Int
    public var rejectedCount: Int
    public var recordedMinMicros: Int64?
    public var recordedMaxMicros: Int64?
    public var clientProtocol: ClientProtocol

    public init(
        logOffset: UInt64, deviceID: UInt64, batchID: UUID128, receivedAtMicros: Int64, fixCount: Int,
        rejectedCount: Int, recordedMinMicros: Int64?, recordedMaxMicros: Int64?,
        clientProtocol: ClientProtocol = .native
    ) {
        self.clientProtocol = clientProtocol
        self.logOffset = logOffset
        self.deviceID = deviceID
        self.batchID = batchID
        self.receivedAtMicros = receivedAtMicros
        self.fixCount = fixCount
        self.rejectedCount = rejectedCount
        self.recordedMinMicros = recordedMinMicros
        self.recordedMaxMicros = recordedMaxMicros
    }
}

/// A completed import (a `history_imported` record), as a row of `device_imports`; its batches
/// (earlier in the log) get its id in `device_batches.import_id`.
public struct ImportRow: Equatable, Sendable {
    public var logOffset: UInt64
    public var receivedAtMicros: Int64
    public var imported: HistoryImported

    public init(logOffset: UInt64, receivedAtMicros: Int64, imported: HistoryImported) {
        self.logOffset = logOffset
        self.receivedAtMicros = receivedAtMicros
        self.imported = imported
    }
}

/// A registry change, applied in log order before the rows of the same transaction.
public enum RegistryChange: Equatable, Sendable {
    case user(UserCreated, atMicros: Int64)
    case device(DeviceEnrolled, atMicros: Int64)
    case paused(deviceID: UInt64, Bool)
    case pushToken(PushTokenRegistered, atMicros: Int64)
    case pushTokenInvalidated(PushTokenInvalidated, atMicros: Int64)
    /// Delete the device's history rows in the range from earlier transactions, and recompute its
    /// latest position (rows of the same transaction were already filtered by the fold).
    case erased(HistoryErased, atOffset: UInt64)
    /// Delete everything of the device: history, latest, envelopes, push tokens, its row.
    case removed(deviceID: UInt64)
}

/// A command event with where and when it was stored, applied in log order after the registry
/// changes of the same transaction (a command's device exists by then).
public struct CommandChange: Equatable, Sendable {
    public var event: Event
    public var offset: UInt64
    public var receivedAtMicros: Int64
}

/// What one projector transaction writes: the pure result of folding a run of log records. The
/// database side (`ProjectionStore`) only executes it, so the fold's rules are tested without
/// PostgreSQL.
public struct ProjectionBatch: Sendable {
    public var firstOffset: UInt64
    /// The checkpoint after this batch: the offset of the next record to fold.
    public var nextOffset: UInt64
    public var registry: [RegistryChange] = []
    public var commands: [CommandChange] = []
    public var locations: [LocationRow] = []
    public var batches: [BatchRow] = []
    /// Written after `batches`, so that an import's batches of the same transaction get its id too.
    public var imports: [ImportRow] = []
    /// Per device, the best fix of this batch by `LatestRule`.
    public var latest: [UInt64: LocationRow] = [:]
    /// Per device, the latest `received_at` of a report in this batch.
    public var lastSeen: [UInt64: Int64] = [:]
    public var lastReceivedAtMicros: Int64?
    /// Set by `seal`: no record is added after it.
    public private(set) var isSealed = false

    public init(firstOffset: UInt64) {
        self.firstOffset = firstOffset
        self.nextOffset = firstOffset
    }

    public var isEmpty: Bool { nextOffset == firstOffset }

    /// The history rows sorted in place in the history's index order (`ProjectionStore.apply`
    /// writes them in that order and would otherwise sort a copy), and the same fix arrived twice
    /// in this batch made one row, its first arrival's (across transactions the history's unique
    /// key sees to it, `ProjectionStore.apply`). Sorted, a fix's arrivals are neighbours (same
    /// device and time), so no set of every fix is held while the batch is read: such a set took
    /// 21 MB at 200,000 fixes, more than the rows. No record is added after this.
    public mutating func seal() {
        guard !isSealed else { return }
        isSealed = true
        if !ProjectionStore.isInIndexOrder(locations) { locations.sort(by: ProjectionStore.precedesInIndex) }
        // `latest` was kept over every arrival; a later arrival of a fix is not a newer fix.
        if Self.removeRepeats(&locations) { latest = ProjectionStore.latest(of: locations) }
    }

    /// Drops each row whose fix (`FixKey`) an earlier row holds; `rows` in index order, where the
    /// arrivals of one fix are neighbours, first arrival first. Returns whether any was dropped.
    static func removeRepeats(_ rows: inout [LocationRow]) -> Bool {
        var kept = 0
        var groupStart = 0  // the first kept row of the current device and time
        var positions = Set<Position>()  // the group's, once it is too large to scan
        for index in rows.indices {
            let row = rows[index]
            let position = Position(row.fix)
            if kept > 0, rows[kept - 1].deviceID == row.deviceID,
                rows[kept - 1].fix.recordedAtMicros == row.fix.recordedAtMicros
            {
                if kept - groupStart < Position.scanMax {
                    if rows[groupStart..<kept].contains(where: { Position($0.fix) == position }) { continue }
                } else {
                    if positions.isEmpty { positions = Set(rows[groupStart..<kept].map { Position($0.fix) }) }
                    guard positions.insert(position).inserted else { continue }
                }
            } else {
                groupStart = kept
                if !positions.isEmpty { positions.removeAll(keepingCapacity: true) }
            }
            if kept != index { rows[kept] = row }
            kept += 1
        }
        guard kept < rows.count else { return false }
        rows.removeSubrange(kept...)
        return true
    }

    /// Where a fix was: with the device and `recorded_at`, its `FixKey`.
    struct Position: Hashable {
        var latitude: Double
        var longitude: Double
        init(_ fix: Fix) {
            latitude = fix.latitude
            longitude = fix.longitude
        }
        /// Rows of one device and time compared one by one up to this many (one or two in practice);
        /// beyond it, a set, so that a device sending many fixes of one time costs no square.
        static let scanMax = 16
    }

    /// Folds one record in. Records must come in offset order; gaps (records a compaction removed)
    /// are fine.
    public mutating func add(_ record: LogRecord) throws {
        precondition(!isSealed, "no record is folded into a sealed batch")
        precondition(record.offset >= nextOffset, "records are folded in offset order")
        nextOffset = record.offset + 1
        let received = record.header.receivedAtMicros
        lastReceivedAtMicros = received
        guard !record.header.isPayloadRemoved else {
            // An envelope whose fixes the compactor removed: "what arrived when" stays.
            if record.header.type == EventType.fixBatch.rawValue { addEnvelope(record.header) }
            return
        }
        switch try record.event() {
        case .fixBatch(let batch):
            add(batch, offset: record.offset, receivedAtMicros: received, header: record.header)
        case .userCreated(let user):
            registry.append(.user(user, atMicros: received))
        case .deviceEnrolled(let device):
            registry.append(.device(device, atMicros: received))
        case .reportingChanged(let change):
            registry.append(.paused(deviceID: change.deviceID, change.paused))
        case .pushTokenRegistered(let push):
            registry.append(.pushToken(push, atMicros: received))
        case .pushTokenInvalidated(let push):
            registry.append(.pushTokenInvalidated(push, atMicros: received))
        case .userTokenIssued, .userTokenRotated, .deviceTokenIssued, .deviceTokenRevoked:
            break  // credentials are the ingest registry's; no table shows them
        case .retentionChanged:
            break  // the compactor applies windows; the projection shows what is still held
        case .historyErased(let erase):
            registry.append(.erased(erase, atOffset: record.offset))
            locations.removeAll {
                $0.deviceID == erase.deviceID && erase.covers(recordedAtMicros: $0.fix.recordedAtMicros)
            }
            recomputeLatest(erase.deviceID)
        case .deviceRemoved(let removed):
            registry.append(.removed(deviceID: removed.deviceID))
            locations.removeAll { $0.deviceID == removed.deviceID }
            batches.removeAll { $0.deviceID == removed.deviceID }
            imports.removeAll { $0.imported.deviceID == removed.deviceID }
            commands.removeAll { $0.event.commandDeviceID == removed.deviceID }
            latest[removed.deviceID] = nil
            lastSeen[removed.deviceID] = nil
        case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired:
            commands.append(
                CommandChange(event: try record.event(), offset: record.offset, receivedAtMicros: received))
        case .userPasswordSet, .userRoleChanged, .shareGranted, .shareRevoked, .sharePermissionChanged:
            break  // who may see whom is decided from the ingest registry, not from a table
        case .userSettingChanged:
            break  // a user's settings live in the registry
        case .devicePresenceLinked, .presenceChanged:
            break  // presence: the registry folds it and the read API shows it from there (docs/presence.md)
        case .geofenceDefined, .geofenceDeleted:
            break  // the geofence projection's (Sources/Geofences)
        case .geofenceNotificationsSet:
            break  // the registry's; the notifier reads it there (Sources/Geofences)
        case .deviceNtfySet:
            break  // the registry's; the ntfy channel and the device's owner read it there
        case .foundNoticeSet:
            break  // the registry's and the geofence projection's (docs/found-notices.md)
        case .regionTransition, .waypointsReported:
            break  // places: the geofence projection's, when it exists
        case .historyImported(let imported):
            imports.append(
                ImportRow(logOffset: record.offset, receivedAtMicros: received, imported: imported))
        case .unknown:
            break  // a newer findmy's event: nothing this version projects
        }
    }

    /// The device's best fix among the rows this batch still holds.
    private mutating func recomputeLatest(_ deviceID: UInt64) {
        latest[deviceID] = nil
        for row in locations where row.deviceID == deviceID {
            if let current = latest[deviceID], !LatestRule.replaces(row, current) { continue }
            latest[deviceID] = row
        }
    }

    private mutating func addEnvelope(_ header: RecordHeader) {
        batches.append(
            BatchRow(
                logOffset: header.offset, deviceID: header.deviceKey, batchID: header.idempotencyKey,
                receivedAtMicros: header.receivedAtMicros, fixCount: Int(header.fixCount), rejectedCount: 0,
                recordedMinMicros: header.fixCount == 0 || header.recordedMinMicros == 0
                    ? nil : header.recordedMinMicros,
                recordedMaxMicros: header.fixCount == 0 || header.recordedMaxMicros == 0
                    ? nil : header.recordedMaxMicros, clientProtocol: header.clientProtocol))
    }

    private mutating func add(
        _ batch: FixBatch, offset: UInt64, receivedAtMicros: Int64, header: RecordHeader
    ) {
        batches.append(
            BatchRow(
                logOffset: offset, deviceID: batch.deviceID, batchID: batch.batchID,
                receivedAtMicros: receivedAtMicros,
                fixCount: batch.fixes.count, rejectedCount: batch.rejections.count,
                recordedMinMicros: batch.fixes.isEmpty ? nil : header.recordedMinMicros,
                recordedMaxMicros: batch.fixes.isEmpty ? nil : header.recordedMaxMicros,
                clientProtocol: batch.clientProtocol))
        lastSeen[batch.deviceID] = max(lastSeen[batch.deviceID] ?? .min, receivedAtMicros)
        for (index, fix) in batch.fixes.enumerated() {
            let row = LocationRow(
                deviceID: batch.deviceID, logOffset: offset, fixIndex: index,
                receivedAtMicros: receivedAtMicros, fix: fix)
            // Every arrival for now; `seal` keeps the first of a fix's.
            locations.append(row)
            if let current = latest[batch.deviceID], !LatestRule.replaces(row, current) { continue }
            latest[batch.deviceID] = row
        }
    }
}

/// What makes two fixes the same fix: the history's unique key.
struct FixKey: Hashable {
    var deviceID: UInt64
    var recordedAtMicros: Int64
    var latitude: Double
    var longitude: Double

    init(_ row: LocationRow) {
        deviceID = row.deviceID
        recordedAtMicros = row.fix.recordedAtMicros
        latitude = row.fix.latitude
        longitude = row.fix.longitude
    }
}

/// Which fix is a device's latest: `device_latest` only moves forward by this rule.
public enum LatestRule {
    /// True when `candidate` should replace `current`. The same fix again (same recorded_at,
    /// latitude and longitude) never does: it arrived twice, it did not happen twice. A sound fix always beats a clock-suspect one
    /// (a suspect fix is in the future, and would otherwise pin the device there); a suspect fix never
    /// displaces a sound one; otherwise the later `recorded_at` wins, then the later log position.
    public static func replaces(_ candidate: LocationRow, _ current: LocationRow) -> Bool {
        if FixKey(candidate) == FixKey(current) { return false }
        if candidate.fix.clockSuspect != current.fix.clockSuspect { return !candidate.fix.clockSuspect }
        return (candidate.fix.recordedAtMicros, candidate.logOffset, candidate.fixIndex)
            > (current.fix.recordedAtMicros, current.logOffset, current.fixIndex)
    }

    /// The same rule as SQL, for the upsert: `excluded` is the candidate, `device_latest` the current row.
    static let sqlCondition = """
        (excluded.recorded_at, excluded.latitude, excluded.longitude) IS DISTINCT FROM (t.recorded_at, t.latitude, t.longitude)
        AND ((NOT excluded.clock_suspect AND t.clock_suspect)
        OR (excluded.clock_suspect = t.clock_suspect
            AND (excluded.recorded_at, excluded.log_offset, excluded.fix_index) > (t.recorded_at, t.log_offset, t.fix_index)))
        """

    /// The same rule as an ORDER BY over history, to recompute `device_latest` from `device_locations`.
    public static let sqlOrder = "clock_suspect ASC, recorded_at DESC, log_offset DESC, fix_index DESC"
}

extension Event {
    /// The device of a command event; nil for any other event.
    var commandDeviceID: UInt64? {
        switch self {
        case .commandRequested(let c): c.deviceID
        case .commandSent(let c): c.deviceID
        case .commandDeliveryFailed(let c): c.deviceID
        case .commandAnswered(let c): c.deviceID
        case .commandExpired(let c): c.deviceID
        default: nil
        }
    }
}
