import Postgres

/// Which partitions of a partitioned log a projector process may take (`findmy projector
/// --partitions`): every one (`all`: as many as its fair share, taking over any that is free), or a
/// fixed set (`0-3`, `1,5-7`: any of them that is free, no share).
public enum PartitionSelection: Sendable, Equatable, CustomStringConvertible {
    case all
    case only([Int])

    /// "all", or a comma-separated list of partitions and ranges ("0-3", "1,5-7"); nil when not
    /// one of those or empty.
    public static func parse(_ text: String) -> PartitionSelection? {
        if text == "all" { return .all }
        var partitions = Set<Int>()
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let bounds = part.split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 1 || bounds.count == 2,
                let low = Int(bounds[0]), let high = Int(bounds[bounds.count - 1]), low >= 0, low <= high
            else { return nil }
            for partition in low...high { partitions.insert(partition) }
        }
        return partitions.isEmpty ? nil : .only(partitions.sorted())
    }

    /// The partitions of a log of `count` partitions this selection names (those past the log's
    /// count are not in it).
    public func partitions(of count: Int) -> [Int] {
        switch self {
        case .all: Array(0..<count)
        case .only(let list): list.filter { $0 < count }
        }
    }

    public var description: String {
        switch self {
        case .all: "all"
        case .only(let list): list.map(String.init).joined(separator: ",")
        }
    }
}

/// The leases of partitioned projectors, as PostgreSQL session-level advisory locks (docs/scale.md,
/// "Projectors"). A lock is held by one session at a time and released when that session ends,
/// however it ends: a projector killed with SIGKILL, or cut from the database, loses its
/// partitions as its backend notices the closed connection, and another projector takes them.
///
/// Keys are the two-integer form, a key space of their own beside the one-bigint locks of the
/// schema migrations (7401) and the generation swap (7402):
///
///   (7403, p)     partition p is being projected by the session holding it
///   (7404, slot)  a live projector process (`--partitions all` divides the partitions by these)
///   (7405, 0)     held while one process prepares a projection (creates or rebuilds it)
///   (7406, 0)     the geofence projection is being folded by the session holding it
///                 (`SharedLogProjector`: one folder of the whole stream, docs/scale.md)
///   (7407, 0)     the geofence notifier runs on the ingest node whose session holds it
///                 (`GeofenceNotifier.Options.leaseClass`; the number is repeated there, as that
///                 module does not import this one)
public enum PartitionLeases {
    static let partitionClass: Int32 = 7403
    static let memberClass: Int32 = 7404
    static let prepareClass: Int32 = 7405
    public static let geofenceClass: Int32 = 7406
    public static let notifierClass: Int32 = 7407
    /// Member slots tried at most; a slot is free again once its process's session ends.
    static let memberSlotsMax = 4_096

    static func tryLock(_ lockClass: Int32, _ key: Int, _ session: PostgresConnection) throws -> Bool {
        let result = try session.execute(
            "SELECT pg_try_advisory_lock($1::integer, $2::integer)",
            [.int64(Int64(lockClass)), .int64(Int64(key))])
        return result.string(0, 0) == "t"
    }

    static func lock(_ lockClass: Int32, _ key: Int, _ session: PostgresConnection) throws {
        _ = try session.execute(
            "SELECT pg_advisory_lock($1::integer, $2::integer)",
            [.int64(Int64(lockClass)), .int64(Int64(key))])
    }

    static func unlock(_ lockClass: Int32, _ key: Int, _ session: PostgresConnection) throws {
        _ = try session.execute(
            "SELECT pg_advisory_unlock($1::integer, $2::integer)",
            [.int64(Int64(lockClass)), .int64(Int64(key))])
    }

    /// Takes the first free member slot; returns it.
    static func register(_ session: PostgresConnection) throws -> Int {
        for slot in 0..<memberSlotsMax where try tryLock(memberClass, slot, session) { return slot }
        throw PartitionedProjectorError.tooManyProjectors(memberSlotsMax)
    }

    /// Live projector processes on this database (each holds one member slot).
    static func members(_ session: PostgresConnection) throws -> Int {
        let result = try session.execute(
            """
            SELECT count(*) FROM pg_locks
            WHERE locktype = 'advisory' AND granted AND classid = $1::integer AND objsubid = 2
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """, [.int64(Int64(memberClass))])
        return Int(try result.int64(0, 0) ?? 1)
    }

    /// Which partitions are held now, and by whom: the holding session's `application_name`
    /// (`findmy projector PID`, set by `PartitionedProjector`).
    public static func holders(_ session: PostgresConnection) throws -> [Int: String] {
        let result = try session.execute(
            """
            SELECT l.objid::bigint, coalesce(a.application_name, l.pid::text) FROM pg_locks l
            LEFT JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::integer AND l.objsubid = 2
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """, [.int64(Int64(partitionClass))])
        var holders: [Int: String] = [:]
        for row in 0..<result.rowCount {
            holders[Int(try result.int64(row, 0) ?? -1)] = result.string(row, 1) ?? ""
        }
        return holders
    }
}

public enum PartitionedProjectorError: Error, Equatable, CustomStringConvertible {
    case tooManyProjectors(Int)
    /// The session holding the leases broke: every partition is given up until it is back.
    case sessionLost(String)

    public var description: String {
        switch self {
        case .tooManyProjectors(let max):
            "more than \(max) projector processes on this database: every member slot is taken; stop some"
        case .sessionLost(let why):
            "the PostgreSQL session holding this projector's partitions ended (\(why)); its partitions are "
                + "released, reconnecting to take partitions again"
        }
    }
}
