import Events
import Foundation
import Identity
import Synchronization
import Testing

@testable import ReadAPI

/// The read API's own check of who may read what (`ReadAccess`, the second one after the
/// permission gate) follows a share's `until` on the identity service's clock: here a clock the test
/// moves, so that expiry is checked at its boundary and not by waiting.
@Suite struct ReadAccessClockTests {
    final class Clock: Sendable {
        let micros = Atomic<Int64>(1_800_000_000_000_000)
        var now: Int64 { micros.load(ordering: .relaxed) }
        func advance(micros delta: Int64) { micros.add(delta, ordering: .relaxed) }
    }

    @Test func aSharedDeviceLeavesTheReadersScopeAtItsUntil() throws {
        let directory = NSTemporaryDirectory() + "findmy-readaccess-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let clock = Clock()
        let identity = try IdentityService(
            log: try LogWriter(directory: directory + "/log", options: options), clockMicros: { clock.now })
        defer { identity.log.close() }
        let olga = try identity.createUser(name: "olga", role: .member)
        let mia = try identity.createUser(name: "mia", role: .member)
        _ = try identity.appendAndApply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 7, userID: olga.userID, deviceUUID: UUID128.random(), name: "phone",
                    platform: "ios",
                    model: "")), receivedAtMicros: clock.now)
        _ = try identity.shareDevice(
            7, owner: olga.userID, withUser: "mia", untilMicros: clock.now + 60_000_000)
        let access = ReadAccess(identity: identity)

        clock.advance(micros: 59_999_999)
        #expect(access.scope(of: mia.userID).deviceIDs == [7])
        #expect(access.scope(of: mia.userID).sharedBy == [7: "olga"])
        let visible = try access.device("7", visibleTo: mia.userID)
        #expect(visible.id == 7 && visible.sharedBy == "olga")

        clock.advance(micros: 1)
        #expect(access.scope(of: mia.userID).deviceIDs.isEmpty)
        #expect(throws: ReadAccess.notFound) { try access.device("7", visibleTo: mia.userID) }
        // The owner is not affected.
        #expect(access.scope(of: olga.userID).deviceIDs == [7])
    }
}
