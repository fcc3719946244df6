import FindMyClient
import Foundation
import TestSupport
import Testing
import Threads

@testable import findmy_agent

@Suite struct FixedFixSourceTests {
    @Test func aFixAtOnceThenOneEveryInterval() throws {
        let source = FixedFixSource(
            latitude: 52.52, longitude: 13.405, accuracyMeters: 25, intervalSeconds: 0.05)
        let fixes = Locked<[ClientFix]>([])
        let started = ClientClock.nowMicros()
        try source.start { fix in fixes.withLock { $0.append(fix) } }
        try waitUntil("three fixes") { fixes.withLock { $0.count >= 3 } }
        source.stop()
        let received = fixes.withLock { $0 }
        for fix in received {
            #expect(fix.latitude == 52.52 && fix.longitude == 13.405 && fix.accuracyMeters == 25)
            #expect(fix.source == "fixed")
            #expect(fix.recordedAtMicros >= started)
        }
        #expect(zip(received, received.dropFirst()).allSatisfy { $0.recordedAtMicros <= $1.recordedAtMicros })
        // stop returns once the source's thread has ended: nothing comes after it.
        #expect(fixes.withLock { $0.count } == received.count)
    }

    @Test func aFreshFixIsTakenNow() async throws {
        let source = FixedFixSource(
            latitude: -33.86, longitude: 151.21, accuracyMeters: 100, intervalSeconds: 3600)
        let before = ClientClock.nowMicros()
        let fix = try #require(await source.freshFix(timeoutSeconds: 1))
        #expect(fix.latitude == -33.86 && fix.longitude == 151.21 && fix.accuracyMeters == 100)
        #expect(fix.recordedAtMicros >= before)
    }
}
