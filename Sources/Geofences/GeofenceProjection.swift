import Events
import Postgres
import ProjectionSchema
import Projector
import Synchronization

/// The geofence projection (docs/geofences.md): the same log as the main projection,
/// folded by the same loop (`Projector` over a `LogProjection`) into enter and leave transitions,
/// with its own checkpoint and schema. Each transaction writes its rows and moves its checkpoint
/// together, so every transition is written exactly once whatever crashes.
///
/// Order: a device's fixes decide in `recorded_at` order, not in the order they arrived. A fix at
/// or after a (fence, device) pair's horizon folds straight into its state (the common case, no
/// read). A fix before it (a late offline batch), an erasure, or a fence drawn or moved, marks the
/// pair for a recompute from that time: the state just before it is the decision of the pair's
/// last decided fix before it, and the device's fixes from that time on are replayed; the
/// transitions found are compared with the stored ones, so those that did not change keep their
/// row (and id) and only the difference is written.
///
/// A recompute reads the fixes from the main projection's history (`device_locations` in
/// `history`), not from a copy of its own. So it folds no record the main projection has not
/// folded (`checkpointAndFoldLimit`: its checkpoint), and reads only the fixes of records it has folded itself
/// (`log_offset` below its own position): what it decides is what the fixes it has seen say,
/// whichever projector is ahead.
public struct GeofenceProjection: LogProjection {
    public let schema: String
    /// The main projection's schema, whose history a recompute reads: the live generation's name,
    /// which a rebuild's swap (`findmy replay`) keeps.
    public let history: String
    public var name: String { "geofences" }
    /// The fences and pair states as committed, kept between transactions so that the common path
    /// reads nothing. Taken out for a transaction and put back only when it committed: a failed
    /// one leaves it empty, and the next transaction loads it again from the tables.
    let cache = CacheBox()

    public init(schema: String = GeofenceSchema.schema, history: String = ProjectionSchema.live) {
        self.schema = schema
        self.history = history
    }

    final class CacheBox: Sendable {
        let value = Mutex<GeofenceCache?>(nil)
        func take() -> GeofenceCache? { value.withLock { $0.take() } }
        func put(_ cache: GeofenceCache?) { value.withLock { $0 = cache } }
    }

    private var s: String { PostgresConnection.quoteIdentifier(schema) }

    public func prepare(logID: UUID128, log: (String) -> Void, _ connection: PostgresConnection) throws {
        try Schema.migrate(connection)
        let generation = try Schema.generation(of: schema, connection)
        guard
            let reason = Projector.rebuildReason(
                generation, schema: schema, logID: logID, version: GeofenceTables.version)
        else { return }
        if !reason.isEmpty { log("geofences: " + reason) }
        cache.put(nil)
        try GeofenceTables.create(schema, logID: logID, connection)
    }

    /// Drops the projection's tables and makes them again, empty, bound to `logID` (checkpoint 0):
    /// `findmy replay` folds it again from the start. In place, not a generation swapped in as the
    /// main projection's: until the fold catches up, its transitions are missing. A projector of
    /// another process folding it meanwhile finds its checkpoint moved, forgets its cache and goes
    /// on from the table's checkpoint, so the two take turns.
    public func dropAndRecreate(logID: UUID128, _ connection: PostgresConnection) throws {
        try Schema.migrate(connection)
        cache.put(nil)
        try GeofenceTables.create(schema, logID: logID, connection)
    }

    public func checkpoint(_ connection: PostgresConnection) throws -> UInt64 {
        let result = try connection.execute(
            "SELECT next_offset FROM \(s).projector_checkpoints WHERE projection = $1",
            [.text(GeofenceTables.projectionName)])
        guard result.rowCount == 1 else { throw ProjectorError.noGeneration(schema: schema) }
        return UInt64(bitPattern: try result.int64(0, 0) ?? 0)
    }

    public func makeBatch(firstOffset: UInt64) -> GeofenceBatch { GeofenceBatch(firstOffset: firstOffset) }

    public func analyze(_ connection: PostgresConnection) throws {
        try connection.executeScript(
            "ANALYZE \(s).geofence_transitions, \(s).geofence_state, \(s).found_notices")
    }

    /// Its checkpoint, and the main projection's as its fold limit: a record is folded here only
    /// once its fixes are in the history a recompute reads. 0 while there is no main projection.
    public func checkpointAndFoldLimit(_ connection: PostgresConnection) throws -> (
        checkpoint: UInt64, foldLimit: UInt64?
    ) {
        let both: () throws -> PostgresResult = {
            try connection.execute(
                """
                SELECT g.next_offset, coalesce(m.next_offset, 0) FROM \(s).projector_checkpoints g
                LEFT JOIN \(PostgresConnection.quoteIdentifier(history)).projector_checkpoints m
                    ON m.projection = $2
                WHERE g.projection = $1
                """, [.text(GeofenceTables.projectionName), .text(Schema.projectionName)])
        }
        do {
            let result = try both()
            guard result.rowCount == 1 else { throw ProjectorError.noGeneration(schema: schema) }
            return (
                UInt64(bitPattern: try result.int64(0, 0) ?? 0),
                UInt64(bitPattern: try result.int64(0, 1) ?? 0)
            )
        } catch let error as PostgresError where error.sqlState == PostgresError.undefinedTable {
            return (try checkpoint(connection), 0)  // no main projection (or none of this): its own error
        }
    }

