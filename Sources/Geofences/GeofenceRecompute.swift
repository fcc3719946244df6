import Events
import Postgres
import ProjectionSchema
import Projector

extension GeofenceRun {
    /// The fixes a recompute replays, in the main projection's history: those that can decide (a
    /// known accuracy, a sound clock, as `GeofenceBatch` folds them) of the records this projection
    /// has folded (`foldedEnd`). The history holds a fix that arrived twice once, its first arrival.
    private var replayed: String {
        ProjectionSchema.Table.deviceLocations.in(PostgresConnection.quoteIdentifier(history))
            + " WHERE device_id = $1 AND log_offset < $2 AND accuracy_m IS NOT NULL AND NOT clock_suspect"
    }

    /// The main projection must hold every record below `foldedEnd` before a recompute reads its
    /// history; else this transaction is rolled back and tried again once it does. the fold limit
    /// (`checkpointAndFoldLimit`) sees to it before the transaction; this catches a main projection rebuilt since.
    private mutating func requireHistory() throws {
        guard historyFoldedEnd < foldedEnd else { return }
        historyFoldedEnd = try GeofenceProjection.historyCheckpoint(history, connection)
        guard historyFoldedEnd >= foldedEnd else {
            throw GeofenceError.historyBehind(folded: historyFoldedEnd, needed: foldedEnd)
        }
    }

    /// Replays device `deviceID`'s fixes for each pair in `froms`, from its time on, in
    /// `recorded_at` order (then log position), and writes only the difference between the
    /// transitions found and those stored from that time.
    mutating func recompute(_ deviceID: UInt64, _ froms: [UInt64: Int64]) throws {
        guard var device = cache.devices[deviceID] else { return }
        try requireHistory()
        let device64 = Int64(bitPattern: deviceID)
        let end = Int64(foldedEnd)
        var indices: [Int] = []
        var starts: [Int64] = []
        for (fenceID, from) in froms {
            guard let i = device.index(of: fenceID) else { continue }
            device.states[i] = try stateBefore(from, device.circles[i], deviceID)
            indices.append(i)
            starts.append(from)
        }
        guard let earliest = starts.min() else { return }
        var found: [[TransitionRow]] = Array(repeating: [], count: indices.count)
        // Keyset pages over (recorded_at, log_offset, fix_index). The history's index is in
        // recorded_at order (device_id, recorded_at, latitude, longitude): the scan follows it and
        // only fixes of one device and time are sorted among themselves (an incremental sort).
        var after: (Int64, Int64, Int32)?
        while true {
            var condition = replayed
            var parameters: [PostgresValue?] = [.int64(device64), .int64(end)]
            if let after {
                parameters += [.timestamp(micros: after.0), .int64(after.1), .int64(Int64(after.2))]
                condition +=
                    " AND recorded_at >= $3 AND (recorded_at, log_offset, fix_index) > ($3, $4, $5::integer)"
            } else if earliest != .min {
                parameters.append(.timestamp(micros: earliest))
                condition += " AND recorded_at >= $3"
            }
            let result = try connection.execute(
                """
                SELECT (extract(epoch FROM recorded_at) * 1000000)::bigint, (extract(epoch FROM received_at) * 1000000)::bigint,
                    latitude, longitude, accuracy_m, log_offset, fix_index
                FROM \(condition)
                ORDER BY recorded_at, log_offset, fix_index LIMIT \(Self.replayRowsPerRead)
                """, parameters)
            for row in 0..<result.rowCount {
                let fix = GeofenceBatch.FixRow(
                    deviceID: deviceID, recordedAtMicros: try result.int64(row, 0) ?? 0,
                    receivedAtMicros: try result.int64(row, 1) ?? 0, latitude: try result.double(row, 2) ?? 0,
                    longitude: try result.double(row, 3) ?? 0, accuracyMeters: try result.double(row, 4) ?? 0,
                    logOffset: UInt64(bitPattern: try result.int64(row, 5) ?? 0),
                    fixIndex: Int32(truncatingIfNeeded: try result.int64(row, 6) ?? 0))
                after = (fix.recordedAtMicros, Int64(fix.logOffset), fix.fixIndex)
                for (k, i) in indices.enumerated() where fix.recordedAtMicros >= starts[k] {
                    let decision = device.circles[i].decide(
                        latitude: fix.latitude, longitude: fix.longitude, accuracyMeters: fix.accuracyMeters)
                    if let change = device.states[i].fold(decision, recordedAtMicros: fix.recordedAtMicros) {
                        found[k].append(
                            TransitionRow(fenceID: device.fenceIDs[i], enter: change == .inside, fix: fix))
                    }
                }
            }
            if result.rowCount < Self.replayRowsPerRead { break }
        }
        // Fresh pairs have nothing stored to compare with: their rows go in one statement.
        var fresh: [TransitionRow] = []
        for (k, i) in indices.enumerated() {
            if freshPairs.contains(PairKey(fenceID: device.fenceIDs[i], deviceID: deviceID)) {
                fresh += found[k]
            } else {
                try replaceTransitions(device.fenceIDs[i], deviceID, from: starts[k], with: found[k])
            }
            changed.insert(PairKey(fenceID: device.fenceIDs[i], deviceID: deviceID))
        }
        try insertTransitions(fresh)
        cache.devices[deviceID] = device
    }

