import Threads

/// A projector (the main one, or another projection's) as a service of `findmy serve` and `findmy project`: `start` drops a projection of another log (so
/// that nothing is served from it) and runs `Projector.run` on a thread of its own, which retries
/// while PostgreSQL cannot be reached; `stop` wakes it and joins it, after the transaction in flight.
/// `onEnd` runs on that thread when the projector stops by itself (a log behind its checkpoint):
/// `findmy project` ends then, `findmy serve` goes on and says so in /healthz.
public final class ProjectorService: Service {
    /// `projector` for the main projection; another projection's service is named after it.
    public let name: String
    public let projector: Projector
    private let onEnd: @Sendable () -> Void
    private let worker = StoppableThread()

    public init(projector: Projector, name: String = "projector", onEnd: @escaping @Sendable () -> Void = {})
    {
        self.projector = projector
        self.name = name
        self.onEnd = onEnd
    }

    public var state: ServiceState {
        let status = projector.status
        if status.stopped { return .failed(status.lastError ?? "stopped") }
        return worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    public func start() throws {
        // PostgreSQL unreachable now is not a start-up failure: the thread retries and says why,
        // and the read side borrows no connection until the projection is bound to this log.
        try? projector.prepare()
        let (projector, onEnd) = (self.projector, self.onEnd)
        worker.start { stop in
            projector.run(until: stop)
            if !stop.isRequested { onEnd() }
        }
    }

    public func stop(graceMicros: Int64) { worker.stop() }
}
