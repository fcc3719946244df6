import Core
import Events
import Foundation
import Identity
import JSON
import PushFakeSupport
import Synchronization
import Testing

@testable import Presence

final class TestClock: Sendable {
    let micros = Atomic<Int64>(1_800_000_000_000_000)
    var nowMicros: Int64 { micros.load(ordering: .relaxed) }
    func advance(seconds: Int64) { micros.add(seconds * 1_000_000, ordering: .relaxed) }
}

/// A log with user alice (1, owns device 1) and bob (2, owns device 2), a key file, and the fake
/// headscale serving a fixture.
final class PresenceScratch {
    let directory: String
    let clock = TestClock()
    var identity: IdentityService
    let fake: FakeProvider
    let keyFile: String

    init(fixture: String = "v0.23") throws {
        directory = NSTemporaryDirectory() + "findmy-presence-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        keyFile = directory + "/headscale.key"
        _ = FileManager.default.createFile(
            atPath: keyFile, contents: Data("test-api-key\n".utf8), attributes: [.posixPermissions: 0o600])
        fake = try FakeProvider(
            "serve", ["--key", "test-api-key", "--fixture", fixture], script: "fake_headscale.py")
        identity = try Self.openIdentity(directory, clock)
        _ = try identity.createUser(name: "alice", role: .member)
        _ = try identity.createUser(name: "bob", role: .member)
        for (device, user) in [(UInt64(1), UInt64(1)), (2, 2)] {
            _ = try identity.appendAndApply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: user, deviceUUID: UUID128.random(), name: "laptop",
                        platform: "linux", model: "")),
                receivedAtMicros: clock.nowMicros)
        }
    }

    static func openIdentity(_ directory: String, _ clock: TestClock) throws -> IdentityService {
        var options = LogOptions()
        options.diagnostics = { _ in }
        return try IdentityService(
            log: try LogWriter(directory: directory + "/log", options: options),
            clockMicros: { clock.nowMicros })
    }

    func service() -> PresenceService {
        var configuration = HeadscaleConfiguration(url: fake.plainURL, apiKeyFile: keyFile)
        configuration.pollSeconds = 30
        let clock = self.clock
        return PresenceService(configuration, identity: identity, clockMicros: { clock.nowMicros })
    }

    /// Closes the log and opens it again: a restart, as far as the registry goes.
    func restart() throws {
        identity.store.writer.close()
        identity = try Self.openIdentity(directory, clock)
    }

    func presenceEvents() throws -> [Event] {
        var events: [Event] = []
        try LogReader(directory: directory + "/log", writer: identity.store.writer).read(from: 0) { record in
            let event = try record.event()
            if case .presenceChanged = event { events.append(event) }
            if case .devicePresenceLinked = event { events.append(event) }
            return true
        }
        return events
    }

    func close() {
        fake.stop()
        identity.store.writer.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

@Suite(.serialized) struct PollerTests {
    @Test func linkPollAndOnlyChangesBecomeEvents() throws {
        let scratch = try PresenceScratch()
        defer { scratch.close() }
        let presence = scratch.service()
        try presence.prepare()
        defer { presence.stop(graceMicros: 0) }
        presence.round()

        #expect(try presence.linkableNodes(userID: 1).map(\.name) == ["alice-laptop", "desk"])
        #expect(try presence.linkableNodes(userID: 2).map(\.name) == ["bob-laptop"])
        // bob's node is not alice's to link; by name, by host name, or by id.
        for node in ["bob-laptop", "3"] {
            #expect(throws: APIError.self) { try presence.link(deviceID: 1, userID: 1, node: node) }
        }
        // Nobody links someone else's device: the same 404 as for a device that does not exist.
        #expect(throws: APIError.deviceNotFound) {
            try presence.link(deviceID: 2, userID: 1, node: "alice-laptop")
        }

        try presence.link(deviceID: 1, userID: 1, node: "alice-laptop")
        // Linking records the state the last poll saw, at once.
        #expect(scratch.identity.registrySnapshot.presence(of: 1, nowMicros: 5)?.online == true)
        for _ in 0..<5 { presence.round() }
        #expect(try scratch.presenceEvents().count == 2)  // the link, and online

        try scratch.fake.command("set 1 offline 2024-10-02T08:00:00Z")
        scratch.clock.advance(seconds: 30)
        for _ in 0..<4 { presence.round() }
        let events = try scratch.presenceEvents()
        #expect(events.count == 3)
        guard case .presenceChanged(let offline)? = events.last else {
            Issue.record("no presence change last")
            return
        }
        #expect(offline.online == false)
        #expect(offline.lastSeenMicros == (try RFC3339.parseMicros("2024-10-02T08:00:00Z")))
        let view = scratch.identity.registrySnapshot.presence(of: 1, nowMicros: scratch.clock.nowMicros)
        #expect(
            view == PresenceView(online: false, atMicros: offline.lastSeenMicros, nodeName: "alice-laptop"))

        // Unlinking ends it; polls record nothing more for the device.
        try presence.link(deviceID: 1, userID: 1, node: nil)
        try scratch.fake.command("set 1 online")
        presence.round()
        #expect(try scratch.presenceEvents().count == 4)
        #expect(scratch.identity.registrySnapshot.presence(of: 1, nowMicros: 5) == nil)
    }

    @Test func aFlappingNodeRecordsEachTransitionAndARestartNothingAgain() throws {
        let scratch = try PresenceScratch()
        defer { scratch.close() }
        var presence = scratch.service()
        try presence.prepare()
        presence.round()
        try presence.link(deviceID: 1, userID: 1, node: "desk")  // offline in v0.23
        try scratch.fake.command("flap 2")
        for _ in 0..<6 {
            scratch.clock.advance(seconds: 30)
            presence.round()
        }
        presence.stop(graceMicros: 0)
        let changes = try scratch.presenceEvents().compactMap { event -> Bool? in
            if case .presenceChanged(let changed) = event { return changed.online }
            return nil
        }
        // Offline at the link, then each of the six polls alternates.
        #expect(changes.count == 7)
        #expect(zip(changes, changes.dropFirst()).allSatisfy { $0 != $1 })

        // A restart on the same log, headscale steady: the first polls record nothing new.
        try scratch.fake.command("set 2 online")
        let before = try scratch.presenceEvents().count
        let lastOnline = changes.last!
        try scratch.restart()
        presence = scratch.service()
        try presence.prepare()
        defer { presence.stop(graceMicros: 0) }
        for _ in 0..<3 { presence.round() }
        let after = try scratch.presenceEvents().count
        // The one change to "online" (the flapping ended offline), never one per poll.
        #expect(lastOnline == false)
        #expect(after - before == 1)
    }

    @Test func refusedKeysAndAnUnreachableServerRecordNothingAndBackOff() throws {
        let scratch = try PresenceScratch()
        defer { scratch.close() }
        let presence = scratch.service()
        try presence.prepare()
        defer { presence.stop(graceMicros: 0) }
        presence.round()
        try presence.link(deviceID: 1, userID: 1, node: "alice-laptop")
        let before = try scratch.presenceEvents().count
        var delays: [Int] = []
        for mode in ["401", "500", "500-plain"] {
            try scratch.fake.command("auth " + mode)
            delays.append(presence.round())
            let health = presence.health()
            #expect(health.degraded)
            #expect(health.members.first { $0.0 == "state" }?.1 == .string("unauthorized"))
        }
        #expect(delays == [60, 120, 240])
        #expect(presence.metricsText().contains("findmy_presence_polls_total{result=\"unauthorized\"} 3"))
        #expect(presence.metricsText().contains("findmy_presence_up 0"))
        // A wrong key in the file is refused the same way; the right one, written back, works
        // without a restart.
        try scratch.fake.command("auth ok")
        try Data("wrong-key".utf8).write(to: URL(fileURLWithPath: scratch.keyFile))
        #expect(presence.round() == 480)
        try Data("test-api-key".utf8).write(to: URL(fileURLWithPath: scratch.keyFile))
        #expect(presence.round() == 30)
        #expect(presence.health().degraded == false)
        #expect(try scratch.presenceEvents().count == before)
        // A key file others can read is refused at every poll too, and says so.
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: scratch.keyFile)
        presence.round()
        #expect(presence.health().members.first { $0.0 == "state" }?.1 == .string("key_file"))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: scratch.keyFile)
        try scratch.fake.command("down")
        presence.round()
        #expect(presence.health().members.first { $0.0 == "state" }?.1 == .string("unreachable"))
        #expect(try scratch.presenceEvents().count == before)
    }

    @Test func aKeyFileOthersCanReadStopsTheStart() throws {
        let scratch = try PresenceScratch()
        defer { scratch.close() }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: scratch.keyFile)
        let presence = scratch.service()
        #expect(throws: PresenceSetupError.self) { try presence.start() }
    }
}

