import Events
import Postgres
import Synchronization
import Threads

/// The projection as seen by a process that reads it but does not write it: an ingest node of a
/// JetStream log serving the read API and the panel from PostgreSQL (or from a streaming replica of
/// it) while `findmy projector` processes elsewhere write the rows (docs/scale.md, "Reads in a
/// cluster").
///
/// On one machine the read side learns from its own projector how far the projection is (its
/// checkpoint, for read-your-writes) and whether it belongs to this log (its binding). Here no
/// projector runs in the process, so the watcher asks PostgreSQL: every `pollMillis` one
/// connection reads the live generation's log id (`findmy_meta.generations`) and the whole
/// projection's checkpoint row (`Schema.projectionName`, which the partitioned projectors move to
/// their lowest partition checkpoint), and rings `checkpointBells` when the checkpoint moved. A
/// read that waits for an offset therefore waits up to one poll longer than on one machine.
///
/// Polling, not LISTEN/NOTIFY: a streaming replica delivers no notifications, and a poll of two
/// indexed rows is cheap.
public final class ProjectionWatcher: Service {
    public struct Status: Sendable, Equatable {
        /// Every offset below it is in the projection (0 before the first answer).
        public var checkpoint: UInt64 = 0
        /// Why reads are refused now (no projection, another log's); nil once the projection
        /// was seen bound to this log.
        public var refusal: String? = "the projection has not been checked yet (see /healthz)"
        /// The last failure to ask PostgreSQL, nil after a poll that worked.
        public var lastError: String?
        public var polls: Int = 0
    }

    /// A projection the watcher follows besides the main one (the geofences', docs/scale.md):
    /// its schema, its row in that schema's `projector_checkpoints`, the version this findmy
    /// reads, and the words its refusals use.
    public struct Watched: Sendable {
        public var schema: String
        public var checkpointName: String
        public var version: Int
        /// "the projection", "the geofence projection".
        public var what: String

        public init(schema: String, checkpointName: String, version: Int, what: String) {
            self.schema = schema
            self.checkpointName = checkpointName
            self.version = version
            self.what = what
        }

        /// The main projection, whose row `main` the partitioned projectors move to their lowest
        /// partition checkpoint.
        public static let main = Watched(
            schema: Schema.live, checkpointName: Schema.projectionName, version: Schema.projectionVersion,
            what: "the projection")
    }

    public let name = "projection-watcher"
    /// Rung when the main projection's checkpoint moved.
    public var checkpointBells: Doorbells { bells[0] }
    /// The default interval between two polls: the most a read-your-writes wait adds.
    public static let pollMillisDefault: Int64 = 100

    private let conninfo: String
    private let logID: UUID128
    private let pollMillis: Int64
    /// The main projection first, then the others, in the order given.
    private let watched: [Watched]
    private let bells: [Doorbells]
    private let current: Mutex<[Status]>
    private let worker = StoppableThread()
    /// Touched by the worker thread only (and by `start` before the thread exists).
    private nonisolated(unsafe) var connection: PostgresConnection?

    /// Watches the projection in the database `conninfo` names, which must be the one of the log
    /// `logID` (a JetStream stream's id, `JetStreamLog.logID()`), and the projections `also`
    /// beside it, in the same poll.
    public init(conninfo: String, logID: UUID128, pollMillis: Int64 = pollMillisDefault, also: [Watched] = [])
    {
        precondition(pollMillis > 0, "pollMillis must be positive")
        self.conninfo = conninfo
        self.logID = logID
        self.pollMillis = pollMillis
        watched = [.main] + also
        bells = watched.map { _ in Doorbells() }
        current = Mutex(watched.map { _ in Status() })
    }

    /// The main projection's.
    public var status: Status { current.withLock { $0[0] } }

    /// The status of the projection in `schema`, and the bells rung when its checkpoint moves;
    /// nil when it is not watched.
    public func watching(schema: String) -> (status: @Sendable () -> Status, bells: Doorbells)? {
        guard let index = watched.firstIndex(where: { $0.schema == schema }) else { return nil }
        return ({ [self] in current.withLock { $0[index] } }, bells[index])
    }

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    /// Polls once before returning (PostgreSQL unreachable is not a start-up failure: reads are
    /// refused and the thread goes on asking), then polls on a thread of its own.
    public func start() throws {
        poll()
        worker.start { [self] stop in
            while !stop.wait(micros: pollMillis * 1000) { poll() }
            connection?.close()
            connection = nil
        }
    }

    public func stop(graceMicros: Int64) { worker.stop() }

    private func poll() {
        var observed: [(checkpoint: UInt64?, refusal: String?)] = []
        do {
            if connection.map({ !$0.isAlive }) ?? true {
                connection?.close()
                connection = try PostgresConnection(conninfo)
            }
            for projection in watched {
                observed.append(try Self.observe(projection, connection!, logID: logID))
            }
        } catch {
            connection?.close()
            connection = nil
            current.withLock {
                for index in $0.indices {
                    $0[index].polls += 1
                    $0[index].lastError = "\(error)"
                }
            }
            return
        }
        let moved = current.withLock { statuses -> [Bool] in
            zip(statuses.indices, observed).map { index, seen in
                statuses[index].polls += 1
                statuses[index].lastError = nil
                statuses[index].refusal = seen.refusal
                guard let checkpoint = seen.checkpoint, checkpoint > statuses[index].checkpoint else {
                    return false
                }
                // Never back: a replica that fell behind its primary would otherwise unsay what a
                // read was told it may wait for. What the primary had already folded stays folded.
                statuses[index].checkpoint = checkpoint
                return true
            }
        }
        for (index, rung) in moved.enumerated() where rung { bells[index].ringAll() }
    }

    /// The projection's checkpoint and why reads must be refused (nil when they may go on).
    static func observe(_ projection: Watched, _ connection: PostgresConnection, logID: UUID128) throws -> (
        checkpoint: UInt64?, refusal: String?
    ) {
        let what = projection.what
        guard let generation = try Schema.generation(of: projection.schema, connection) else {
            return (
                nil,
                "no \(what.dropFirst("the ".count)) in this database yet: is `findmy projector --log nats://...` "
                    + "running against it? (docs/scale.md)"
            )
        }
        guard generation.logID == logID else {
            let theirs = generation.logID.map { "\($0)" } ?? "an unknown log"
            return (
                nil,
                "\(what) in this database was folded from \(theirs), not from this node's "
                    + "stream (log \(logID)): point --database-url at the database its projectors write"
            )
        }
        guard generation.version == projection.version else {
            return (
                nil,
                "\(what) in this database is version \(generation.version), this findmy reads "
                    + "version \(projection.version): run the projectors of this version"
            )
        }
        let store = ProjectionStore(schema: projection.schema, checkpointName: projection.checkpointName)
        return (try store.checkpoint(connection).next, nil)
    }
}
