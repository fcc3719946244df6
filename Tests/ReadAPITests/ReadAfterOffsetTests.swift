import Foundation
import HTTP
import Identity
import Postgres
import Synchronization
import Testing
import Threads

@testable import ReadAPI

/// A read with `after_offset` waits for the projector's checkpoint bell (no sleep as
/// synchronisation): it goes on when the projection holds the offset, and answers 503
/// `projection_behind` at its deadline when it never does. No database is reached: the wait comes
/// before the query.
@Suite struct ReadAfterOffsetTests {
    /// The projector's checkpoint as the test moves it.
    final class Checkpoint: Sendable {
        let value = Atomic<UInt64>(0)
    }

    func service(_ scratch: ScratchIdentity, waitMillisMax: Int, end: Checkpoint, bells: Doorbells)
        -> (ReadService, PostgresPool)
    {
        var limits = ReadLimits()
        limits.readAfterOffsetWaitMillisMax = waitMillisMax
        let pool = PostgresPool(conninfo: "host=\(scratch.directory)/no-postgres-here port=1")
        let reads = ReadService(
            identity: scratch.identity, pool: pool, limits: limits,
            projectedEnd: { end.value.load(ordering: .acquiring) }, projectionBells: bells)
        return (reads, pool)
    }

    @Test func theWaitEndsWhenTheProjectorRingsPastTheOffset() throws {
        let scratch = try ScratchIdentity()
        defer { scratch.close() }
        _ = try scratch.identity.createUser(name: "olga", role: .member)
        let end = Checkpoint()
        let bells = Doorbells()
        // A deadline no run reaches: only the bell can end this wait in time for the test to pass.
        let (reads, pool) = service(scratch, waitMillisMax: 600_000, end: end, bells: bells)
        defer { pool.close() }
        let projector = spawnThread {
            end.value.store(1, ordering: .releasing)
            bells.ringAll()
        }
        defer { pthread_join(projector, nil) }
        try reads.waitForProjection(HTTPRequest(method: "GET", target: "/api/find-my/devices?after_offset=0"))
        #expect(end.value.load(ordering: .acquiring) == 1)
    }

    @Test func withoutTheOffsetProjectedTheReadIs503AtItsDeadline() throws {
        let scratch = try ScratchIdentity()
        defer { scratch.close() }
        _ = try scratch.identity.createUser(name: "olga", role: .member)
        let (reads, pool) = service(scratch, waitMillisMax: 1, end: Checkpoint(), bells: Doorbells())
        defer { pool.close() }
        #expect {
            try reads.waitForProjection(
                HTTPRequest(method: "GET", target: "/api/find-my/devices?after_offset=0"))
        } throws: { error in
            (error as? APIError)?.status == 503 && (error as? APIError)?.code == .projectionBehind
        }
    }
}
