import Events
import Postgres
import ProjectionSchema
import Threads

public enum ProjectorError: Error, Equatable, CustomStringConvertible {
    /// Another projector (or a rebuild's swap) advanced the checkpoint first; nothing was written.
    case checkpointMoved(expected: UInt64, found: UInt64?)
    /// The log ends before what the projection already holds: it was restored from an older backup.
    case logBehindCheckpoint(logEnd: UInt64, checkpoint: UInt64)
    case noGeneration(schema: String)
    /// The projection in `schema` is no longer bound to the log `logID` this projector folds:
    /// another log's projector rebuilt it (two logs sharing one database). Nothing was written.
    case projectionOfAnotherLog(schema: String, logID: UUID128)
    /// The log has no id yet (written before log ids, and no writer of this version opened it):
    /// a projection cannot be bound to it.
    case logWithoutID(directory: String)

    public var description: String {
        switch self {
        case .checkpointMoved(let expected, let found):
            "the projection's checkpoint moved from \(expected) to \(found.map(String.init) ?? "nothing") under this "
                + "projector (another projector, or a rebuild was swapped in); nothing was written"
        case .logBehindCheckpoint(let logEnd, let checkpoint):
            "the event log ends at offset \(logEnd), but the projection already holds records up to offset "
                + "\(checkpoint): the log was probably restored from an older backup. Stopping rather than skipping. "
                + "Restore the matching log, or rebuild the projection from this log with `findmy replay`"
        case .noGeneration(let schema):
            "the database has no findmy projection in schema \(schema); start `findmy serve` once to create it"
        case .projectionOfAnotherLog(let schema, let logID):
            "the projection in schema \(schema) is no longer the one of log \(logID) (another log's projector "
                + "rebuilt it: do two servers share this database?); nothing was written, rebinding"
        case .logWithoutID(let directory):
            "the event log in \(directory) has no log id yet (it was written before log ids); start "
                + "`findmy serve` on it once, which gives it one, then the projector binds the projection to it"
        }
    }
}

/// Executes projection batches against one generation schema, each in one transaction together
/// with its checkpoint.
public struct ProjectionStore: Sendable {
    public let schema: String
    /// Its row in `projector_checkpoints`: `Schema.projectionName`, or one partition's of a
    /// partitioned log (`PartitionedProjector`, docs/scale.md).
    public let checkpointName: String

    public init(schema: String = Schema.live, checkpointName: String = Schema.projectionName) {
        self.schema = schema
        self.checkpointName = checkpointName
    }

    private var s: String { PostgresConnection.quoteIdentifier(schema) }

    /// The next offset to fold, and the `received_at` of the last record folded.
    public func checkpoint(_ connection: PostgresConnection) throws -> (
        next: UInt64, lastReceivedAtMicros: Int64?
    ) {
        let result = try connection.execute(
            "SELECT next_offset, last_received_at FROM \(s).projector_checkpoints WHERE projection = $1",
            [.text(checkpointName)])
        guard result.rowCount == 1 else { throw ProjectorError.noGeneration(schema: schema) }
        return (UInt64(bitPattern: try result.int64(0, 0) ?? 0), try result.timestampMicros(0, 1))
    }

