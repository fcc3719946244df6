import Events
import Postgres
import ProjectionSchema
import Projector

/// One transaction's evaluation (see `GeofenceProjection`): folds its items in log order into the
/// cache, collecting rows, and writes them at `flush`, which runs before every item that deletes
/// or redefines (so those see every row before them) and at the end.
struct GeofenceRun {
    let schema: String
    /// The main projection's schema, whose history a recompute replays.
    let history: String
    var cache: GeofenceCache
    let connection: PostgresConnection
    var s: String { PostgresConnection.quoteIdentifier(schema) }
    /// The offset of the item being folded (at the end, the batch's next offset): a recompute
    /// replays the fixes of the records below it, those this projection has folded, and none of a
    /// record the main projection folded since.
    var foldedEnd: UInt64 = 0
    /// An offset the main projection was found to have folded past, in this transaction.
    var historyFoldedEnd: UInt64 = 0

    struct PairKey: Hashable {
        var fenceID: UInt64
        var deviceID: UInt64
    }

    struct TransitionRow {
        var fenceID: UInt64
        var enter: Bool
        var fix: GeofenceBatch.FixRow
    }

    var deviceTransitions: [GeofenceBatch.DeviceTransitionRow] = []
    var transitions: [TransitionRow] = []
    /// Pairs to recompute, by device, from the earliest `recorded_at` that came out of order.
    var dirty: [UInt64: [UInt64: Int64]] = [:]
    var changed: Set<PairKey> = []
    /// Pairs of fences first defined in this transaction: nothing of theirs is stored yet.
    var freshPairs: Set<PairKey> = []

    /// Rows per read when a recompute replays a device's stored fixes: bounds its memory.
    static let replayRowsPerRead = 20_000
    /// Rows per read when looking back for a pair's last decided fix (usually the first one read).
    static let stateRowsPerRead = 256

    init(schema: String, history: String, cache: GeofenceCache, connection: PostgresConnection) {
        self.schema = schema
        self.history = history
        self.cache = cache
        self.connection = connection
    }

    // MARK: folding

    mutating func apply(_ item: GeofenceBatch.Item) throws {
        switch item {
        case .fixes(let rows): fold(rows)
        case .defined(let fence, let offset):
            // A new fence changes no stored row: its pairs are recomputed at the next flush, with
            // every fix before it. A redefinition may drop pairs, whose pending rows go first.
            if cache.fences[fence.geofenceID] != nil { try flush() }
            try define(fence, offset: offset)
        case .deleted(let deleted):
            try flush()
            try delete(deleted)
        case .erased(let erased):
            try flush()
            try erase(erased)
        case .removed(let deviceID):
            try flush()
            try remove(deviceID)
        case .deviceTransition(let row):
            deviceTransitions.append(row)
        case .foundNoticeSet(let set, let offset, let receivedAtMicros):
            try setFoundNotice(set, offset: offset, receivedAtMicros: receivedAtMicros)
        case .reported(let report):
            try fireFoundNotice(report)
        }
    }

