/// `int malloc_trim(size_t pad)` from glibc's <malloc.h>, which is not part of Swift's Glibc module.
@_silgen_name("malloc_trim")
private func glibcMallocTrim(_ pad: Int) -> Int32

/// Gives the pages of malloc's free blocks back to the kernel, every `intervalMicros`, on a thread
/// of its own. `free` returns memory only from the top of the heap; a burst of requests leaves
/// holes below blocks still in use (connection pools, the registry), which stay resident until a
/// later burst reuses them: during single-fix ingest about 3 MB of `findmy serve`'s 35 MB
/// (docs/benchmarks.md, "Serve memory while ingesting"). `malloc_trim(0)` releases every whole
/// free page (madvise), holding the arena's lock for a walk of its free lists, well under a
/// millisecond at that size; pages reused after it fault back in one by one.
public final class HeapTrimmer: Service {
    public let name = "heap-trim"
    private let service: ThreadService

    public init(intervalMicros: Int64) {
        service = ThreadService(name: name) { stop in
            while !stop.wait(micros: intervalMicros) { HeapTrimmer.trim() }
        }
    }

    /// One trim, now: the answer arrays kept and idle since the previous trim freed first
    /// (`KeptBuffers.dropIdle`), then malloc's free pages given back.
    public static func trim() {
        KeptBuffers.shared.dropIdle()
        _ = glibcMallocTrim(0)
    }

    public var state: ServiceState { service.state }
    public func start() throws { try service.start() }
    public func stop(graceMicros: Int64) { service.stop(graceMicros: graceMicros) }
}
