import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What a service says about itself (for /healthz and the shutdown lines).
public enum ServiceState: Sendable, Equatable {
    case idle
    case running
    case stopped
    /// Stopped by a fatal error of its own, or failed to start; the text says why.
    case failed(String)
    /// Not working, and being brought back by itself (the embedded PostgreSQL after it ended); the
    /// text says why it is not working.
    case restarting(String)
}

/// A long-running part of the server (the log writer, an HTTP listener, the projector, the
/// compactor, the embedded PostgreSQL). Its owner constructs it, a `ServiceGroup` starts and stops
/// it. Services are thread-based: `start` returns once the service works (a listener accepts, the
/// database answers), and `stop` returns once its threads are gone.
///
/// Why this lives in `Threads`: every module with a long-running part already depends on it, and
/// the group is nothing but threads waiting on a condition; a target of its own would add a
/// dependency edge to every module for two files.
public protocol Service: AnyObject, Sendable {
    /// A short name for log lines (`log`, `postgres`, `projector`, `api`).
    var name: String { get }
    /// Returns once the service works; throws when it cannot, having released what it took.
    func start() throws
    /// Stops, letting work in progress finish for at most `graceMicros`, and returns once stopped.
    /// Called at most once, and only after `start` succeeded.
    func stop(graceMicros: Int64)
    var state: ServiceState { get }
}

/// One-shot stop request with a timed wait: what a service's thread sleeps on between rounds,
/// instead of polling a flag with `usleep`, so that `stop` wakes it at once.
public final class StopSignal: Sendable {
    private let lock = ConditionLock()
    private nonisolated(unsafe) var requested = false
    private let bells = Doorbells()

    public init() {}

    public var isRequested: Bool { lock.withLock { requested } }

    /// Sets the signal and wakes every waiter, and rings the doorbells added. Idempotent.
    public func request() {
        lock.withLock {
            requested = true
            lock.broadcast()
        }
        bells.ringAll()
    }

    /// Rings `bell` when the stop is requested (at once if it already is), for a thread that
    /// sleeps on a doorbell shared with other sources; `removeDoorbell` when done.
    public func addDoorbell(_ bell: Doorbell) {
        bells.add(bell)
        if isRequested { bell.ring() }
    }

    public func removeDoorbell(_ bell: Doorbell) { bells.remove(bell) }

    /// Sleeps until the signal is set or `micros` pass; returns whether it is set.
    @discardableResult
    public func wait(micros: Int64) -> Bool {
        let deadline = monotonicMicros() + max(0, micros)
        return lock.withLock {
            while !requested {
                if !lock.wait(0, untilMonotonicMicros: deadline) { break }
            }
            return requested
        }
    }

    /// Sleeps until the signal is set.
    public func wait() {
        lock.withLock {
            while !requested { lock.wait() }
        }
    }
}

/// A service's worker: one thread running its body until `stop` requests its stop signal, which
/// the body sleeps on between rounds; `stop` returns once the thread has ended.
public final class StoppableThread: Sendable {
    public let stopSignal = StopSignal()
    private let thread = Mutex<pthread_t?>(nil)

    public init() {}

    /// Whether `start` ran and `stop` has not.
    public var isRunning: Bool { thread.withLock { $0 != nil } && !stopSignal.isRequested }

    /// Starts the thread. Once only.
    public func start(_ body: @escaping @Sendable (StopSignal) -> Void) {
        let signal = stopSignal
        thread.withLock {
            precondition($0 == nil, "a StoppableThread starts once")
            $0 = spawnThread { body(signal) }
        }
    }

    /// Requests the stop and joins the thread (at once when it never started). Idempotent.
    public func stop() {
        stopSignal.request()
        if let running = thread.withLock({ $0.take() }) { pthread_join(running, nil) }
    }
}

/// Microseconds from a clock that never goes backwards: the one clock for measuring intervals and
/// for deadlines, and the clock of `ConditionLock`'s timed waits (CLOCK_MONOTONIC).
public func monotonicMicros() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
}

/// Why a group stopped.
public enum ServiceGroupStopReason: Sendable, Equatable {
    /// `requestStop` (a signal, say): a normal shutdown.
    case requested(String)
    /// A service reported a fatal error through `fail`.
    case fatal(service: String, message: String)
}

