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
