import Synchronization
import Testing
import Threads

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct DoorbellTests {
    @Test func aRingBeforeTheWaitIsKeptAndConsumedOnce() {
        let bell = Doorbell()
        bell.ring()
        bell.ring()
        // A deadline already past: the remembered ring still ends the wait, once.
        #expect(bell.wait(untilMonotonicMicros: monotonicMicros() - 1_000_000))
        #expect(!bell.wait(untilMonotonicMicros: monotonicMicros() - 1_000_000))
    }

    @Test func aStopRequestRingsTheDoorbellsAddedToIt() {
        let stop = StopSignal()
        let bell = Doorbell()
        stop.addDoorbell(bell)
        let rang = Mutex<Bool?>(nil)
        // An hour: the wait can only end by the ring.
        let waiter = spawnThread {
            rang.withLock { $0 = bell.wait(untilMonotonicMicros: monotonicMicros() + 3_600_000_000) }
        }
        stop.request()
        pthread_join(waiter, nil)
        #expect(rang.withLock { $0 } == true)
        // Added after the request: rung at once.
        let late = Doorbell()
        stop.addDoorbell(late)
        #expect(late.wait(untilMonotonicMicros: monotonicMicros() - 1))
        // Removed: no longer rung.
        let removed = Doorbell()
        let other = StopSignal()
        other.addDoorbell(removed)
        other.removeDoorbell(removed)
        other.request()
        #expect(!removed.wait(untilMonotonicMicros: monotonicMicros() - 1))
    }

    /// A projector hears of a waiting read (its window ends) but not of a follower of every commit
    /// (the geofence projector), which would otherwise end each window it follows.
    @Test func onlyAnAnnouncedBellTellsTheSource() {
        let heard = Atomic<Int>(0)
        let bells = Doorbells(onAdd: { heard.add(1, ordering: .relaxed) })
        let follower = Doorbell()
        bells.add(follower, announce: false)
        #expect(heard.load(ordering: .relaxed) == 0)
        let reader = Doorbell()
        bells.add(reader)
        #expect(heard.load(ordering: .relaxed) == 1)
        bells.ringAll()
        #expect(follower.wait(untilMonotonicMicros: monotonicMicros() - 1))
        #expect(reader.wait(untilMonotonicMicros: monotonicMicros() - 1))
    }
}
