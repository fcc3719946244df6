#if canImport(Glibc)
    import Glibc
#endif

/// A pthread mutex with condition variables: for threads that sleep until another changes what
/// they wait for (the log writer's appenders and committers, the HTTP worker pool, PostgreSQL's
/// connection pool), which `Synchronization.Mutex` alone cannot express. Timed waits use the
/// monotonic clock.
public final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let conditions: UnsafeMutablePointer<pthread_cond_t>
    private let conditionCount: Int

    public init(conditions count: Int = 1) {
        conditionCount = count
        conditions = .allocate(capacity: count)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        for index in 0..<count { pthread_cond_init(conditions + index, &attributes) }
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        for index in 0..<conditionCount { pthread_cond_destroy(conditions + index) }
        pthread_mutex_destroy(mutex)
        conditions.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }

    public func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body()
    }

    /// Waits on condition `index`; the lock must be held.
    public func wait(_ index: Int = 0) { pthread_cond_wait(conditions + index, mutex) }

    /// Waits on condition `index` until the monotonic deadline; returns false on timeout.
    public func wait(_ index: Int, untilMonotonicMicros deadline: Int64) -> Bool {
        var time = timespec(tv_sec: Int(deadline / 1_000_000), tv_nsec: Int(deadline % 1_000_000) * 1_000)
        return pthread_cond_timedwait(conditions + index, mutex, &time) == 0
    }

    public func broadcast(_ index: Int = 0) { pthread_cond_broadcast(conditions + index) }
    public func signal(_ index: Int = 0) { pthread_cond_signal(conditions + index) }

    /// Waits on `wakeUp`, whose waiters all use this lock; the lock must be held.
    public func wait(_ wakeUp: WakeUp) { pthread_cond_wait(wakeUp.condition, mutex) }
}

/// A condition variable of its own for one waiter (an appender's ticket, or the writer's
/// committer threads), so that whoever sets that waiter's outcome wakes it alone instead of every
/// thread waiting on the lock.
public final class WakeUp: @unchecked Sendable {
    fileprivate let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() { pthread_cond_init(condition, nil) }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
    }

    /// Call with the lock held, after changing what the waiter checks.
    public func signal() { pthread_cond_signal(condition) }
    public func broadcast() { pthread_cond_broadcast(condition) }
}