/// A service that could not start; the services started before it were stopped again.
public struct ServiceStartError: Error, Sendable, CustomStringConvertible {
    public let service: String
    public let underlying: any Error
    public var description: String { "\(underlying)" }
}

/// Runs several services as one, in the model of swift-service-lifecycle's `ServiceGroup` but on
/// threads: `start` starts them in order; if one fails, those already started stop in reverse and
/// the failure is thrown. `waitForStop` sleeps until `requestStop` (a signal) or `fail` (a service's
/// fatal error), from any thread. `stop` stops every started service in reverse order, each within
/// the grace period, whatever the path that led here; it runs once.
public final class ServiceGroup: Sendable {
    /// One line of the group's life, for the structured log.
    public enum Event: Sendable, Equatable {
        case started(String)
        case startFailed(String, String)
        case stopping(String)
        case stopped(String)
    }

    public let graceMicros: Int64
    private let onEvent: @Sendable (Event) -> Void
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private nonisolated(unsafe) var members: [any Service]
    private nonisolated(unsafe) var startedCount = 0
    private nonisolated(unsafe) var reason: ServiceGroupStopReason?
    private nonisolated(unsafe) var stopped = false

    /// A group of `services`, started by `start()`; more may be started one by one with `start(_:)`.
    public init(
        _ services: [any Service] = [], graceMicros: Int64,
        onEvent: @escaping @Sendable (Event) -> Void = { _ in }
    ) {
        precondition(graceMicros >= 0)
        members = services
        self.graceMicros = graceMicros
        self.onEvent = onEvent
    }

    /// Starts every service given to `init` in order. When one throws, stops those started before
    /// it in reverse and throws `ServiceStartError`.
    public func start() throws(ServiceStartError) {
        while let next = lock.withLock({ startedCount < members.count ? members[startedCount] : nil }) {
            try startMember(next)
        }
    }

    /// Adds `service` after those already started and starts it: for a server whose later services
    /// are built from what earlier ones opened. When it throws, every service started before it
    /// stops in reverse and `ServiceStartError` is thrown.
    public func start(_ service: any Service) throws(ServiceStartError) {
        lock.withLock {
            precondition(
                !stopped && startedCount == members.count, "start(_:) after stop, or with services pending")
            members.append(service)
        }
        try startMember(service)
    }

    private func startMember(_ service: any Service) throws(ServiceStartError) {
        do {
            try service.start()
        } catch {
            onEvent(.startFailed(service.name, "\(error)"))
            stop()
            throw ServiceStartError(service: service.name, underlying: error)
        }
        lock.withLock { startedCount += 1 }
        onEvent(.started(service.name))
    }

    /// Every service of the group in start order, with its state now (`/healthz`).
    public var states: [(name: String, state: ServiceState)] {
        // The states are read outside the group's lock: a service's own lock is never taken under it.
        services.map { ($0.name, $0.state) }
    }

    /// Every service of the group in start order.
    public var services: [any Service] { lock.withLock { members } }

    /// A normal shutdown (a signal): wakes `waitForStop`. The first reason given wins.
    public func requestStop(_ why: String) { settle(.requested(why)) }

    /// A service's fatal error, from any thread: wakes `waitForStop`. The first reason given wins.
    public func fail(_ service: String, _ message: String) {
        settle(.fatal(service: service, message: message))
    }

    private func settle(_ why: ServiceGroupStopReason) {
        lock.withLock {
            if reason == nil { reason = why }
            lock.broadcast()
        }
    }

    /// Sleeps until `requestStop` or `fail`; returns the first reason.
    public func waitForStop() -> ServiceGroupStopReason {
        lock.withLock {
            while reason == nil { lock.wait() }
            return reason!
        }
    }

    /// Stops every started service in reverse order. Idempotent; later calls return at once.
    public func stop() {
        let started: [any Service]? = lock.withLock {
            guard !stopped else { return nil }
            stopped = true
            return Array(members[..<startedCount])
        }
        guard let started else { return }
        for service in started.reversed() {
            onEvent(.stopping(service.name))
            service.stop(graceMicros: graceMicros)
            onEvent(.stopped(service.name))
        }
    }

    /// Starts, waits for a stop request or a fatal error, stops in reverse; returns why it stopped.
    public func run() throws(ServiceStartError) -> ServiceGroupStopReason {
        try start()
        let why = waitForStop()
        stop()
        return why
    }
}