    /// Writes `batch` and moves the checkpoint from `batch.firstOffset` to `batch.nextOffset`, in one
    /// transaction. If the checkpoint is not where the batch starts, or (with `logID`) the generation
    /// is not bound to that log, nothing is written.
    ///
    /// History goes in by binary COPY. If a fix of the batch is already in history (an earlier
    /// transaction's copy of the same fix: same device, recorded_at, latitude, longitude), the COPY
    /// fails on the history's unique key and rolls the transaction back; it is then done again with
    /// the history through `INSERT ... ON CONFLICT DO NOTHING`, and only the fixes that were new are
    /// candidates for the latest position. Duplicates are rare, so the common path stays one COPY.
    ///
    /// With a `helper` connection and at least `splitFixesMin` fixes (a drain's transaction), the
    /// history is split at a device boundary and the second half is COPYed by the helper, in a
    /// transaction of its own, at the same time as this one: PostgreSQL runs one backend per
    /// connection, and index upkeep on one backend is what bounds a drain (docs/benchmarks.md). The
    /// helper's half commits before this transaction does, so a crash can leave history rows whose
    /// checkpoint did not move. That is safe because history is idempotent by its unique key: the
    /// replay finds those rows as duplicates of themselves (the same log offset and fix index), and
    /// counts them as the batch's own, for the latest position too (`insertSkippingDuplicates`).
    /// Whatever the helper does not commit (a duplicate, a broken connection, a generation swap
    /// waiting), this transaction writes itself.
    public func apply(
        _ batch: ProjectionBatch, nowMicros: Int64, logID: UUID128? = nil, _ connection: PostgresConnection,
        helper: PostgresConnection? = nil, splitFixesMin: Int = ProjectionStore.splitFixesMin
    ) throws {
        guard batch.isSealed else {
            var sealed = batch
            sealed.seal()
            return try apply(
                sealed, nowMicros: nowMicros, logID: logID, connection, helper: helper,
                splitFixesMin: splitFixesMin)
        }
        if let helper, batch.locations.count >= splitFixesMin,
            let (mine, theirs) = Self.splitAtDevice(Self.indexOrder(batch.locations))
        {
            return try applySplit(
                batch, mine: mine, theirs: theirs, nowMicros: nowMicros, logID: logID, connection,
                helper: helper)
        }
        do {
            try apply(batch, nowMicros: nowMicros, logID: logID, connection) { connection in
                try copyLocations(batch.locations, nowMicros: nowMicros, connection)
                return batch.latest
            }
        } catch let error as PostgresError where Self.isDuplicateFix(error) {
            try apply(batch, nowMicros: nowMicros, logID: logID, connection) { connection in
                Self.latest(
                    of: try insertSkippingDuplicates(batch.locations, nowMicros: nowMicros, connection))
            }
        }
    }

    /// Fewest fixes in a transaction for its history to be split with a helper connection: below
    /// it (steady state, a few records a transaction) a second transaction costs more than it saves.
    public static let splitFixesMin = 20_000

    static func isDuplicateFix(_ error: PostgresError) -> Bool {
        error.kind == .copy && error.sqlState == PostgresError.uniqueViolation
    }

    /// `rows` (in index order) cut in two near the middle, where one device's rows end, so that the
    /// two backends insert into different parts of the index; nil when one device holds them all.
    /// Slices, not copies: a drain's transaction holds up to `Projector.Options.fixesPerTransactionMax` rows.
    static func splitAtDevice(_ rows: [LocationRow]) -> (
        mine: ArraySlice<LocationRow>, theirs: ArraySlice<LocationRow>
    )? {
        guard rows.count >= 2 else { return nil }
        let middle = rows.count / 2
        var cut = middle
        while cut < rows.count && rows[cut].deviceID == rows[cut - 1].deviceID { cut += 1 }
        if cut == rows.count {
            cut = middle
            while cut > 0 && rows[cut].deviceID == rows[cut - 1].deviceID { cut -= 1 }
        }
        guard cut > 0 && cut < rows.count else { return nil }
        return (rows[..<cut], rows[cut...])
    }

    private func applySplit(
        _ batch: ProjectionBatch, mine: ArraySlice<LocationRow>, theirs: ArraySlice<LocationRow>,
        nowMicros: Int64,
        logID: UUID128?,
        _ connection: PostgresConnection, helper: PostgresConnection
    ) throws {
        // Partition DDL locks the parent table: made first, committed, so that neither COPY waits
        // for the other's transaction.
        try ensurePartitions(batch.locations, nowMicros: nowMicros, connection)
        let helperCommitted = Outcome()
        // The helper's rows as this transaction will hold them: nil when its COPY committed (all of
        // them), else what this transaction inserts of them itself.
        let theirsInserted: (PostgresConnection) throws -> [LocationRow]? = { connection in
            helperCommitted.wait()
                ? nil : try self.insertSkippingDuplicates(Array(theirs), nowMicros: nowMicros, connection)
        }
        var first: Result<Void, any Error> = .success(())
        concurrentPerform(iterations: 2) { index in
            guard index == 0 else {
                helperCommitted.finish(self.copyAsHelper(theirs, helper))
                return
            }
            first = Result {
                try self.apply(batch, nowMicros: nowMicros, logID: logID, connection) { connection in
                    try self.copyRows(mine, connection)
                    guard let held = try theirsInserted(connection), held.count != theirs.count else {
                        return batch.latest
                    }
                    return Self.latest(of: Array(mine) + held)
                }
            }
        }
        guard case .failure(let error) = first else { return }
        guard let error = error as? PostgresError, Self.isDuplicateFix(error) else { throw error }
        try apply(batch, nowMicros: nowMicros, logID: logID, connection) { connection in
            Self.latest(
                of: try insertSkippingDuplicates(Array(mine), nowMicros: nowMicros, connection)
                    + (try theirsInserted(connection) ?? Array(theirs)))
        }
    }

