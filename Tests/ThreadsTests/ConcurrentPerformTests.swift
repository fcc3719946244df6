import Synchronization
import Testing
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `concurrentPerform` runs every iteration once, all at the same time (each waits until all have
/// started, which only works if they run together), and returns after the last.
@Test func concurrentPerformRunsEveryIterationOnceAndAllAtOnce() {
    let iterations = 4
    let lock = ConditionLock()
    var started = 0
    var seen = [Int](repeating: 0, count: iterations)
    var allMet = true
    withUnsafeMutablePointer(to: &started) { started in
        withUnsafeMutablePointer(to: &allMet) { allMet in
            seen.withUnsafeMutableBufferPointer { seen in
                concurrentPerform(iterations: iterations) { index in
                    lock.withLock {
                        seen[index] += 1
                        started.pointee += 1
                        lock.broadcast()
                        // A generous deadline, so a failure ends the test instead of hanging it.
                        var now = timespec()
                        clock_gettime(CLOCK_MONOTONIC, &now)
                        let deadline = Int64(now.tv_sec + 60) * 1_000_000
                        while started.pointee < iterations {
                            if !lock.wait(0, untilMonotonicMicros: deadline) {
                                allMet.pointee = false
                                break
                            }
                        }
                    }
                }
            }
        }
    }
    #expect(seen == [1, 1, 1, 1])
    #expect(allMet, "every iteration saw the others start")
    var ran = 0
    concurrentPerform(iterations: 1) { ran += $0 + 1 }
    #expect(ran == 1)
}
