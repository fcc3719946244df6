import Synchronization
import Threads

/// Watches the embedded cluster while `findmy serve` runs and brings it back when it ends on its
/// own, with the back-off of `ClusterSupervision`, so that the projector and the reads (which
/// reconnect by themselves) resume without a restart of findmy.
///
/// Its thread checks every `watchMicros` whether the postmaster still runs (`waitpid` on our
/// child). A stop request wakes every wait at once and abandons a start in progress, so a
/// shutdown is never held up by a cluster that cannot start.
public final class ClusterSupervisor: Sendable {
    public struct Options: Sendable {
        public var backOff = ClusterSupervision.BackOff()
        /// How often it checks that the server still runs.
        public var watchMicros: Int64 = 250_000
        /// The clock of the back-off; injected by tests.
        public var clockMicros: @Sendable () -> Int64 = monotonicMicros

        public init() {}
    }

    /// One line of the supervisor's life, for the structured log.
    public enum Event: Sendable, Equatable {
        case ended(String)
        case restarted(restarts: Int)
        case restartFailed(String, nextAttemptInMicros: Int64)
    }

    public let cluster: EmbeddedPostgres
    public let options: Options
    private let onEvent: @Sendable (Event) -> Void
    private let supervision: Mutex<ClusterSupervision>
    private let worker = StoppableThread()

    public init(
        _ cluster: EmbeddedPostgres, options: Options = Options(),
        onEvent: @escaping @Sendable (Event) -> Void = { _ in }
    ) {
        self.cluster = cluster
        self.options = options
        self.onEvent = onEvent
        supervision = Mutex(ClusterSupervision(backOff: options.backOff))
    }

    /// What it knows now (`/healthz`).
    public var status: ClusterSupervision { supervision.withLock { $0 } }

    public func start() { worker.start { [self] stop in run(stop) } }

    /// Returns once its thread has ended; a start in progress is abandoned and its server stopped.
    public func stop() { worker.stop() }

    private func run(_ stop: StopSignal) {
        while !stop.isRequested {
            let now = options.clockMicros()
            switch supervision.withLock({ $0.next(nowMicros: now) }) {
            case .watch:
                if let why = cluster.serverEnded() {
                    supervision.withLock { $0.serverEnded(why, nowMicros: now) }
                    onEvent(.ended(why))
                } else {
                    stop.wait(micros: options.watchMicros)
                }
            case .restart:
                supervision.withLock { $0.restartBegan(nowMicros: now) }
                do {
                    try cluster.restart(abandon: { stop.isRequested })
                    let restarts = supervision.withLock { supervision -> Int in
                        supervision.restartSucceeded()
                        return supervision.restarts
                    }
                    onEvent(.restarted(restarts: restarts))
                } catch {
                    guard !stop.isRequested else { return }
                    let failedAt = options.clockMicros()
                    let next = supervision.withLock { supervision -> Int64 in
                        supervision.restartFailed(error.description, nowMicros: failedAt)
                        guard case .wait(let until) = supervision.next(nowMicros: failedAt) else { return 0 }
                        return until - failedAt
                    }
                    onEvent(.restartFailed(error.description, nextAttemptInMicros: next))
                }
            case .wait(let untilMicros):
                stop.wait(micros: untilMicros - now)
            }
        }
    }
}