    private mutating func fold(_ unsorted: [GeofenceBatch.FixRow]) {
        let deviceID = unsorted[0].deviceID
        guard var device = cache.devices.removeValue(forKey: deviceID) else { return }
        defer { cache.devices[deviceID] = device }
        // A batch is usually in recorded_at order already; sorted, its own order never forces a recompute.
        let inOrder = zip(unsorted, unsorted.dropFirst()).allSatisfy {
            $0.recordedAtMicros <= $1.recordedAtMicros
        }
        let rows =
            inOrder
            ? unsorted
            : unsorted.sorted { ($0.recordedAtMicros, $0.fixIndex) < ($1.recordedAtMicros, $1.fixIndex) }
        var dirtyHere = dirty.removeValue(forKey: deviceID) ?? [:]
        defer { if !dirtyHere.isEmpty { dirty[deviceID] = dirtyHere } }
        for i in device.fenceIDs.indices {
            let fenceID = device.fenceIDs[i]
            let circle = device.circles[i]
            var state = device.states[i]
            var folded = false
            for row in rows {
                if let from = dirtyHere[fenceID] {
                    dirtyHere[fenceID] = min(from, row.recordedAtMicros)
                    continue
                }
                guard row.recordedAtMicros >= state.horizonMicros else {
                    dirtyHere[fenceID] = row.recordedAtMicros
                    continue
                }
                let decision = circle.decide(
                    latitude: row.latitude, longitude: row.longitude, accuracyMeters: row.accuracyMeters)
                folded = true
                if let change = state.fold(decision, recordedAtMicros: row.recordedAtMicros) {
                    transitions.append(TransitionRow(fenceID: fenceID, enter: change == .inside, fix: row))
                }
            }
            if folded {
                device.states[i] = state
                changed.insert(PairKey(fenceID: fenceID, deviceID: deviceID))
            }
        }
    }

    private mutating func markDirty(_ fenceID: UInt64, _ deviceID: UInt64, from: Int64) {
        dirty[deviceID, default: [:]][fenceID] = min(dirty[deviceID]?[fenceID] ?? .max, from)
    }

    private mutating func define(_ fence: GeofenceDefined, offset: UInt64) throws {
        let old = cache.fences[fence.geofenceID]
        // As the registry: an id is its first owner's.
        if let old, old.ownerUserID != fence.ownerUserID { return }
        _ = try connection.execute(
            """
            INSERT INTO \(s).geofences (geofence_id, owner_user_id, name, latitude, longitude, radius_m, device_ids, log_offset)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (geofence_id) DO UPDATE SET name = excluded.name, latitude = excluded.latitude,
                longitude = excluded.longitude, radius_m = excluded.radius_m, device_ids = excluded.device_ids,
                log_offset = excluded.log_offset
            """,
            [
                .int64(Int64(bitPattern: fence.geofenceID)), .int64(Int64(bitPattern: fence.ownerUserID)),
                .text(fence.name), .double(fence.latitude), .double(fence.longitude),
                .double(fence.radiusMeters),
                .array(PostgresArray(.bigint, fence.deviceIDs.map { .int64(Int64(bitPattern: $0)) })),
                .int64(Int64(offset)),
            ])
        cache.fences[fence.geofenceID] = fence
        let moved =
            old.map {
                $0.latitude != fence.latitude || $0.longitude != fence.longitude
                    || $0.radiusMeters != fence.radiusMeters
            } ?? true
        let kept = Set(fence.deviceIDs)
        for deviceID in old?.deviceIDs ?? [] where !kept.contains(deviceID) {
            try dropPair(fence.geofenceID, deviceID)
        }
        let before = Set(old?.deviceIDs ?? [])
        for deviceID in fence.deviceIDs where moved || !before.contains(deviceID) {
            var device = cache.devices[deviceID] ?? GeofenceCache.DeviceFences()
            let circle = GeofenceCache.circle(fence)
            if let i = device.index(of: fence.geofenceID) {
                device.circles[i] = circle
                device.states[i] = GeofencePairState()
            } else {
                device.fenceIDs.append(fence.geofenceID)
                device.circles.append(circle)
                device.states.append(GeofencePairState())
            }
            cache.devices[deviceID] = device
            // The whole retained history: a fence drawn today answers for last week.
            markDirty(fence.geofenceID, deviceID, from: .min)
            if old == nil { freshPairs.insert(PairKey(fenceID: fence.geofenceID, deviceID: deviceID)) }
            changed.insert(PairKey(fenceID: fence.geofenceID, deviceID: deviceID))
        }
    }

