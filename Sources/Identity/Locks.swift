#if canImport(Glibc)
    import Glibc
#endif

/// State behind a pthread reader-writer lock: token lookups on every request read in parallel,
/// and only admissions and applies take it exclusively.
///
/// Why not `Synchronization.Mutex`: on Linux it is a priority-inheritance futex, and with 64
/// connection threads on 2 cores a preempted holder made it the top symbol of the report path's
/// profile (lockSlow, 14 % of the server's CPU at 64 connections).
///
/// `read`, `write` and `withLock` are `@inlinable`: the report path calls them from `Ingest`, and
/// a generic method called across modules otherwise runs unspecialised, its closure not inlined.
package final class ReadWriteLocked<State>: @unchecked Sendable {
    @usableFromInline let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    @usableFromInline var state: State

    package init(_ state: State) {
        self.state = state
        pthread_rwlock_init(lock, nil)
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    @inlinable package func read<Result, Failure: Error>(_ body: (State) throws(Failure) -> Result)
        throws(Failure)
        -> Result
    {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body(state)
    }

    @inlinable package func write<Result, Failure: Error>(_ body: (inout State) throws(Failure) -> Result)
        throws(Failure)
        -> Result
    {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body(&state)
    }
}

/// State behind a plain (adaptive, not priority-inheriting) pthread mutex; see `ReadWriteLocked`.
package final class Locked<State>: @unchecked Sendable {
    @usableFromInline let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    @usableFromInline var state: State

    package init(_ state: State) {
        self.state = state
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable package func withLock<Result, Failure: Error>(_ body: (inout State) throws(Failure) -> Result)
        throws(Failure)
        -> Result
    {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
