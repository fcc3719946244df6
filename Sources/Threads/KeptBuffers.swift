/// Large byte arrays kept between answers: the array of a large answer, once sent, is kept for the
/// next one instead of being freed, and given back to the system when no answer has taken it for a
/// while (`dropIdle`, from the heap-trim thread).
///
/// Why: malloc maps blocks of 1 MiB and more on their own (findmy's `M_MMAP_THRESHOLD`, set for the
/// projector's catch-up memory) and unmaps them when freed. A 30-day history page reserves 7.7 MB
/// and writes 2.5 MB into it: a fresh mapping each time, 609 page faults (each page zeroed by the
/// kernel) and an unmap that interrupts every other thread's core, about 2.4 ms of system time a
/// page against 4.5 ms of the server's own work (docs/benchmarks.md, "The packed history column",
/// kept answer buffers).
/// A kept array's written pages stay resident, so the pool is small: `countMax` arrays of at most
/// `bytesMax` each, resident only while answers keep coming.
public final class KeptBuffers: Sendable {
    /// Arrays of this capacity and more are kept; smaller ones come from malloc's heap anyway.
    public static let capacityMin = 1 << 20

    /// The pool every answer of the process shares (`HTTP`'s held bodies give their arrays back to it).
    public static let shared = KeptBuffers()

    public let countMax: Int
    public let bytesMax: Int

    private struct Kept {
        var bytes: [UInt8]
        /// `trims` when it was given back.
        var trim: Int
    }

    private struct State {
        var kept: [Kept] = []
        /// How many times `dropIdle` has run.
        var trims = 0
    }

    private let state = Locked(State())

    public init(countMax: Int = 2, bytesMax: Int = 32 << 20) {
        precondition(countMax >= 0 && bytesMax >= Self.capacityMin)
        self.countMax = countMax
        self.bytesMax = bytesMax
    }

    /// An empty array with room for at least `capacity` bytes: the smallest kept one that has it,
    /// or a new one. Below `capacityMin`, always a new one.
    public func take(capacity: Int) -> [UInt8] {
        if capacity >= Self.capacityMin {
            var found: [UInt8]? = state.withLock { state in
                let fitting = state.kept.indices.filter { state.kept[$0].bytes.capacity >= capacity }
                guard
                    let best = fitting.min(by: {
                        state.kept[$0].bytes.capacity < state.kept[$1].bytes.capacity
                    })
                else { return nil }
                return state.kept.remove(at: best).bytes
            }
            if found != nil {
                // In place: the pool held the only reference, so the storage stays (a second
                // reference would make `removeAll` allocate a new one).
                found!.removeAll(keepingCapacity: true)
                return found.take()!
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(capacity)
        return bytes
    }

    /// Keeps `bytes` for a later `take` when its capacity is within `capacityMin ... bytesMax`: in
    /// place of the smallest kept array when the pool is full and that one is smaller. The caller
    /// gives up its reference (the array's storage is reused only when the pool's is the last).
    public func giveBack(_ bytes: [UInt8]) {
        let capacity = bytes.capacity
        guard capacity >= Self.capacityMin && capacity <= bytesMax && countMax > 0 else { return }
        // Dropped outside the lock: freeing megabytes (an unmap) is not for under it.
        var dropped: [UInt8]? = nil
        state.withLock { state in
            let entry = Kept(bytes: bytes, trim: state.trims)
            if state.kept.count < countMax {
                state.kept.append(entry)
            } else if let smallest = state.kept.indices.min(by: {
                state.kept[$0].bytes.capacity < state.kept[$1].bytes.capacity
            }), state.kept[smallest].bytes.capacity < capacity {
                dropped = state.kept[smallest].bytes
                state.kept[smallest] = entry
            } else {
                dropped = entry.bytes
            }
        }
        _ = dropped
    }

    /// Frees the arrays given back before the previous call and not taken since: called once an
    /// interval (the heap-trim thread's), an array outlives its last answer by one to two intervals.
    public func dropIdle() {
        let dropped: [Kept] = state.withLock { state in
            let idle = state.kept.filter { $0.trim < state.trims }
            state.kept.removeAll { $0.trim < state.trims }
            state.trims += 1
            return idle
        }
        _ = dropped
    }

    /// The arrays kept now and their capacities' sum, for tests and the memory report.
    public var kept: (count: Int, bytes: Int) {
        state.withLock { state in (state.kept.count, state.kept.reduce(0) { $0 + $1.bytes.capacity }) }
    }
}