    private mutating func delete(_ deleted: GeofenceDeleted) throws {
        guard let fence = cache.fences[deleted.geofenceID], fence.ownerUserID == deleted.ownerUserID else {
            return
        }
        for deviceID in fence.deviceIDs { try dropPair(fence.geofenceID, deviceID) }
        _ = try connection.execute(
            "DELETE FROM \(s).geofences WHERE geofence_id = $1", [.int64(Int64(bitPattern: fence.geofenceID))]
        )
        cache.fences[fence.geofenceID] = nil
    }

    /// Forgets one (fence, device) pair: its state and its transitions.
    private mutating func dropPair(_ fenceID: UInt64, _ deviceID: UInt64) throws {
        let ids: [PostgresValue?] = [.int64(Int64(bitPattern: fenceID)), .int64(Int64(bitPattern: deviceID))]
        _ = try connection.execute(
            "DELETE FROM \(s).geofence_transitions WHERE geofence_id = $1 AND device_id = $2", ids)
        _ = try connection.execute(
            "DELETE FROM \(s).geofence_state WHERE geofence_id = $1 AND device_id = $2", ids)
        cache.devices[deviceID]?.remove(fenceID)
        dirty[deviceID]?[fenceID] = nil
        changed.remove(PairKey(fenceID: fenceID, deviceID: deviceID))
    }

    private mutating func erase(_ erase: HistoryErased) throws {
        let device = Int64(bitPattern: erase.deviceID)
        // [from, to), as `HistoryErased.covers`; an open end is no bound.
        var condition = "device_id = $1"
        var parameters: [PostgresValue?] = [.int64(device)]
        if let from = erase.fromMicros {
            parameters.append(.timestamp(micros: from))
            condition += " AND recorded_at >= $\(parameters.count)"
        }
        if let to = erase.toMicros {
            parameters.append(.timestamp(micros: to))
            condition += " AND recorded_at < $\(parameters.count)"
        }
        _ = try connection.execute("DELETE FROM \(s).geofence_transitions WHERE \(condition)", parameters)
        _ = try connection.execute("DELETE FROM \(s).device_transitions WHERE \(condition)", parameters)
        _ = try connection.execute("DELETE FROM \(s).found_notices WHERE \(condition)", parameters)
        for fenceID in cache.devices[erase.deviceID]?.fenceIDs ?? [] {
            markDirty(fenceID, erase.deviceID, from: erase.fromMicros ?? .min)
        }
    }

    private mutating func remove(_ deviceID: UInt64) throws {
        let id: [PostgresValue?] = [.int64(Int64(bitPattern: deviceID))]
        for table in [
            "geofence_transitions", "geofence_state", "device_transitions", "found_notices",
            "found_notice_armed",
        ] {
            _ = try connection.execute("DELETE FROM \(s).\(table) WHERE device_id = $1", id)
        }
        // As the registry's fold (GeofenceBook): the device leaves every fence that named it, so a
        // later redefinition without it finds nothing to drop.
        _ = try connection.execute(
            "UPDATE \(s).geofences SET device_ids = array_remove(device_ids, $1) WHERE $1 = ANY(device_ids)",
            id)
        for (fenceID, fence) in cache.fences where fence.deviceIDs.contains(deviceID) {
            cache.fences[fenceID]?.deviceIDs.removeAll { $0 == deviceID }
        }
        cache.devices[deviceID] = nil
        cache.armedNotices[deviceID] = nil
        dirty[deviceID] = nil
        changed = changed.filter { $0.deviceID != deviceID }
    }

    // MARK: writing

    mutating func flush() throws {
        try insertDeviceTransitions()
        try insertTransitions(transitions)
        transitions.removeAll(keepingCapacity: true)
        let pending = dirty
        dirty = [:]
        for (deviceID, froms) in pending.sorted(by: { $0.key < $1.key }) {
            try recompute(deviceID, froms)
        }
        freshPairs.removeAll()
        try writeStates()
    }