    /// The helper's half: COPYed and committed on its own connection, under the same shared lock
    /// as the main transaction (a generation swap waits for both). Only tried: with a swap waiting
    /// for the lock, the helper gives its rows back rather than queue behind the swap, which waits
    /// for the main transaction, which waits for the helper. Returns whether it committed.
    private func copyAsHelper(_ rows: ArraySlice<LocationRow>, _ helper: PostgresConnection) -> Bool {
        do {
            return try helper.transaction { helper in
                let locked = try helper.execute("SELECT pg_try_advisory_xact_lock_shared(7402)")
                guard locked.string(0, 0) == "t" else { return false }
                try copyRows(rows, helper)
                return true
            }
        } catch {
            return false
        }
    }

    /// The history and the latest candidates it gives, written inside the transaction.
    typealias HistoryWrite = (PostgresConnection) throws -> [UInt64: LocationRow]

    private func apply(
        _ batch: ProjectionBatch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection,
        history: HistoryWrite
    ) throws {
        try connection.transaction { connection in
            // Shared with other projectors, exclusive with a generation swap (Schema.swapIn), so a
            // transaction never writes half into one generation and half into the next.
            _ = try connection.execute("SELECT pg_advisory_xact_lock_shared(7402)")
            let moved = try connection.execute(
                """
                UPDATE \(s).projector_checkpoints
                SET next_offset = $1, last_received_at = coalesce($2, last_received_at), updated_at = now()
                WHERE projection = $3 AND next_offset = $4 AND ($5::uuid IS NULL OR EXISTS (
                    SELECT 1 FROM findmy_meta.generations WHERE schema_name = $6 AND log_id = $5::uuid))
                """,
                [
                    .int64(Int64(batch.nextOffset)),
                    batch.lastReceivedAtMicros.map { .timestamp(micros: $0) },
                    .text(checkpointName), .int64(Int64(batch.firstOffset)),
                    logID.map { .uuid(high: $0.high, low: $0.low) }, .text(schema),
                ])
            guard moved.affectedRows == 1 else {
                if let logID, try Schema.generation(of: schema, connection)?.logID != logID {
                    throw ProjectorError.projectionOfAnotherLog(schema: schema, logID: logID)
                }
                let found = try? checkpoint(connection).next
                throw ProjectorError.checkpointMoved(expected: batch.firstOffset, found: found)
            }
            for change in batch.registry { try apply(change, asOf: batch.nextOffset, connection) }
            for change in batch.commands { try apply(change, connection) }
            let latest = try history(connection)
            try writeBatches(batch.batches, connection)
            try writeImports(batch.imports, connection)
            try writeLatest(Array(latest.values), connection)
            try writeLastSeen(batch.lastSeen, asOf: batch.nextOffset, connection)
        }
    }

