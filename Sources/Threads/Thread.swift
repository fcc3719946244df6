#if canImport(Glibc)
    import Glibc
#endif

/// Starts a joinable POSIX thread running `body`, which it holds until it returns (join the thread,
/// or `pthread_detach` it).
public func spawnThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var thread = pthread_t()
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    let result = pthread_create(
        &thread, nil,
        { context in
            let box = Unmanaged<AnyObject>.fromOpaque(context!).takeRetainedValue() as! Box
            box.body()
            return nil
        }, context)
    precondition(result == 0, "pthread_create failed: \(result)")
    return thread
}

/// Runs `body` on a thread of its own and returns once it has: for work that changes its thread
/// (lowers its priority, say) and must leave the caller's as it was.
public func runOnThreadOfItsOwn(_ body: @escaping @Sendable () -> Void) {
    pthread_join(spawnThread(body), nil)
}

/// Lowers the calling thread's CPU priority by `niceness` steps (at most to 19): for background
/// work, such as a compaction or a registry refold, that must not take the CPU from requests on a
/// small machine. On Linux the nice value is a thread's, and `setpriority(PRIO_PROCESS, 0, _)`
/// names the calling thread only (setpriority(2), NOTES). Without privilege a thread cannot raise
/// its priority again, so call it on a thread of its own. A failure leaves the priority as it was.
public func lowerCurrentThreadPriority(by niceness: Int32) {
    precondition(niceness >= 0)
    let which = __priority_which_t(PRIO_PROCESS.rawValue)
    errno = 0
    let current = getpriority(which, 0)
    guard errno == 0 else { return }
    _ = setpriority(which, 0, min(19, current + niceness))
}

/// Runs `body(0)` to `body(iterations - 1)` at the same time, `body(0)` on the calling thread and
/// each other on a thread of its own, and returns when every one has returned. For a few large
/// pieces of CPU work (each worth far more than starting a thread); the threads are ours, not a
/// hidden pool's, so every thread of findmy starts here.
public func concurrentPerform(iterations: Int, _ body: (Int) -> Void) {
    precondition(iterations >= 1, "concurrentPerform needs at least one iteration")
    // The body does not escape: every thread is joined before this returns.
    withoutActuallyEscaping(body) { body in
        final class Shared: @unchecked Sendable {
            let body: (Int) -> Void
            init(_ body: @escaping (Int) -> Void) { self.body = body }
        }
        let shared = Shared(body)
        let threads = (1..<iterations).map { index in spawnThread { shared.body(index) } }
        shared.body(0)
        for thread in threads { pthread_join(thread, nil) }
    }
}
