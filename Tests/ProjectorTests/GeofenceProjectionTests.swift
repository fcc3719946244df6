import Compactor
import Events
import Foundation
import Geofences
import Postgres
import Projector
import Testing
import Workload

/// The geofence projection folded by the projector's loop against a real PostgreSQL: history
/// evaluated for a fence drawn after the fixes, transitions in recorded_at order whatever the
/// arrival order, exactly once, and erasure, removal and deletion reaching the transitions.
@Suite(ProjectorClusterTrait()) struct GeofenceProjectionTests {
    static let home = (latitude: 52.52, longitude: 13.405)
    static let t0: Int64 = 1_780_000_000_000_000  // 2026-05-28
    static let minute: Int64 = 60_000_000

    /// A fix `metres` north of home at minute `m`, with `accuracy`.
    static func fix(_ metres: Double, at m: Int64, accuracy: Double? = 15) -> Fix {
        Fix(
            latitude: home.latitude + metres / 111_195.08, longitude: home.longitude,
            accuracyMeters: accuracy,
            source: "significant", recordedAtMicros: t0 + m * minute)
    }

    static let fence = GeofenceDefined(
        geofenceID: 1, ownerUserID: 1, name: "home", latitude: home.latitude, longitude: home.longitude,
        radiusMeters: 100, deviceIDs: [1])

    final class Setup {
        let log = TemporaryLog()
        let writer: LogWriter
        let client: PostgresClient
        let projector: Projector
        /// The main projection beside it, as `findmy serve` has it: the history a recompute replays.
        let main: Projector

        init(recordsPerTransaction: Int = 5_000) throws {
            writer = try writeLog(log.path, devices: 2, batches: 0, fixesPerBatch: 0)
            client = PostgresClient(conninfo: try TestCluster.freshDatabase())
            var options = Projector.Options()
            options.recordsPerTransactionMax = recordsPerTransaction
            options.log = { _ in }
            projector = Projector(
                client: client, reader: LogReader(directory: log.path, writer: writer),
                projection: GeofenceProjection(), options: options)
            main = Projector(
                client: client, reader: LogReader(directory: log.path, writer: writer), options: options)
            try main.prepare()
            try projector.prepare()
        }

        deinit {
            writer.close()
            client.close()
        }

        @discardableResult
        func append(_ event: Event, receivedMinute: Int64 = 0) throws -> UInt64 {
            try writer.append(event, receivedAtMicros: t0 + receivedMinute * minute)
        }

        func batch(_ fixes: [Fix], device: UInt64 = 1, receivedMinute: Int64 = 0) throws {
            try append(
                .fixBatch(FixBatch(deviceID: device, batchID: .random(), fixes: fixes)),
                receivedMinute: receivedMinute)
        }

        /// The compactor's database half at `nowMicros`, with the log's 30-day retention policy,
        /// one row a statement.
        func compact(nowMicros: Int64) throws -> DatabaseCompactionReport {
            let policy = try RetentionPolicy.fold(
                projector.reader, upTo: writer.durableEnd, settings: RetentionSettings(retentionDays: 30))
            return try client.withConnection {
                try DatabaseCompaction(
                    policy: policy, nowMicros: nowMicros, rowsPerStatementMax: 1, logID: writer.logID
                ).run($0, dryRun: false)
            }
        }

        /// The transitions as "fence device event minute received-minute", in recorded_at order,
        /// once both projections have folded the whole log.
        func transitions() throws -> [String] {
            try catchUp(main)
            try catchUp(projector)
            return try stored()
        }

        /// The transitions stored now, as `transitions()` gives them.
        func stored() throws -> [String] {
            try client.withConnection { connection in
                let result = try connection.execute(
                    """
                    SELECT geofence_id || ' ' || device_id || ' ' || event || ' '
                        || ((extract(epoch FROM recorded_at) * 1000000)::bigint - $1) / 60000000 || ' '
                        || ((extract(epoch FROM received_at) * 1000000)::bigint - $1) / 60000000
                    FROM findmy_geofences.geofence_transitions ORDER BY geofence_id, device_id, recorded_at
                    """, [.int64(t0)])
                return (0..<result.rowCount).compactMap { result.string($0, 0) }
            }
        }

        /// Each transition's row id by "event minute".
        func ids() throws -> [String: Int64] {
            try client.withConnection { connection in
                let result = try connection.execute(
                    """
                    SELECT event || ' ' || ((extract(epoch FROM recorded_at) * 1000000)::bigint - $1) / 60000000, id
                    FROM findmy_geofences.geofence_transitions
                    """, [.int64(t0)])
                var ids: [String: Int64] = [:]
                for row in 0..<result.rowCount { ids[result.string(row, 0) ?? ""] = try result.int64(row, 1) }
                return ids
            }
        }
    }

    @Test func aFenceDrawnAfterTheFixesAnswersForTheirTime() throws {
        let setup = try Setup()
        // At home, then out (08:10), wandering near the edge with wide fixes, then back (11:00).
        try setup.batch(
            [Self.fix(10, at: 0), Self.fix(20, at: 5), Self.fix(400, at: 10)], receivedMinute: 30)
        try setup.batch(
            [Self.fix(110, at: 60, accuracy: 50), Self.fix(2_000, at: 90, accuracy: nil)], receivedMinute: 200
        )
        try setup.batch([Self.fix(15, at: 180, accuracy: 10)], receivedMinute: 225)
        #expect(try setup.transitions().isEmpty)
        try setup.append(.geofenceDefined(Self.fence), receivedMinute: 300)
        #expect(try setup.transitions() == ["1 1 leave 10 30", "1 1 enter 180 225"])
        // Device 2 is not named: its fixes decide nothing.
        try setup.batch([Self.fix(10, at: 400), Self.fix(900, at: 410)], device: 2)
        #expect(try setup.transitions().count == 2)
    }

    /// A fix recorded in the future of its arrival (a wrong device clock) decides nothing: it would
    /// otherwise report a leave a year ahead and make every later fix look late.
    @Test func aClockSuspectFixDecidesNothing() throws {
        let setup = try Setup()
        try setup.append(.geofenceDefined(Self.fence))
        var future = Self.fix(5_000, at: 365 * 24 * 60)
        future.clockSuspect = true
        try setup.batch([Self.fix(0, at: 0), future])
        try setup.batch([Self.fix(10, at: 30)])
        #expect(try setup.transitions().isEmpty)
        try setup.batch([Self.fix(900, at: 60)])
        #expect(try setup.transitions() == ["1 1 leave 60 0"])
    }

    @Test func aLateBatchInsertsTheTransitionsThatHappenedAtTheirTimes() throws {
        let setup = try Setup()
        try setup.append(.geofenceDefined(Self.fence))
        try setup.batch([Self.fix(10, at: 0)], receivedMinute: 1)
        try setup.batch([Self.fix(12, at: 300)], receivedMinute: 301)
        #expect(try setup.transitions().isEmpty)
        // Offline in between: away from 08:10 to 11:00, known only at 11:45.
        try setup.batch(
            [Self.fix(500, at: 10), Self.fix(800, at: 60), Self.fix(20, at: 180)], receivedMinute: 405)
        #expect(try setup.transitions() == ["1 1 leave 10 405", "1 1 enter 180 405"])
        let kept = try setup.ids()
        // A later late batch splits the outing in two.
        try setup.batch([Self.fix(5, at: 30), Self.fix(600, at: 40)], receivedMinute: 500)
        #expect(
            try setup.transitions() == [
                "1 1 leave 10 405", "1 1 enter 30 500", "1 1 leave 40 500", "1 1 enter 180 405",
            ])
        // The two that stayed true kept their rows (a notifier following ids sees them once); the
        // new ones come after them.
        let now = try setup.ids()
        #expect(now["leave 10"] == kept["leave 10"] && now["enter 180"] == kept["enter 180"])
        #expect(now["enter 30"]! > kept.values.max()! && now["leave 40"]! > kept.values.max()!)
    }

    /// A recompute replays the main projection's history, so the geofence projection folds no
    /// record that history does not hold yet: a fence drawn over fixes the main projector has not
    /// folded waits for them, and then finds their transitions (folded at once, it would have
    /// found none and never looked again).
    @Test func theGeofenceProjectionFoldsNoFurtherThanTheHistory() throws {
        let setup = try Setup()
        let first = try setup.writer.append(
            .fixBatch(
                FixBatch(
                    deviceID: 1, batchID: .random(),
                    fixes: [Self.fix(10, at: 0), Self.fix(400, at: 10), Self.fix(20, at: 20)])),
            receivedAtMicros: Self.t0)
        try setup.append(.geofenceDefined(Self.fence))
        while try setup.main.step(logEnd: first) > 0 {}
        try catchUp(setup.projector)
        #expect(setup.projector.status.checkpoint == first)
        #expect(setup.projector.status.heldBack)
        #expect(try setup.stored().isEmpty)
        #expect(try setup.transitions() == ["1 1 leave 10 0", "1 1 enter 20 0"])
        #expect(!setup.projector.status.heldBack)
    }

    /// A main projection rebuilt behind the geofence projection (its checkpoint back at 0, its
    /// history empty) is not read: the projector waits for it, and a transaction that needs a
    /// recompute is refused until it has caught up again.
    @Test func aHistoryBehindTheGeofenceCheckpointIsNotRead() throws {
        let setup = try Setup()
        try setup.append(.geofenceDefined(Self.fence))
        try setup.batch([Self.fix(10, at: 0), Self.fix(400, at: 60)])
        #expect(try setup.transitions() == ["1 1 leave 60 0"])
        let start = setup.projector.status.checkpoint
        try setup.client.withConnection {
            try Schema.createGeneration(Schema.live, logID: setup.writer.logID, $0)
        }
        // Late: before the leave, so the pair is recomputed from minute 30.
        try setup.batch([Self.fix(15, at: 30)])
        let end = setup.writer.durableEnd
        #expect(try setup.projector.step(logEnd: end) == 0)
        #expect(setup.projector.status.heldBack)
        var batch = GeofenceProjection().makeBatch(firstOffset: start)
        try setup.projector.reader.read(from: start, upTo: end) { record in
            try batch.add(record)
            return true
        }
        #expect(throws: GeofenceError.historyBehind(folded: 0, needed: end)) {
            try setup.client.withConnection {
                try GeofenceProjection().apply(batch, nowMicros: Self.t0, logID: setup.writer.logID, $0)
            }
        }
        #expect(try setup.stored() == ["1 1 leave 60 0"])
        #expect(try setup.transitions() == ["1 1 leave 60 0"])
        #expect(setup.projector.status.checkpoint == end)
    }

    /// A recompute reads only the fixes of records the geofence projection has folded, not those
    /// the main projection folded beyond its checkpoint: a fence drawn before a fix that leaves it
    /// has no transition until that fix's record is folded here too.
    @Test func aRecomputeReadsNoFixBeyondTheGeofenceCheckpoint() throws {
        let setup = try Setup(recordsPerTransaction: 1)
        try setup.batch([Self.fix(10, at: 0)])
        let defined = try setup.append(.geofenceDefined(Self.fence))
        try setup.batch([Self.fix(900, at: 10)])
        try catchUp(setup.main)
        while try setup.projector.step(logEnd: defined + 1) > 0 {}
        #expect(setup.projector.status.checkpoint == defined + 1)
        #expect(try setup.stored().isEmpty)
        #expect(try setup.transitions() == ["1 1 leave 10 0"])
    }

    /// Any arrival order of the same fixes gives the transitions of the recorded_at order, and a
    /// transition that a recompute finds again keeps its row.
    @Test(arguments: [1, 2, 3, 4, 5, 6])
    func arrivalOrderDoesNotChangeTheTransitions(seed: UInt64) throws {
        var random = SeededGenerator(seed: seed)
        var fixes: [Fix] = []
        var metres = 0.0
        for m in 0..<120 {
            metres = max(0, metres + Double.random(in: -60...60, using: &random))
            let accuracy: Double? =
                Int.random(in: 0..<8, using: &random) == 0 ? nil : Double.random(in: 5...80, using: &random)
            fixes.append(Self.fix(metres, at: Int64(m) * 3, accuracy: accuracy))
        }
        let batches = stride(from: 0, to: fixes.count, by: 6).map {
            Array(fixes[$0..<min($0 + 6, fixes.count)])
        }
        let inOrder = try Setup()
        try inOrder.append(.geofenceDefined(Self.fence))
        for batch in batches { try inOrder.batch(batch) }
        let expected = try inOrder.transitions()
        #expect(!expected.isEmpty)

        let shuffled = try Setup(recordsPerTransaction: Int(seed % 3) + 1)
        let fenceFirst = seed % 2 == 0
        if fenceFirst { try shuffled.append(.geofenceDefined(Self.fence)) }
        for batch in batches.shuffled(using: &random) {
            try shuffled.batch(batch)
            if Bool.random(using: &random) { _ = try shuffled.transitions() }  // fold part-way
        }
        if !fenceFirst { try shuffled.append(.geofenceDefined(Self.fence)) }
        #expect(try shuffled.transitions() == expected)
    }

    @Test func erasureRemovalAndDeletionReachTheTransitions() throws {
        let setup = try Setup()
        let second = GeofenceDefined(
            geofenceID: 2, ownerUserID: 1, name: "office", latitude: Self.home.latitude + 1_000 / 111_195.08,
            longitude: Self.home.longitude, radiusMeters: 100, deviceIDs: [1, 2])
        try setup.append(.geofenceDefined(Self.fence))
        try setup.append(.geofenceDefined(second))
        for device: UInt64 in [1, 2] {
            try setup.batch(
                [
                    Self.fix(0, at: 0), Self.fix(1_000, at: 60), Self.fix(0, at: 120),
                    Self.fix(1_000, at: 180),
                ],
                device: device)
        }
        #expect(
            try setup.transitions() == [
                "1 1 leave 60 0", "1 1 enter 120 0", "1 1 leave 180 0",
                "2 1 enter 60 0", "2 1 leave 120 0", "2 1 enter 180 0",
                "2 2 enter 60 0", "2 2 leave 120 0", "2 2 enter 180 0",
            ])
        // Erase device 1's 00:30 to 02:30: the fixes at 01:00 and 02:00 go, and with them what they
        // decided; what the remaining fixes say is found again (at 03:00 it left home, as before).
        try setup.append(
            .historyErased(
                HistoryErased(
                    deviceID: 1, fromMicros: Self.t0 + 30 * Self.minute, toMicros: Self.t0 + 150 * Self.minute
                )))
        #expect(
            try setup.transitions() == [
                "1 1 leave 180 0", "2 1 enter 180 0", "2 2 enter 60 0", "2 2 leave 120 0", "2 2 enter 180 0",
            ])
        try setup.append(.geofenceDeleted(GeofenceDeleted(geofenceID: 1, ownerUserID: 1)))
        #expect(
            try setup.transitions() == [
                "2 1 enter 180 0", "2 2 enter 60 0", "2 2 leave 120 0", "2 2 enter 180 0",
            ])
        try setup.append(.deviceRemoved(DeviceRemoved(deviceID: 2)))
        #expect(try setup.transitions() == ["2 1 enter 180 0"])
        let fixes = try setup.client.withConnection {
            try count($0, "SELECT count(*) FROM findmy.device_locations WHERE device_id = 2")
        }
        #expect(fixes == 0)
    }

    /// The compactor's database half reaches the geofence tables as it reaches history: past the
    /// window by the earlier clock, the transitions go with the fixes that decided them.
    @Test func retentionReachesTheGeofenceTables() throws {
        let setup = try Setup()
        let day: Int64 = 24 * 60
        try setup.append(.geofenceDefined(Self.fence))
        try setup.batch([Self.fix(0, at: 0), Self.fix(1_000, at: 60)])
        try setup.batch([Self.fix(0, at: 35 * day)], receivedMinute: 35 * day)
        #expect(try setup.transitions() == ["1 1 leave 60 0", "1 1 enter \(35 * day) \(35 * day)"])
        let report = try setup.compact(nowMicros: Self.t0 + 40 * day * Self.minute)
        #expect(report.geofenceRowsDeleted == 1)  // the transition; its fixes are the history's
        #expect(report.locationRowsDeleted == 2)
        #expect(try setup.transitions() == ["1 1 enter \(35 * day) \(35 * day)"])
        let fixes = try setup.client.withConnection {
            try count($0, "SELECT count(*) FROM findmy.device_locations")
        }
        #expect(fixes == 1)
    }

    /// The notifier's deliveries (the bodies sent, with the fix's position) and the found notices
    /// fired go as the fixes do: past the window, inside an erased range, a removed device's all.
    @Test func retentionErasureAndRemovalReachDeliveriesAndFoundNotices() throws {
        let setup = try Setup()
        let day: Int64 = 24 * 60
        try setup.append(.geofenceDefined(Self.fence))
        try setup.batch([Self.fix(0, at: 35 * day)], receivedMinute: 35 * day)
        _ = try setup.transitions()
        // (device, minute recorded and created): the first expires, device 2's at 36 days is erased,
        // device 3 is removed; the others stay.
        let rows: [(UInt64, Int64)] = [(1, 0), (1, 35 * day), (2, 36 * day), (2, 38 * day), (3, 36 * day)]
        try setup.client.withConnection { connection in
            try AlertTables.prepare(connection)
            for (index, (device, minute)) in rows.enumerated() {
                let micros = Self.t0 + minute * Self.minute
                try connection.execute(
                    """
                    INSERT INTO findmy_geofence_alerts.deliveries (geofence_id, device_id, transition_id, event,
                        recorded_at_micros, channel, url, idempotency_key, body, title, tags, state,
                        next_attempt_micros, created_micros)
                    VALUES (1, $1, $2, 'enter', $3, 'ntfy', 'https://ntfy.example/t', $4, '\\x7b7d', 't', '',
                        'delivered', $3, $3)
                    """, [.int64(Int64(device)), .int64(Int64(index)), .int64(micros), .text("key-\(index)")])
            }
            for minute in [0, 35 * day] {
                try connection.execute(
                    """
                    INSERT INTO findmy_geofences.found_notices (device_id, user_id, armed_offset, log_offset,
                        recorded_at, received_at, latitude, longitude, accuracy_m)
                    VALUES (1, 1, 0, 0, $1, $1, 52.5, 13.4, 10)
                    """, [.timestamp(micros: Self.t0 + minute * Self.minute)])
            }
        }
        try setup.append(
            .historyErased(
                HistoryErased(
                    deviceID: 2, fromMicros: Self.t0 + 35 * day * Self.minute,
                    toMicros: Self.t0 + 37 * day * Self.minute)), receivedMinute: 39 * day)
        try setup.append(.deviceRemoved(DeviceRemoved(deviceID: 3)), receivedMinute: 39 * day)
        _ = try setup.transitions()
        let report = try setup.compact(nowMicros: Self.t0 + 40 * day * Self.minute)
        let left = try setup.client.withConnection { connection in
            let result = try connection.execute(
                """
                SELECT device_id || ' ' || (recorded_at_micros - $1) / 60000000
                FROM findmy_geofence_alerts.deliveries ORDER BY device_id, recorded_at_micros
                """, [.int64(Self.t0)])
            return (0..<result.rowCount).compactMap { result.string($0, 0) }
        }
        #expect(left == ["1 \(35 * day)", "2 \(38 * day)"])
        let notices = try setup.client.withConnection {
            try count($0, "SELECT count(*) FROM findmy_geofences.found_notices")
        }
        #expect(notices == 1)
        #expect(report.relationsRewritten.contains("findmy_geofence_alerts.deliveries"))
    }
}