    /// The pair's state just before `from`: the decision of the pair's last decided fix before it
    /// (the state is always the latest decided fix's decision: the first sets it, each later one
    /// that differs changes it). Read from the history, newest first, so it holds after
    /// retention removed older fixes and transitions alike. The horizon is just before `from`.
    private func stateBefore(_ from: Int64, _ circle: GeofenceCircle, _ deviceID: UInt64) throws
        -> GeofencePairState
    {
        var state = GeofencePairState()
        guard from != .min else { return state }
        state.horizonMicros = from - 1
        var before = from
        var afterKey: (Int64, Int64)? = nil
        while true {
            var parameters: [PostgresValue?] = [
                .int64(Int64(bitPattern: deviceID)), .int64(Int64(foldedEnd)), .timestamp(micros: before),
            ]
            var condition = replayed + " AND recorded_at < $3"
            if let (offset, index) = afterKey {
                parameters += [.int64(offset), .int64(index)]
                condition =
                    replayed
                    + " AND recorded_at <= $3 AND (recorded_at < $3 OR (log_offset, fix_index) < ($4, $5::integer))"
            }
            let result = try connection.execute(
                """
                SELECT (extract(epoch FROM recorded_at) * 1000000)::bigint, latitude, longitude, accuracy_m,
                    log_offset, fix_index
                FROM \(condition)
                ORDER BY recorded_at DESC, log_offset DESC, fix_index DESC LIMIT \(Self.stateRowsPerRead)
                """, parameters)
            for row in 0..<result.rowCount {
                let decision = circle.decide(
                    latitude: try result.double(row, 1) ?? 0, longitude: try result.double(row, 2) ?? 0,
                    accuracyMeters: try result.double(row, 3))
                let recorded = try result.int64(row, 0) ?? 0
                switch decision {
                case .undecided:
                    before = recorded
                    afterKey = (try result.int64(row, 4) ?? 0, try result.int64(row, 5) ?? 0)
                case .inside, .outside:
                    state.current = decision == .inside ? .inside : .outside
                    return state
                }
            }
            if result.rowCount < Self.stateRowsPerRead { return state }
        }
    }

