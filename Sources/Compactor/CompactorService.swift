import Threads

/// The retention compactor's schedule inside `findmy serve` (docs/retention.md): a first run
/// `firstRunDelayMicros` after start (or after the interval, when that is shorter), then one every
/// `intervalMicros`. Between runs its thread sleeps on its stop signal, so `stop` wakes it at once;
/// a run in progress is told to stop (`Compactor.stopSignal`) and ends at its next safe point: between
/// two segment rewrites, or within a few hundred records of the registry refold
/// (docs/retention.md, "Stopping during a compaction").
public final class CompactorService: Service {
    public struct Schedule: Sendable {
        public var intervalMicros: Int64 = 3_600_000_000
        public var firstRunDelayMicros: Int64 = 30_000_000
        public init() {}
    }

    public let name = "compactor"
    public let compactor: Compactor
    public let schedule: Schedule
    /// Told the outcome of each scheduled run (the server logs it).
    private let report: @Sendable (Result<CompactionReport, any Error>) -> Void
    private let worker = StoppableThread()

    public init(
        compactor: Compactor, schedule: Schedule,
        report: @escaping @Sendable (Result<CompactionReport, any Error>) -> Void
    ) {
        precondition(schedule.intervalMicros > 0 && schedule.firstRunDelayMicros >= 0)
        self.compactor = compactor
        self.schedule = schedule
        self.report = report
    }

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    public func start() throws {
        let (compactor, schedule, report) = (self.compactor, self.schedule, self.report)
        worker.start { stop in
            // Runs start an interval apart (a run longer than the interval is followed at once).
            var next = monotonicMicros() + min(schedule.intervalMicros, schedule.firstRunDelayMicros)
            while !stop.wait(micros: next - monotonicMicros()) {
                next = monotonicMicros() + schedule.intervalMicros
                report(Result { try compactor.run() })
            }
        }
    }

    public func stop(graceMicros: Int64) {
        compactor.stopSignal.request()
        worker.stop()
        // Runs asked for on the admin socket (`Compactor.start`) end at their next safe point too.
        compactor.joinStartedRuns()
    }
}