    /// The next offset the main projection in `history` will fold: every record below it is in its
    /// history (in a cluster, the row every partition has folded past, `PartitionedProjector`).
    static func historyCheckpoint(_ history: String, _ connection: PostgresConnection) throws -> UInt64 {
        let result = try connection.execute(
            """
            SELECT next_offset FROM \(PostgresConnection.quoteIdentifier(history)).projector_checkpoints
            WHERE projection = $1
            """, [.text(Schema.projectionName)])
        guard result.rowCount == 1 else { return 0 }
        return UInt64(bitPattern: try result.int64(0, 0) ?? 0)
    }

    public func apply(
        _ batch: GeofenceBatch, nowMicros: Int64, logID: UUID128?, _ connection: PostgresConnection
    ) throws {
        var work = cache.take()
        try connection.transaction { connection in
            try moveCheckpoint(batch, logID: logID, connection)
            var run = GeofenceRun(
                schema: schema, history: history,
                cache: try work ?? GeofenceRun.load(schema: schema, connection), connection: connection)
            for (offset, item) in batch.items {
                run.foldedEnd = offset
                try run.apply(item)
            }
            run.foldedEnd = batch.nextOffset
            try run.flush()
            work = run.cache
        }
        cache.put(work)
    }

    private func moveCheckpoint(_ batch: GeofenceBatch, logID: UUID128?, _ connection: PostgresConnection)
        throws
    {
        let moved = try connection.execute(
            """
            UPDATE \(s).projector_checkpoints
            SET next_offset = $1, last_received_at = coalesce($2, last_received_at), updated_at = now()
            WHERE projection = $3 AND next_offset = $4 AND ($5::uuid IS NULL OR EXISTS (
                SELECT 1 FROM findmy_meta.generations WHERE schema_name = $6 AND log_id = $5::uuid))
            """,
            [
                .int64(Int64(batch.nextOffset)), batch.lastReceivedAtMicros.map { .timestamp(micros: $0) },
                .text(GeofenceTables.projectionName), .int64(Int64(batch.firstOffset)),
                logID.map { .uuid(high: $0.high, low: $0.low) }, .text(schema),
            ])
        guard moved.affectedRows == 1 else {
            if let logID, try Schema.generation(of: schema, connection)?.logID != logID {
                throw ProjectorError.projectionOfAnotherLog(schema: schema, logID: logID)
            }
            throw ProjectorError.checkpointMoved(
                expected: batch.firstOffset, found: try? checkpoint(connection))
        }
    }
}

/// The fences and each (fence, device) pair's state, by device: what evaluating a fix needs
/// without a read. A device's fences are parallel arrays, so a fix costs one dictionary lookup
/// for all of them.
struct GeofenceCache: Sendable {
    var fences: [UInt64: GeofenceDefined] = [:]
    var devices: [UInt64: DeviceFences] = [:]
    /// The armed "notify when found" notices, by device (`found_notice_armed`, FoundNoticeFold.swift).
    var armedNotices: [UInt64: ArmedNotice] = [:]

    struct ArmedNotice: Sendable, Equatable {
        var userID: UInt64
        var armedOffset: UInt64
    }

    struct DeviceFences: Sendable {
        var fenceIDs: [UInt64] = []
        var circles: [GeofenceCircle] = []
        var states: [GeofencePairState] = []

        func index(of fenceID: UInt64) -> Int? { fenceIDs.firstIndex(of: fenceID) }

        mutating func remove(_ fenceID: UInt64) {
            guard let i = index(of: fenceID) else { return }
            fenceIDs.remove(at: i)
            circles.remove(at: i)
            states.remove(at: i)
        }
    }

    static func circle(_ fence: GeofenceDefined) -> GeofenceCircle {
        GeofenceCircle(latitude: fence.latitude, longitude: fence.longitude, radiusMeters: fence.radiusMeters)
    }
}

/// Why a geofence transaction did not commit; it is tried again.
public enum GeofenceError: Error, Equatable, CustomStringConvertible {
    /// A recompute needs the fixes of every record below `needed`, and the main projection's
    /// history has folded only those below `folded` (it was rebuilt, or is folded by another
    /// process that is behind): the transaction waits for it.
    case historyBehind(folded: UInt64, needed: UInt64)

    public var description: String {
        switch self {
        case .historyBehind(let folded, let needed):
            "the main projection has folded the log up to offset \(folded), a geofence recompute needs "
                + "it up to \(needed): waiting for it"
        }
    }
}
