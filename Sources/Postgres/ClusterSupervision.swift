/// What the supervisor of the embedded cluster knows, and what it does next: a pure value whose
/// event methods say what to do; `ClusterSupervisor` does the waiting, the watching and the starts.
///
/// | phase | event | next phase | action |
/// | --- | --- | --- | --- |
/// | running | the server ended (crash, `kill -9`, a full disk, `pg_ctl stop` from outside) | down, first attempt after the minimum delay | wait, then restart |
/// | down | an attempt succeeded | running, `restarts` + 1, delay back to the minimum | watch |
/// | down | an attempt failed | down, the delay doubled (up to the maximum), next attempt after it | wait, then restart |
///
/// Even the first attempt waits: a killed server's backends may hold its shared memory for a
/// moment, and a `pg_ctl stop` from outside waits until the old server's `postmaster.pid` is gone,
/// which a new server started at once could replace before it looks.
///
/// A server that keeps failing to start (recovery on a disk that is still full) is retried for as
/// long as findmy runs, never given up on: the operator frees the space and the attempt in
/// progress, or the next one, brings it back. Until then `/healthz` says `restarting` and why.
public struct ClusterSupervision: Sendable, Equatable {
    public struct BackOff: Sendable, Equatable {
        /// The wait before the first attempt; each failed attempt doubles it.
        public var delayMicrosMin: Int64
        public var delayMicrosMax: Int64

        public init(delayMicrosMin: Int64 = 500_000, delayMicrosMax: Int64 = 15_000_000) {
            precondition(delayMicrosMin > 0 && delayMicrosMin <= delayMicrosMax)
            self.delayMicrosMin = delayMicrosMin
            self.delayMicrosMax = delayMicrosMax
        }
    }

    public enum Phase: Sendable, Equatable {
        case running
        /// Not running since `sinceMicros`; the next start is tried at `nextAttemptMicros`.
        case down(sinceMicros: Int64, nextAttemptMicros: Int64)
    }

    public enum Action: Sendable, Equatable {
        /// Check now and then that the server still runs.
        case watch
        /// Start the server now.
        case restart
        /// Nothing to do before `untilMicros` (a stop request wakes the wait).
        case wait(untilMicros: Int64)
    }

    public let backOff: BackOff
    public private(set) var phase: Phase = .running
    /// Starts that brought the server back since findmy started it.
    public private(set) var restarts = 0
    /// Starts that failed since the server last ran.
    public private(set) var failedAttempts = 0
    /// How the server last ended, with the last problem its log named.
    public private(set) var lastExit: String?
    /// Why the last attempt failed; nil once one succeeds.
    public private(set) var lastAttemptError: String?
    /// When the attempt in progress began; nil between attempts.
    public private(set) var attemptStartedMicros: Int64?
    private var delayMicros: Int64

    public init(backOff: BackOff = BackOff()) {
        self.backOff = backOff
        delayMicros = backOff.delayMicrosMin
    }

    /// What to do at `nowMicros`.
    public func next(nowMicros: Int64) -> Action {
        switch phase {
        case .running: .watch
        case .down(_, let nextAttemptMicros):
            nowMicros >= nextAttemptMicros ? .restart : .wait(untilMicros: nextAttemptMicros)
        }
    }

    /// The server ended on its own (findmy did not stop it).
    public mutating func serverEnded(_ why: String, nowMicros: Int64) {
        guard case .running = phase else { return }
        delayMicros = backOff.delayMicrosMin
        phase = .down(sinceMicros: nowMicros, nextAttemptMicros: nowMicros + delayMicros)
        lastExit = why
        failedAttempts = 0
    }

    /// An attempt begins (it ends in `restartSucceeded` or `restartFailed`).
    public mutating func restartBegan(nowMicros: Int64) {
        guard case .down = phase else { return }
        attemptStartedMicros = nowMicros
    }

    public mutating func restartSucceeded() {
        guard case .down = phase else { return }
        phase = .running
        attemptStartedMicros = nil
        restarts += 1
        failedAttempts = 0
        lastAttemptError = nil
        delayMicros = backOff.delayMicrosMin
    }

    public mutating func restartFailed(_ why: String, nowMicros: Int64) {
        guard case .down(let since, _) = phase else { return }
        failedAttempts += 1
        lastAttemptError = why
        attemptStartedMicros = nil
        delayMicros = min(delayMicros * 2, backOff.delayMicrosMax)
        phase = .down(sinceMicros: since, nextAttemptMicros: nowMicros + delayMicros)
    }
}
