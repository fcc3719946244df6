/// A wake-up that is remembered: `ring` from any thread wakes the one thread sleeping in `wait`,
/// or, if none sleeps yet, makes its next `wait` return at once. For a thread that waits for any of
/// several things (new durable records in the log, a stop request): each source rings the same
/// bell, and the waiter checks what changed after each wake-up, so no ring between its check and
/// its sleep is lost.
public final class Doorbell: Sendable {
    private let lock = ConditionLock()
    private nonisolated(unsafe) var rung = false

    public init() {}

    public func ring() {
        lock.withLock {
            rung = true
            lock.broadcast()
        }
    }

    /// Sleeps until the bell rings or the monotonic deadline (`monotonicMicros`) passes; returns
    /// whether it rang. A ring is consumed by the wait it ends.
    @discardableResult
    public func wait(untilMonotonicMicros deadline: Int64) -> Bool {
        lock.withLock {
            while !rung {
                if !lock.wait(0, untilMonotonicMicros: deadline) { break }
            }
            defer { rung = false }
            return rung
        }
    }
}

/// The doorbells some source rings when what their waiters watch changes.
public final class Doorbells: Sendable {
    private let bells = Locked<[ObjectIdentifier: Doorbell]>([:])
    /// Called after each `add`: the source hears that someone started waiting (a projector
    /// gathering records for its next transaction folds them at once for a read waiting on them).
    private let onAdd: (@Sendable () -> Void)?

    public init(onAdd: (@Sendable () -> Void)? = nil) { self.onAdd = onAdd }

    /// `announce: false` adds a bell the source is not told of (`onAdd` is not called): a
    /// follower of every change rather than someone waiting for one.
    public func add(_ bell: Doorbell, announce: Bool = true) {
        bells.withLock { $0[ObjectIdentifier(bell)] = bell }
        if announce { onAdd?() }
    }
    public func remove(_ bell: Doorbell) { bells.withLock { $0[ObjectIdentifier(bell)] = nil } }

    /// Rings every bell added. Cheap when there is none.
    public func ringAll() {
        let current = bells.withLock { $0.isEmpty ? [] : Array($0.values) }
        for bell in current { bell.ring() }
    }
}
