import Synchronization
import Testing
import Threads

/// A loop as a service: it runs on its own thread until the group stops it, and a loop that ends
/// by itself tells its owner (which `findmy project` turns into the end of the process).
@Suite struct ThreadServiceTests {
    @Test func runsUntilTheGroupStopsItAndDoesNotCallOnEnd() throws {
        let endings = Atomic<Int>(0)
        let rounds = Atomic<Int>(0)
        let service = ThreadService(
            name: "loop", onEnd: { endings.add(1, ordering: .relaxed) },
            run: { stop in
                while !stop.wait(micros: 1_000) { rounds.add(1, ordering: .relaxed) }
            })
        #expect(service.state == .idle)
        let group = ServiceGroup([service], graceMicros: 0)
        try group.start()
        #expect(service.state == .running)
        group.requestStop("test")
        #expect(group.waitForStop() == .requested("test"))
        group.stop()
        #expect(service.state == .stopped)
        #expect(endings.load(ordering: .relaxed) == 0)
    }

    @Test func aLoopThatEndsByItselfCallsOnEndOnceAndReadsAsStopped() throws {
        let group = ServiceGroup(graceMicros: 0)
        let service = ThreadService(
            name: "gives-up", onEnd: { group.requestStop("loop ended") }, run: { _ in })
        try group.start(service)
        // onEnd wakes the group: the body returned without anyone asking it to stop.
        #expect(group.waitForStop() == .requested("loop ended"))
        #expect(service.state == .stopped)
        group.stop()
        #expect(service.state == .stopped)
    }
}
