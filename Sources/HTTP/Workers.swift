#if canImport(Glibc)
    import Glibc
#endif

/// A pthread mutex and one condition variable. `Synchronization.Mutex` cannot wait; it is also a
/// priority-inheritance futex on Linux, which was slow under contention in an earlier profile.
final class LockAndCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    /// The lock must be held.
    func wait() { pthread_cond_wait(condition, mutex) }
    func signal() { pthread_cond_signal(condition) }
    func broadcast() { pthread_cond_broadcast(condition) }

    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// One answer handed from one thread to another that waits for it (`Router.respond(to:)` on a
/// deferred route).
final class AnswerSlot: @unchecked Sendable {
    private let lock = LockAndCondition()
    private var response: HTTPResponse?  // guarded by `lock`

    func put(_ answer: HTTPResponse) {
        lock.withLock {
            guard response == nil else { return }
            response = answer
            lock.signal()
        }
    }

    func take() -> HTTPResponse {
        lock.lock()
        defer { lock.unlock() }
        while response == nil { lock.wait() }
        return response!
    }
}

/// The threads that run blocking handlers, so that the event-loop threads never wait on
/// PostgreSQL or a durable append. Threads start on demand up to `threadsMax` and stay until
/// `stop`; jobs beyond that wait in order (at most one per connection, so at most
/// `connectionsMax`).
final class WorkerPool: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    private let threadsMax: Int
    private let lock = LockAndCondition()
    // Guarded by `lock`.
    private var jobs: [Job] = []
    private var jobsHead = 0
    private var threads = 0
    /// Workers waiting for a job and not yet claimed by `submit`.
    private var idle = 0
    private var stopping = false

    init(threadsMax: Int) {
        precondition(threadsMax > 0)
        self.threadsMax = threadsMax
    }

    func submit(_ job: @escaping Job) {
        lock.lock()
        jobs.append(job)
        // An idle worker is claimed here, not when it wakes: two quick submits must not both
        // count on the same sleeper while a new thread could have taken the second job.
        var start = false
        if stopping {
            threads += 1
            start = true
        } else if idle > 0 {
            idle -= 1
            lock.signal()
        } else if threads < threadsMax {
            threads += 1
            start = true
        }
        lock.unlock()
        if start { startThread() }
    }

    /// Lets every worker exit once the jobs already queued are done. Jobs submitted later still
    /// run, each on a thread of its own that then exits.
    func stop() {
        lock.withLock {
            stopping = true
            lock.broadcast()
        }
    }

    private func startThread() {
        var thread = pthread_t()
        // Each worker holds the pool; the pool lives as long as any worker.
        let context = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(
            &thread, nil,
            { context in
                Unmanaged<WorkerPool>.fromOpaque(context!).takeRetainedValue().work()
                return nil
            }, context)
        precondition(result == 0, "pthread_create failed: \(result)")
        pthread_detach(thread)
    }

    private func work() {
        while true {
            lock.lock()
            while jobsHead == jobs.count {
                if stopping {
                    threads -= 1
                    lock.unlock()
                    return
                }
                idle += 1
                lock.wait()
            }
            let job = jobs[jobsHead]
            jobsHead += 1
            if jobsHead == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                jobsHead = 0
            }
            lock.unlock()
            job()
        }
    }
}
