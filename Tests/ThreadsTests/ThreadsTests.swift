import Synchronization
import Testing
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A value shared between the test and its threads, guarded by `lock`.
private final class Shared: @unchecked Sendable {
    let lock = ConditionLock(conditions: 2)
    var ready = false
    var woken = 0
}

/// Locks, condition variables and threads: a waiter sleeps until another thread changes what it
/// waits for, a timed wait ends at its deadline on the monotonic clock, and a spawned thread runs
/// its body once and can be joined. No test measures a duration.
@Suite struct ThreadsTests {
    @Test func aWaiterWakesWhenAnotherThreadSignalsWhatItWaitsFor() {
        let shared = Shared()
        let thread = spawnThread {
            shared.lock.withLock {
                while !shared.ready { shared.lock.wait() }
                shared.woken += 1
            }
        }
        shared.lock.withLock { shared.ready = true }
        shared.lock.signal()
        pthread_join(thread, nil)
        #expect(shared.lock.withLock { shared.woken } == 1)
    }

    @Test func broadcastWakesEveryWaiterOfItsCondition() {
        let shared = Shared()
        let waiters = (0..<8).map { _ in
            spawnThread {
                shared.lock.withLock {
                    while !shared.ready { shared.lock.wait(1) }
                    shared.woken += 1
                }
            }
        }
        shared.lock.withLock { shared.ready = true }
        shared.lock.broadcast(1)
        for waiter in waiters { pthread_join(waiter, nil) }
        #expect(shared.lock.withLock { shared.woken } == 8)
    }

    @Test func aTimedWaitEndsFalseAtItsDeadlineOnTheMonotonicClock() {
        let lock = ConditionLock()
        // A deadline already past: false at once.
        let past = monotonicMicros() - 1_000_000
        #expect(lock.withLock { lock.wait(0, untilMonotonicMicros: past) } == false)
        // A near deadline nobody signals: false, and the monotonic clock has reached it. (Were the
        // condition on the wall clock, a monotonic deadline would be decades past and the wait
        // would end at once, before it.)
        let deadline = monotonicMicros() + 20_000
        var timedOut = false
        lock.withLock {
            // A spurious wake-up returns true early; wait again until the deadline says false.
            while lock.wait(0, untilMonotonicMicros: deadline) {}
            timedOut = true
        }
        #expect(timedOut)
        #expect(monotonicMicros() >= deadline)
    }

    @Test func aTimedWaitSignalledBeforeItsDeadlineEndsTrue() {
        let shared = Shared()
        let result = Mutex<Bool?>(nil)
        let deadline = monotonicMicros() + 600_000_000
        let waiter = spawnThread {
            let signalled = shared.lock.withLock { () -> Bool in
                shared.woken = 1  // registered as waiting, under the lock
                while !shared.ready {
                    guard shared.lock.wait(0, untilMonotonicMicros: deadline) else { return false }
                }
                return true
            }
            result.withLock { $0 = signalled }
        }
        // Set `ready` only once the waiter holds or has released the lock as a waiter.
        while shared.lock.withLock({ shared.woken }) == 0 { sched_yield() }
        shared.lock.withLock { shared.ready = true }
        shared.lock.signal()
        pthread_join(waiter, nil)
        #expect(result.withLock { $0 } == true)
        #expect(monotonicMicros() < deadline)
    }

    @Test func aWakeUpReachesItsOwnWaiter() {
        let shared = Shared()
        let wakeUp = WakeUp()
        let thread = spawnThread {
            shared.lock.withLock {
                while !shared.ready { shared.lock.wait(wakeUp) }
                shared.woken += 1
            }
        }
        shared.lock.withLock {
            shared.ready = true
            wakeUp.signal()
        }
        pthread_join(thread, nil)
        #expect(shared.woken == 1)
    }

    @Test func aSpawnedThreadRunsItsBodyOnceAndReleasesItWhenJoined() {
        final class Probe: Sendable {}
        let runs = Atomic(0)
        weak var released: Probe?
        var thread: pthread_t
        do {
            let probe = Probe()
            released = probe
            thread = spawnThread {
                _ = probe
                runs.add(1, ordering: .relaxed)
            }
        }
        pthread_join(thread, nil)
        #expect(runs.load(ordering: .relaxed) == 1)
        #expect(released == nil, "the thread let go of its body and what it captured")
        // Many at once, each joined.
        let count = Atomic(0)
        let threads = (0..<32).map { _ in spawnThread { count.add(1, ordering: .relaxed) } }
        for thread in threads { #expect(pthread_join(thread, nil) == 0) }
        #expect(count.load(ordering: .relaxed) == 32)
    }
}