    /// `asOf`: the checkpoint this transaction moves to, stamped on every `devices` row it writes
    /// (`as_of_offset`, see Schema.createGeneration).
    private func apply(_ change: RegistryChange, asOf: UInt64, _ connection: PostgresConnection) throws {
        switch change {
        case .user(let user, let at):
            _ = try connection.execute(
                "INSERT INTO \(s).users (id, name, role, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                [
                    .int64(Int64(user.userID)), .text(user.name),
                    .text(user.role == .admin ? "admin" : "member"), .timestamp(micros: at),
                ])
        case .device(let device, let at):
            _ = try connection.execute(
                """
                INSERT INTO \(s).devices (id, user_id, device_uuid, name, platform, model, created_at, as_of_offset)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                ON CONFLICT (id) DO UPDATE SET name = excluded.name, platform = excluded.platform, model = excluded.model,
                    as_of_offset = excluded.as_of_offset
                """,
                [
                    .int64(Int64(device.deviceID)), .int64(Int64(device.userID)),
                    .uuid(high: device.deviceUUID.high, low: device.deviceUUID.low),
                    .text(device.name), .text(device.platform), .text(device.model), .timestamp(micros: at),
                    .int64(Int64(asOf)),
                ])
        case .paused(let deviceID, let paused):
            _ = try connection.execute(
                "UPDATE \(s).devices SET paused = $2, as_of_offset = $3 WHERE id = $1",
                [.int64(Int64(deviceID)), .bool(paused), .int64(Int64(asOf))])
        case .pushToken(let push, let at):
            _ = try connection.execute(
                """
                INSERT INTO \(s).push_devices (token, provider, device_id, topic, environment, registered_at)
                VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (token) DO UPDATE SET provider = excluded.provider, device_id = excluded.device_id,
                    topic = excluded.topic, environment = excluded.environment, registered_at = excluded.registered_at,
                    invalidated_at = NULL, invalidated_reason = NULL
                """,
                [
                    .text(push.token), .text(push.provider), .int64(Int64(push.deviceID)), .text(push.topic),
                    .text(push.environment), .timestamp(micros: at),
                ])
            // A rotated token replaces the device's earlier ones of the same provider.
            _ = try connection.execute(
                """
                UPDATE \(s).push_devices SET invalidated_at = $4, invalidated_reason = 'replaced'
                WHERE device_id = $1 AND provider = $2 AND token <> $3 AND invalidated_at IS NULL
                """,
                [
                    .int64(Int64(push.deviceID)), .text(push.provider), .text(push.token),
                    .timestamp(micros: at),
                ])
        case .pushTokenInvalidated(let push, let at):
            _ = try connection.execute(
                "UPDATE \(s).push_devices SET invalidated_at = $3, invalidated_reason = $2 WHERE token = $1",
                [.text(push.token), .text(push.reason), .timestamp(micros: at)])
        case .erased(let erase, let offset):
            try eraseRows(erase, beforeOffset: offset, connection)
        case .removed(let deviceID):
            try removeDevice(deviceID, connection)
        }
    }

    static let locationColumns = ProjectionSchema.fixColumnNames
    /// The history's columns: a fix's, then its packed copy of the fields a page shows.
    static let historyColumns = locationColumns + [ProjectionSchema.shownColumn]

    /// The fields of `row` that `device_locations.shown` packs (`ShownFix`).
    static func shownFields(_ row: LocationRow) -> ShownFix.Fields {
        let fix = row.fix
        return ShownFix.Fields(
            latitude: fix.latitude, longitude: fix.longitude, recordedAtMicros: fix.recordedAtMicros,
            accuracy: fix.accuracyMeters, altitude: fix.altitudeMeters, speed: fix.speedMetersPerSecond,
            heading: fix.headingDegrees, receivedAtMicros: row.receivedAtMicros,
            battery: fix.batteryPercent.map { Int16($0) }, isCharging: fix.isCharging,
            clockSuspect: fix.clockSuspect)
    }

    /// `row`'s packed `shown` value, for the insert's arrays (the COPY writes it in place).
    static func shown(_ row: LocationRow) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(ShownFix.byteCount(sourceBytes: row.fix.source.utf8.count))
        ShownFix.append(shownFields(row), source: row.fix.source.utf8, to: &bytes)
        return bytes
    }

    static func values(_ row: LocationRow) -> [PostgresValue?] {
        let fix = row.fix
        return [
            .int64(Int64(row.deviceID)), .int64(Int64(row.logOffset)), .int64(Int64(row.fixIndex)),
            .timestamp(micros: fix.recordedAtMicros), .timestamp(micros: row.receivedAtMicros),
            .double(fix.latitude),
            .double(fix.longitude), fix.accuracyMeters.map { .double($0) },
            fix.altitudeMeters.map { .double($0) },
            fix.speedMetersPerSecond.map { .double($0) }, fix.headingDegrees.map { .double($0) },
            fix.batteryPercent.map { .int64(Int64($0)) }, fix.isCharging.map { .bool($0) }, .text(fix.source),
            .bool(fix.clockSuspect),
        ]
    }

    /// Per device, the best of `rows` by `LatestRule`.
    static func latest(of rows: [LocationRow]) -> [UInt64: LocationRow] {
        var latest: [UInt64: LocationRow] = [:]
        for row in rows {
            if let current = latest[row.deviceID], !LatestRule.replaces(row, current) { continue }
            latest[row.deviceID] = row
        }
        return latest
    }

    /// The slow path of the history: rows as binary arrays, those already there (the same fix)
    /// skipped. Returns the rows the history now holds as this batch's: those inserted, and those
    /// found there already with this batch's own log offset and fix index (an earlier, interrupted
    /// attempt at this transaction whose helper had committed its half, see `apply`).
    private func insertSkippingDuplicates(
        _ rows: [LocationRow], nowMicros: Int64, _ connection: PostgresConnection
    ) throws -> [LocationRow] {
        guard !rows.isEmpty else { return [] }
        try ensurePartitions(rows, nowMicros: nowMicros, connection)
        var (casts, arrays) = Self.fixArrays(rows)
        casts += ", $\(arrays.count + 1)::bytea[]"
        arrays.append(.array(PostgresArray(.bytea, rows.map { .bytes(Self.shown($0)) })))
        let inserted = try connection.execute(
            """
            INSERT INTO \(s).device_locations (\(Self.historyColumns.joined(separator: ", ")))
            SELECT * FROM unnest(\(casts))
            ON CONFLICT DO NOTHING RETURNING log_offset, fix_index
            """, arrays)
        var held = Set<FixPosition>()
        for row in 0..<inserted.rowCount {
            held.insert(FixPosition(try inserted.int64(row, 0), try inserted.int64(row, 1)))
        }
        let skipped = rows.filter { !held.contains(FixPosition($0)) }
        if !skipped.isEmpty {
            let own = try connection.execute(
                """
                SELECT l.log_offset, l.fix_index
                FROM unnest($1::bigint[], $2::timestamptz[], $3::float8[], $4::float8[], $5::bigint[], $6::integer[])
                    AS v (device_id, recorded_at, latitude, longitude, log_offset, fix_index)
                JOIN \(s).device_locations l ON l.device_id = v.device_id AND l.recorded_at = v.recorded_at
                    AND l.latitude = v.latitude AND l.longitude = v.longitude
                    AND l.log_offset = v.log_offset AND l.fix_index = v.fix_index
                """,
                [
                    .int64Array(skipped.map { Int64($0.deviceID) }),
                    .timestampArray(micros: skipped.map(\.fix.recordedAtMicros)),
                    .array(PostgresArray(.float8, skipped.map { .double($0.fix.latitude) })),
                    .array(PostgresArray(.float8, skipped.map { .double($0.fix.longitude) })),
                    .int64Array(skipped.map { Int64($0.logOffset) }),
                    .array(PostgresArray(.integer, skipped.map { .int64(Int64($0.fixIndex)) })),
                ])
            for row in 0..<own.rowCount {
                held.insert(FixPosition(try own.int64(row, 0), try own.int64(row, 1)))
            }
        }
        return rows.filter { held.contains(FixPosition($0)) }
    }

    private func ensurePartitions(_ rows: [LocationRow], nowMicros: Int64, _ connection: PostgresConnection)
        throws
    {
        var months = Set<Int>()
        for row in rows where months.insert(Month(micros: row.fix.recordedAtMicros).index).inserted {
            try Schema.ensurePartition(
                schema, monthOf: row.fix.recordedAtMicros, nowMicros: nowMicros, connection)
        }
    }

    /// Fix rows as one binary array per column, and the `$1::bigint[], ...` list that unnests them.
    static func fixArrays(_ rows: [LocationRow]) -> (casts: String, arrays: [PostgresValue?]) {
        var columns = [[PostgresValue?]](repeating: [], count: locationColumns.count)
        for index in columns.indices { columns[index].reserveCapacity(rows.count) }
        for row in rows {
            for (index, value) in values(row).enumerated() { columns[index].append(value) }
        }
        let arrays = zip(ProjectionSchema.fixColumns, columns).map { column, values in
            PostgresValue.array(PostgresArray(elementType(column.type), values))
        }
        let casts = ProjectionSchema.fixColumns.enumerated().map {
            "$\($0.offset + 1)::\($0.element.type.castName)[]"
        }
        .joined(separator: ", ")
        return (casts, arrays)
    }

    /// COPY of fix rows into `device_locations`, creating the month partitions they need: the
    /// projector's bulk path, and on its own the physical baseline its benchmark compares against.
    public func copyLocations(_ rows: [LocationRow], nowMicros: Int64, _ connection: PostgresConnection)
        throws
    {
        guard !rows.isEmpty else { return }
        try ensurePartitions(rows, nowMicros: nowMicros, connection)
        try copyRows(Self.indexOrder(rows), connection)
    }

    /// COPY of rows already in index order into partitions that exist.
    private func copyRows(_ rows: some Collection<LocationRow>, _ connection: PostgresConnection) throws {
        guard !rows.isEmpty else { return }
        try connection.copyInBinary(
            table: ProjectionSchema.Table.deviceLocations.in(schema), columns: Self.historyColumns,
            rows: rows, encode: Self.encode)
    }

    /// `rows` in the order of the history's indexes, which both begin with (device_id, recorded_at):
    /// consecutive inserts then land on the same index leaf pages instead of one device's pages
    /// after another's. Index upkeep is most of a drain's time in PostgreSQL (2 M fixes: 7.8 s into
    /// the heap alone, 60 s with both indexes; 24 s with both when sorted by device and time,
    /// docs/benchmarks.md). The heap comes out grouped by device too, as a history read wants it.
    /// Rows already in that order (a sealed batch's, `ProjectionBatch.seal`) are returned as they
    /// are, without a copy.
    static func indexOrder(_ rows: [LocationRow]) -> [LocationRow] {
        isInIndexOrder(rows) ? rows : rows.sorted(by: precedesInIndex)
    }

    static func precedesInIndex(_ a: LocationRow, _ b: LocationRow) -> Bool {
        (a.deviceID, a.fix.recordedAtMicros, a.logOffset, a.fixIndex)
            < (b.deviceID, b.fix.recordedAtMicros, b.logOffset, b.fixIndex)
    }

    static func isInIndexOrder(_ rows: [LocationRow]) -> Bool {
        rows.indices.dropFirst().allSatisfy { !precedesInIndex(rows[$0], rows[$0 - 1]) }
    }

    /// One row of `device_locations` in binary COPY form: one field per `ProjectionSchema.fixColumns`,
    /// each of the width of its column's type.
    static func encode(_ row: LocationRow, _ out: inout BinaryCopyRows) throws(PostgresError) {
        let fix = row.fix
        out.beginRow(fieldCount: historyColumns.count)
        out.int64(Int64(row.deviceID))
        out.int64(Int64(row.logOffset))
        out.int32(Int32(row.fixIndex))
        out.timestamp(micros: fix.recordedAtMicros)
        out.timestamp(micros: row.receivedAtMicros)
        out.float8(fix.latitude)
        out.float8(fix.longitude)
        if let value = fix.accuracyMeters { out.float8(value) } else { out.null() }
        if let value = fix.altitudeMeters { out.float8(value) } else { out.null() }
        if let value = fix.speedMetersPerSecond { out.float8(value) } else { out.null() }
        if let value = fix.headingDegrees { out.float8(value) } else { out.null() }
        if let value = fix.batteryPercent { out.int16(Int16(value)) } else { out.null() }
        if let value = fix.isCharging { out.bool(value) } else { out.null() }
        try out.text(fix.source)
        out.bool(fix.clockSuspect)
        let source = fix.source.utf8
        out.bytea(count: ShownFix.byteCount(sourceBytes: source.count)) { bytes in
            ShownFix.append(shownFields(row), source: source, to: &bytes)
        }
    }

    private func writeBatches(_ rows: [BatchRow], _ connection: PostgresConnection) throws {
        guard !rows.isEmpty else { return }
        // In the order of the table's key, as the history's rows are: a drain's inserts of one
        // device then land on one leaf page after another instead of hopping between devices'.
        let key = { (row: BatchRow) in (row.deviceID, row.receivedAtMicros, row.logOffset) }
        let ordered = rows.indices.dropFirst().allSatisfy { key(rows[$0 - 1]) <= key(rows[$0]) }
        try connection.copyInBinary(
            table: ProjectionSchema.Table.deviceBatches.in(schema),
            columns: ProjectionSchema.batchColumnNames,
            rows: ordered ? rows : rows.sorted { key($0) < key($1) }, encode: Self.encode)
    }

    /// One row of `device_batches` in binary COPY form, in `ProjectionSchema.batchColumnNames` order.
    static func encode(_ row: BatchRow, _ out: inout BinaryCopyRows) throws(PostgresError) {
        out.beginRow(fieldCount: ProjectionSchema.batchColumnNames.count)
        out.int64(Int64(row.logOffset))
        out.int64(Int64(row.deviceID))
        out.uuid(high: row.batchID.high, low: row.batchID.low)
        out.timestamp(micros: row.receivedAtMicros)
        out.int32(Int32(row.fixCount))
        out.int32(Int32(row.rejectedCount))
        if let value = row.recordedMinMicros { out.timestamp(micros: value) } else { out.null() }
        if let value = row.recordedMaxMicros { out.timestamp(micros: value) } else { out.null() }
        try out.text(row.clientProtocol.name)
    }

    /// One statement for all devices of the batch: candidates as arrays, the rule in the WHERE.
    private func writeLatest(_ rows: [LocationRow], _ connection: PostgresConnection) throws {
        guard !rows.isEmpty else { return }
        let (casts, arrays) = Self.fixArrays(rows)
        let names = Self.locationColumns.joined(separator: ", ")
        let updates = Self.locationColumns.dropFirst().map { "\($0) = excluded.\($0)" }.joined(
            separator: ", ")
        _ = try connection.execute(
            """
            INSERT INTO \(s).device_latest AS t (\(names))
            SELECT * FROM unnest(\(casts))
            ON CONFLICT (device_id) DO UPDATE SET \(updates)
            WHERE \(LatestRule.sqlCondition)
            """, arrays)
    }

    /// The binary array element of a projection column's type.
    static func elementType(_ type: ProjectionSchema.ColumnType) -> PostgresArray.ElementType {
        switch type {
        case .bigint: .bigint
        case .integer: .integer
        case .smallint: .smallint
        case .timestamptz: .timestamptz
        case .float8: .float8
        case .boolean: .boolean
        case .text: .text
        }
    }

    private func writeLastSeen(_ lastSeen: [UInt64: Int64], asOf: UInt64, _ connection: PostgresConnection)
        throws
    {
        guard !lastSeen.isEmpty else { return }
        let pairs = Array(lastSeen)
        _ = try connection.execute(
            """
            UPDATE \(s).devices d SET last_seen_at = greatest(d.last_seen_at, v.seen), as_of_offset = $3
            FROM unnest($1::bigint[], $2::timestamptz[]) AS v (id, seen) WHERE d.id = v.id
            """,
            [
                .int64Array(pairs.map { Int64($0.key) }), .timestampArray(micros: pairs.map { $0.value }),
                .int64(Int64(asOf)),
            ])
    }
}

/// Where a fix sits in the log: the history row's identity as the projector wrote it.
private struct FixPosition: Hashable {
    var logOffset: Int64
    var fixIndex: Int64

    init(_ logOffset: Int64?, _ fixIndex: Int64?) {
        self.logOffset = logOffset ?? -1
        self.fixIndex = fixIndex ?? -1
    }

    init(_ row: LocationRow) { self.init(Int64(row.logOffset), Int64(row.fixIndex)) }
}

/// Whether the helper's COPY committed, set once by the helper's thread and waited for by the
/// main transaction before it commits.
private final class Outcome: @unchecked Sendable {
    private let lock = ConditionLock()
    private var committed: Bool?  // guarded by `lock`

    func finish(_ value: Bool) {
        lock.withLock {
            committed = value
            lock.broadcast()
        }
    }

    func wait() -> Bool {
        lock.withLock {
            while committed == nil { lock.wait() }
            return committed!
        }
    }
}