    private mutating func insertDeviceTransitions() throws {
        guard !deviceTransitions.isEmpty else { return }
        let rows = deviceTransitions
        deviceTransitions.removeAll(keepingCapacity: true)
        func column(
            _ type: PostgresArray.ElementType, _ value: (GeofenceBatch.DeviceTransitionRow) -> PostgresValue?
        )
            -> PostgresValue
        {
            .array(PostgresArray(type, rows.map(value)))
        }
        _ = try connection.execute(
            """
            INSERT INTO \(s).device_transitions
                (device_id, geofence_id, region_id, region_name, event, recorded_at, received_at, fix_accuracy_m, log_offset)
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
                $7::timestamptz[], $8::float8[], $9::bigint[])
            """,
            [
                column(.bigint) { .int64(Int64(bitPattern: $0.deviceID)) },
                column(.bigint) { $0.geofenceID.map { .int64(Int64(bitPattern: $0)) } },
                column(.text) { .text($0.regionID) },
                column(.text) { .text($0.regionName) },
                column(.text) { .text($0.enter ? "enter" : "leave") },
                column(.timestamptz) { .timestamp(micros: $0.recordedAtMicros) },
                column(.timestamptz) { .timestamp(micros: $0.receivedAtMicros) },
                column(.float8) { $0.accuracyMeters.map { .double($0) } },
                column(.bigint) { .int64(Int64($0.logOffset)) },
            ])
    }

    /// Inserts transitions in `recorded_at` order, so that ids follow it within one write.
    func insertTransitions(_ rows: [TransitionRow]) throws {
        guard !rows.isEmpty else { return }
        func column(_ type: PostgresArray.ElementType, _ value: (TransitionRow) -> PostgresValue)
            -> PostgresValue
        {
            .array(PostgresArray(type, rows.map(value)))
        }
        _ = try connection.execute(
            """
            INSERT INTO \(s).geofence_transitions
                (geofence_id, device_id, event, recorded_at, received_at, fix_accuracy_m, log_offset, fix_index)
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::timestamptz[],
                $6::float8[], $7::bigint[], $8::integer[])
            ORDER BY 4, 7, 8
            """,
            [
                column(.bigint) { .int64(Int64(bitPattern: $0.fenceID)) },
                column(.bigint) { .int64(Int64(bitPattern: $0.fix.deviceID)) },
                column(.text) { .text($0.enter ? "enter" : "leave") },
                column(.timestamptz) { .timestamp(micros: $0.fix.recordedAtMicros) },
                column(.timestamptz) { .timestamp(micros: $0.fix.receivedAtMicros) },
                column(.float8) { .double($0.fix.accuracyMeters) },
                column(.bigint) { .int64(Int64($0.fix.logOffset)) },
                column(.integer) { .int64(Int64($0.fix.fixIndex)) },
            ])
    }

    private mutating func writeStates() throws {
        guard !changed.isEmpty else { return }
        var fences: [PostgresValue?] = []
        var devices: [PostgresValue?] = []
        var current: [PostgresValue?] = []
        var horizon: [PostgresValue?] = []
        for key in changed {
            guard let device = cache.devices[key.deviceID], let i = device.index(of: key.fenceID) else {
                continue
            }
            let state = device.states[i]
            fences.append(.int64(Int64(bitPattern: key.fenceID)))
            devices.append(.int64(Int64(bitPattern: key.deviceID)))
            current.append(state.current.map { .int64(Int64($0.rawValue)) })
            horizon.append(.int64(state.horizonMicros))
        }
        changed.removeAll()
        guard !fences.isEmpty else { return }
        _ = try connection.execute(
            """
            INSERT INTO \(s).geofence_state (geofence_id, device_id, current, horizon)
            SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::bigint[])
            ON CONFLICT (geofence_id, device_id) DO UPDATE SET current = excluded.current, horizon = excluded.horizon
            """,
            [
                .array(PostgresArray(.bigint, fences)), .array(PostgresArray(.bigint, devices)),
                .array(PostgresArray(.smallint, current)), .array(PostgresArray(.bigint, horizon)),
            ])
    }
}