/// The same poller against each version's answer (Fixtures/headscale): node 1 is alice's laptop in
/// every one; whatever its first state, each change is one event and steady polls add none.
@Suite(.serialized) struct PollerVersionTests {
    @Test(arguments: ["v0.23", "v0.25", "v0.27", "v0.28", "v0.29"])
    func eachVersionRecordsOnlyChanges(fixture: String) throws {
        let scratch = try PresenceScratch(fixture: fixture)
        defer { scratch.close() }
        let presence = scratch.service()
        try presence.prepare()
        defer { presence.stop(graceMicros: 0) }
        presence.round()
        #expect(try presence.linkableNodes(userID: 1).map(\.id).contains("1"), "\(fixture)")
        try presence.link(deviceID: 1, userID: 1, node: "1")
        let first = scratch.identity.registrySnapshot.presence.states[1]
        #expect(first != nil, "\(fixture): the link records the state the last poll saw")
        try scratch.fake.command("set 1 online")
        for _ in 0..<3 { presence.round() }
        try scratch.fake.command("set 1 offline 2027-01-01T00:00:00.5Z")
        for _ in 0..<3 { presence.round() }
        let changes = try scratch.presenceEvents().compactMap { event -> PresenceChanged? in
            if case .presenceChanged(let changed) = event { return changed }
            return nil
        }
        // The first state, then online (unless it was online already), then offline.
        #expect(
            changes.map(\.online) == (first!.online ? [true, false] : [false, true, false]), "\(fixture)")
        #expect(changes.last?.lastSeenMicros == (try RFC3339.parseMicros("2027-01-01T00:00:00.5Z")))
    }
}
