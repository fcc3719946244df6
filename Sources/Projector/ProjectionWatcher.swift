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

    public let name = "projection-watcher"
    public let checkpointBells = Doorbells()
    /// The default interval between two polls: the most a read-your-writes wait adds.
    public static let pollMillisDefault: Int64 = 100

    private let conninfo: String
    private let logID: UUID128
    private let pollMillis: Int64
    private let current = Mutex(Status())
    private let worker = StoppableThread()
    /// Touched by the worker thread only (and by `start` before the thread exists).
    private nonisolated(unsafe) var connection: PostgresConnection?

    /// Watches the projection in the database `conninfo` names, which must be the one of the log
    /// `logID` (a JetStream stream's id, `JetStreamLog.logID()`).
    public init(conninfo: String, logID: UUID128, pollMillis: Int64 = pollMillisDefault) {
        precondition(pollMillis > 0, "pollMillis must be positive")
        self.conninfo = conninfo
        self.logID = logID
        self.pollMillis = pollMillis
    }

    public var status: Status { current.withLock { $0 } }

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
        let observed: (checkpoint: UInt64?, refusal: String?)
        do {
            if connection.map({ !$0.isAlive }) ?? true {
                connection?.close()
                connection = try PostgresConnection(conninfo)
            }
            observed = try Self.observe(connection!, logID: logID)
        } catch {
            connection?.close()
            connection = nil
            current.withLock {
                $0.polls += 1
                $0.lastError = "\(error)"
            }
            return
        }
        let moved = current.withLock { status -> Bool in
            status.polls += 1
            status.lastError = nil
            status.refusal = observed.refusal
            guard let checkpoint = observed.checkpoint, checkpoint > status.checkpoint else { return false }
            // Never back: a replica that fell behind its primary would otherwise unsay what a read
            // was told it may wait for. What the primary had already folded stays folded.
            status.checkpoint = checkpoint
            return true
        }
        if moved { checkpointBells.ringAll() }
    }

    /// The live projection's checkpoint and why reads must be refused (nil when they may go on).
    static func observe(_ connection: PostgresConnection, logID: UUID128) throws -> (
        checkpoint: UInt64?, refusal: String?
    ) {
        guard let generation = try Schema.generation(of: Schema.live, connection) else {
            return (
                nil,
                "no projection in this database yet: is `findmy projector --log nats://...` running "
                    + "against it? (docs/scale.md)"
            )
        }
        guard generation.logID == logID else {
            let theirs = generation.logID.map { "\($0)" } ?? "an unknown log"
            return (
                nil,
                "the projection in this database was folded from \(theirs), not from this node's "
                    + "stream (log \(logID)): point --database-url at the database its projectors write"
            )
        }
        guard generation.version == Schema.projectionVersion else {
            return (
                nil,
                "the projection in this database is version \(generation.version), this findmy reads "
                    + "version \(Schema.projectionVersion): run the projectors of this version"
            )
        }
        return (try ProjectionStore().checkpoint(connection).next, nil)
    }
}
