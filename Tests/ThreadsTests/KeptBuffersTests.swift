import Testing
import Threads

/// The storage of an array, to tell whether `take` handed back the one given.
private func address(_ bytes: [UInt8]) -> UnsafeRawPointer? {
    bytes.withUnsafeBytes { UnsafeRawPointer($0.baseAddress) }
}

/// Takes an array of `capacity` from `pool`, writes into it and gives it back, as an answer does
/// once sent: the pool's reference is then the last. Returns the array's storage.
@discardableResult
private func answer(_ pool: KeptBuffers, capacity: Int) -> UnsafeRawPointer? {
    var bytes = pool.take(capacity: capacity)
    #expect(bytes.isEmpty && bytes.capacity >= capacity)
    bytes.append(contentsOf: repeatElement(7, count: 1000))
    pool.giveBack(bytes)
    return address(bytes)
}

@Suite struct KeptBuffersTests {
    /// A large array given back is the next large one taken, emptied, its storage the same.
    @Test func aLargeArrayGivenBackIsTakenAgain() {
        let pool = KeptBuffers()
        let storage = answer(pool, capacity: 3 << 20)
        #expect(pool.kept.count == 1)
        #expect(answer(pool, capacity: 2 << 20) == storage)
        #expect(pool.kept.count == 1)
    }

    /// Small arrays, arrays beyond `bytesMax` and arrays too small for what is asked are not used.
    @Test func onlyArraysThatFitAreKeptAndTaken() {
        let pool = KeptBuffers(countMax: 2, bytesMax: 8 << 20)
        answer(pool, capacity: 4096)
        answer(pool, capacity: 9 << 20)
        #expect(pool.kept.count == 0)
        let small = answer(pool, capacity: 1 << 20)
        #expect(pool.kept.count == 1)
        let larger = pool.take(capacity: 2 << 20)
        #expect(address(larger) != small && pool.kept.count == 1)
        // Below `capacityMin`, a new array, the kept one left for a large answer.
        _ = pool.take(capacity: 1000)
        #expect(pool.kept.count == 1)
    }

    /// At most `countMax` arrays: a larger one replaces the smallest, a smaller one is dropped.
    @Test func aFullPoolKeepsTheLargest() {
        let pool = KeptBuffers(countMax: 2)
        var arrays = [1 << 20, 2 << 20, 4 << 20, 1 << 20].map { pool.take(capacity: $0) }
        let storages = arrays.map(address)
        for index in arrays.indices {
            pool.giveBack(arrays[index])
            arrays[index] = []
        }
        #expect(pool.kept.count == 2)
        // The smallest fitting first: the 2 MiB one, then the 4 MiB one.
        #expect(answer(pool, capacity: 1 << 20) == storages[1])
        _ = pool.take(capacity: 1 << 20)
        #expect(answer(pool, capacity: 1 << 20) == storages[2])
    }

    /// An array given back outlives one `dropIdle` (it may serve the next answer) and not two.
    @Test func idleArraysAreDroppedAtTheSecondTrim() {
        let pool = KeptBuffers()
        answer(pool, capacity: 1 << 20)
        pool.dropIdle()
        #expect(pool.kept.count == 1)
        pool.dropIdle()
        #expect(pool.kept.count == 0)
        // Taken and given back between trims: kept again for two more.
        answer(pool, capacity: 1 << 20)
        pool.dropIdle()
        answer(pool, capacity: 1 << 20)
        pool.dropIdle()
        #expect(pool.kept.count == 1)
    }
}
