import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// One answer handed from one thread to another that waits for it (`Router.respond(to:)` on a
/// deferred route), or a job that produces it, which the waiting thread runs
/// (`HTTPReply.answerBlocking`).
final class AnswerSlot: @unchecked Sendable {
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var response: HTTPResponse?
    private var job: HTTPReply.Job?

    func put(_ answer: HTTPResponse) {
        lock.withLock {
            guard response == nil else { return }
            response = answer
            lock.signal()
        }
    }

    func put(job newJob: @escaping HTTPReply.Job) {
        lock.withLock {
            guard response == nil, job == nil else { return }
            job = newJob
            lock.signal()
        }
    }

    func take() -> HTTPResponse {
        lock.lock()
        while response == nil {
            if let pending = job {
                job = nil
                // The job answers through `put`, which takes the lock.
                lock.unlock()
                pending()
                lock.lock()
                continue
            }
            lock.wait()
        }
        defer { lock.unlock() }
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
    private let lock = ConditionLock()
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
        // Each worker holds the pool; the pool lives as long as any worker.
        pthread_detach(spawnThread { self.work() })
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
