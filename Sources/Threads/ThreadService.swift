import Synchronization

/// A service that is one loop on a thread of its own: `start` runs `body` on a `StoppableThread`,
/// `stop` requests the stop signal the loop sleeps on between rounds and joins the thread. For the
/// loops that need nothing else opened or closed around them (`findmy projector`'s partitioned
/// projector, its geofence projector and its retention schedule). `onEnd` runs on the thread when
/// `body` returns without a stop being requested (a loop that gave up): the owner decides whether
/// the process goes on without it.
public final class ThreadService: Service {
    public let name: String
    private let body: @Sendable (StopSignal) -> Void
    private let onEnd: @Sendable () -> Void
    private let worker = StoppableThread()
    private let ended = Atomic<Bool>(false)

    public init(
        name: String, onEnd: @escaping @Sendable () -> Void = {},
        run body: @escaping @Sendable (StopSignal) -> Void
    ) {
        self.name = name
        self.body = body
        self.onEnd = onEnd
    }

    public var state: ServiceState {
        if ended.load(ordering: .acquiring) || worker.stopSignal.isRequested { return .stopped }
        return worker.isRunning ? .running : .idle
    }

    public func start() throws {
        worker.start { [self] stop in
            body(stop)
            ended.store(true, ordering: .releasing)
            if !stop.isRequested { onEnd() }
        }
    }

    public func stop(graceMicros: Int64) { worker.stop() }
}