    /// Makes the pair's stored transitions from `from` on equal `rows`: deletes those not among
    /// them, inserts those not stored. A transition that did not change keeps its row and its id.
    private func replaceTransitions(
        _ fenceID: UInt64, _ deviceID: UInt64, from: Int64, with rows: [TransitionRow]
    )
        throws
    {
        var parameters: [PostgresValue?] = [
            .int64(Int64(bitPattern: fenceID)), .int64(Int64(bitPattern: deviceID)),
        ]
        var condition = "geofence_id = $1 AND device_id = $2"
        if from != .min {
            parameters.append(.timestamp(micros: from))
            condition += " AND recorded_at >= $3"
        }
        let stored = try connection.execute(
            """
            SELECT id, event, (extract(epoch FROM recorded_at) * 1000000)::bigint, log_offset, fix_index
            FROM \(s).geofence_transitions WHERE \(condition)
            """, parameters)
        struct Key: Hashable {
            var enter: Bool
            var recordedAtMicros: Int64
            var logOffset: Int64
            var fixIndex: Int64
        }
        var wanted: [Key: TransitionRow] = [:]
        for row in rows {
            wanted[
                Key(
                    enter: row.enter, recordedAtMicros: row.fix.recordedAtMicros,
                    logOffset: Int64(row.fix.logOffset),
                    fixIndex: Int64(row.fix.fixIndex))] = row
        }
        var obsolete: [PostgresValue?] = []
        for index in 0..<stored.rowCount {
            let key = Key(
                enter: stored.string(index, 1) == "enter", recordedAtMicros: try stored.int64(index, 2) ?? 0,
                logOffset: try stored.int64(index, 3) ?? 0, fixIndex: try stored.int64(index, 4) ?? 0)
            if wanted.removeValue(forKey: key) == nil {
                obsolete.append(.int64(try stored.int64(index, 0) ?? 0))
            }
        }
        if !obsolete.isEmpty {
            _ = try connection.execute(
                "DELETE FROM \(s).geofence_transitions WHERE id = ANY($1::bigint[])",
                [.array(PostgresArray(.bigint, obsolete))])
        }
        try insertTransitions(Array(wanted.values))
    }

    /// The fences and pair states as stored: the cache after a restart or a failed transaction.
    static func load(schema: String, _ connection: PostgresConnection) throws -> GeofenceCache {
        let s = PostgresConnection.quoteIdentifier(schema)
        var cache = GeofenceCache()
        let fences = try connection.execute(
            "SELECT geofence_id, owner_user_id, name, latitude, longitude, radius_m, device_ids::text FROM \(s).geofences"
        )
        for row in 0..<fences.rowCount {
            let devices = (fences.string(row, 6) ?? "{}").dropFirst().dropLast().split(separator: ",")
                .compactMap {
                    Int64($0).map { UInt64(bitPattern: $0) }
                }
            let fence = GeofenceDefined(
                geofenceID: UInt64(bitPattern: try fences.int64(row, 0) ?? 0),
                ownerUserID: UInt64(bitPattern: try fences.int64(row, 1) ?? 0),
                name: fences.string(row, 2) ?? "",
                latitude: try fences.double(row, 3) ?? 0, longitude: try fences.double(row, 4) ?? 0,
                radiusMeters: try fences.double(row, 5) ?? 0, deviceIDs: devices)
            cache.fences[fence.geofenceID] = fence
            for deviceID in devices {
                cache.devices[deviceID, default: GeofenceCache.DeviceFences()].fenceIDs.append(
                    fence.geofenceID)
                cache.devices[deviceID]!.circles.append(GeofenceCache.circle(fence))
                cache.devices[deviceID]!.states.append(GeofencePairState())
            }
        }
        let states = try connection.execute(
            "SELECT geofence_id, device_id, current, horizon FROM \(s).geofence_state")
        for row in 0..<states.rowCount {
            let fenceID = UInt64(bitPattern: try states.int64(row, 0) ?? 0)
            let deviceID = UInt64(bitPattern: try states.int64(row, 1) ?? 0)
            guard let i = cache.devices[deviceID]?.index(of: fenceID) else { continue }
            var state = GeofencePairState()
            state.current = try states.int64(row, 2).flatMap { GeofencePairState.Known(rawValue: UInt8($0)) }
            state.horizonMicros = try states.int64(row, 3) ?? .min
            cache.devices[deviceID]!.states[i] = state
        }
        let armed = try connection.execute(
            "SELECT device_id, user_id, armed_offset FROM \(s).found_notice_armed")
        for row in 0..<armed.rowCount {
            cache.armedNotices[UInt64(bitPattern: try armed.int64(row, 0) ?? 0)] = GeofenceCache.ArmedNotice(
                userID: UInt64(bitPattern: try armed.int64(row, 1) ?? 0),
                armedOffset: UInt64(try armed.int64(row, 2) ?? 0))
        }
        return cache
    }
}
