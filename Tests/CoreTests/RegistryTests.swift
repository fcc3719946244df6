import Core
import Events
import Foundation
import Testing

/// The registry is a fold of events: the same events give the same registry, whether applied as
/// the server appends them or replayed at start.
@Suite struct RegistryTests {
    let aliceHash = [UInt8](repeating: 1, count: 32)
    let phoneUUID = UUID128("1b4e28ba-2fa1-11d2-883f-0016d3cca427")!

    func enrolled() -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: 3)
        registry.apply(
            .userCreated(UserCreated(userID: 1, name: "alice", role: .member, tokenHash: aliceHash)),
            offset: 0)
        registry.apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: phoneUUID, name: "phone", platform: "ios", model: "")),
            offset: 1)
        registry.apply(
            .deviceTokenIssued(DeviceTokenIssued(deviceID: 1, tokenHash: [UInt8](repeating: 2, count: 32))),
            offset: 2)
        return registry
    }

    @Test func tokensIdentifyUsersAndDevices() {
        let registry = enrolled()
        #expect(registry.principal(tokenHash: aliceHash) == .user(1))
        #expect(registry.principal(tokenHash: [UInt8](repeating: 2, count: 32)) == .device(1))
        #expect(registry.device(userID: 1, uuid: phoneUUID)?.id == 1)
        #expect(registry.device(userID: 2, uuid: phoneUUID) == nil)
        #expect(registry.nextDeviceID == 2 && registry.nextUserID == 2 && registry.nextOffset == 3)
    }

    @Test func issuingADeviceTokenRevokesTheEarlierOne() {
        var registry = enrolled()
        registry.apply(
            .deviceTokenIssued(DeviceTokenIssued(deviceID: 1, tokenHash: [UInt8](repeating: 3, count: 32))),
            offset: 3)
        #expect(registry.principal(tokenHash: [UInt8](repeating: 2, count: 32)) == nil)
        #expect(registry.principal(tokenHash: [UInt8](repeating: 3, count: 32)) == .device(1))
    }

    /// A rotation ends every earlier token of the user (the first one, and any issued beside it)
    /// and only the user's: the device's token and other users' tokens keep working.
    @Test func rotatingAUserTokenEndsEveryEarlierOne() {
        var registry = enrolled()
        let bobHash = [UInt8](repeating: 9, count: 32)
        registry.apply(
            .userCreated(UserCreated(userID: 2, name: "bob", role: .member, tokenHash: bobHash)), offset: 3)
        let issued = [UInt8](repeating: 4, count: 32)
        registry.apply(.userTokenIssued(UserTokenIssued(userID: 1, tokenHash: issued)), offset: 4)
        #expect(registry.principal(tokenHash: issued) == .user(1))
        let rotated = [UInt8](repeating: 5, count: 32)
        registry.apply(.userTokenRotated(UserTokenRotated(userID: 1, tokenHash: rotated)), offset: 5)
        #expect(registry.principal(tokenHash: aliceHash) == nil)
        #expect(registry.principal(tokenHash: issued) == nil)
        #expect(registry.principal(tokenHash: rotated) == .user(1))
        #expect(registry.principal(tokenHash: bobHash) == .user(2))
        #expect(registry.principal(tokenHash: [UInt8](repeating: 2, count: 32)) == .device(1))
        let again = [UInt8](repeating: 6, count: 32)
        registry.apply(.userTokenRotated(UserTokenRotated(userID: 1, tokenHash: again)), offset: 6)
        #expect(registry.principal(tokenHash: rotated) == nil)
        #expect(registry.principal(tokenHash: again) == .user(1))
        // A rotation for a user the log does not know gives nobody a token.
        let stray = [UInt8](repeating: 7, count: 32)
        registry.apply(.userTokenRotated(UserTokenRotated(userID: 42, tokenHash: stray)), offset: 7)
        #expect(registry.principal(tokenHash: stray) == nil)
        #expect(registry.nextOffset == 8)
    }

    /// A restarted server replays the log: it must know the rotated token, not the first one.
    @Test func replayingTheLogGivesTheRotatedToken() throws {
        let directory = NSTemporaryDirectory() + "/findmy-registry-\(UInt64.random(in: 0...UInt64.max))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory, options: options)
        let rotated = [UInt8](repeating: 5, count: 32)
        let events: [Event] = [
            .userCreated(UserCreated(userID: 1, name: "alice", role: .member, tokenHash: aliceHash)),
            .userTokenRotated(UserTokenRotated(userID: 1, tokenHash: [UInt8](repeating: 4, count: 32))),
            .userTokenRotated(UserTokenRotated(userID: 1, tokenHash: rotated)),
        ]
        var folded = Registry(recentBatchesPerDeviceMax: 3)
        for event in events {
            folded.apply(event, offset: try writer.append(event, receivedAtMicros: 1))
        }
        writer.close()
        let replayed = try Registry.replay(
            LogReader(directory: directory), recentBatchesPerDeviceMax: 3)
        for registry in [folded, replayed] {
            #expect(registry.principal(tokenHash: aliceHash) == nil)
            #expect(registry.principal(tokenHash: [UInt8](repeating: 4, count: 32)) == nil)
            #expect(registry.principal(tokenHash: rotated) == .user(1))
            #expect(registry.nextOffset == 3)
        }
    }

    /// Replay folds a fix batch from its header and rejections, without decoding its fixes: a
    /// retried batch id gets the same answer (accepted count, rejections, offset) as it did live.
    @Test func replayingFixBatchesGivesTheirResultsAsApplied() throws {
        let directory = NSTemporaryDirectory() + "/findmy-registry-\(UInt64.random(in: 0...UInt64.max))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory, options: options)
        let fix = Fix(
            latitude: 52.5, longitude: 13.4, accuracyMeters: 8, source: "significant", recordedAtMicros: 9)
        let batches = [
            FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: [fix]),
            FixBatch(
                deviceID: 1, batchID: UUID128.random(), fixes: [fix, fix],
                rejections: [Rejection(index: 2, reason: "latitude out of range")]),
            FixBatch(
                deviceID: 2, batchID: UUID128.random(), fixes: [],
                rejections: [Rejection(index: 0, reason: "a"), Rejection(index: 1, reason: "b")]),
        ]
        var folded = Registry(recentBatchesPerDeviceMax: 3)
        for batch in batches {
            folded.apply(.fixBatch(batch), offset: try writer.append(.fixBatch(batch), receivedAtMicros: 1))
        }
        writer.close()
        let replayed = try Registry.replay(LogReader(directory: directory), recentBatchesPerDeviceMax: 3)
        for batch in batches {
            let result = replayed.batchResult(deviceID: batch.deviceID, batchID: batch.batchID)
            #expect(result == folded.batchResult(deviceID: batch.deviceID, batchID: batch.batchID))
            #expect(result?.accepted == batch.fixes.count)
            #expect(result?.rejections == batch.rejections)
        }
        #expect(replayed.nextOffset == 3)
    }

    @Test func pushTokensRotateAndMove() {
        var registry = enrolled()
        registry.apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 2, userID: 1, deviceUUID: .zero, name: "tablet", platform: "ios", model: "")),
            offset: 3)
        func register(_ device: UInt64, _ token: String, _ offset: UInt64) {
            registry.apply(
                .pushTokenRegistered(
                    PushTokenRegistered(
                        deviceID: device, provider: "apns", token: token, topic: "t",
                        environment: "production")),
                offset: offset)
        }
        register(1, "A", 4)
        register(1, "B", 5)  // rotation: B replaces A
        #expect(registry.pushTokens(deviceID: 1).map(\.token) == ["B"])
        register(2, "B", 6)  // the same token seen on another device moves there
        #expect(registry.pushTokens(deviceID: 1).isEmpty)
        #expect(registry.pushTokens(deviceID: 2).map(\.token) == ["B"])
        registry.apply(
            .pushTokenInvalidated(PushTokenInvalidated(provider: "apns", token: "B", reason: "gone")),
            offset: 7)
        #expect(registry.pushTokens.isEmpty)
    }

    @Test func pauseIsAFlagOnTheDevice() {
        var registry = enrolled()
        registry.apply(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)), offset: 3)
        #expect(registry.devices[1]?.paused == true)
        registry.apply(.reportingChanged(ReportingChanged(deviceID: 1, paused: false)), offset: 4)
        #expect(registry.devices[1]?.paused == false)
    }

    @Test func recentBatchesAreBoundedPerDevice() {
        var registry = enrolled()
        let ids = (0..<5).map { UUID128(high: 9, low: UInt64($0)) }
        for (index, id) in ids.enumerated() {
            registry.apply(
                .fixBatch(
                    FixBatch(
                        deviceID: 1, batchID: id, fixes: [],
                        rejections: [Rejection(index: 0, reason: "expired: old")])),
                offset: UInt64(10 + index))
        }
        // recentBatchesPerDeviceMax is 3: the two oldest are forgotten.
        #expect(registry.batchResult(deviceID: 1, batchID: ids[0]) == nil)
        #expect(registry.batchResult(deviceID: 1, batchID: ids[1]) == nil)
        #expect(registry.batchResult(deviceID: 1, batchID: ids[4])?.offset == 14)
        #expect(
            registry.batchResult(deviceID: 1, batchID: ids[2])?.rejections.first?.reason == "expired: old")
        #expect(registry.batchResult(deviceID: 2, batchID: ids[4]) == nil)
    }

    /// Who sees what, in id order: a reader's own devices (removed ones left out, re-enrolment not
    /// counted twice) and the devices shared with it while the share is active, interleaved by id.
    @Test func visibleDevicesAreOwnAndSharedInIdOrder() {
        var registry = Registry(recentBatchesPerDeviceMax: 3)
        var offset: UInt64 = 0
        func apply(_ event: Event) {
            registry.apply(event, offset: offset)
            offset += 1
        }
        for user: UInt64 in [1, 2] {
            apply(
                .userCreated(
                    UserCreated(userID: user, name: "u\(user)", role: .member, tokenHash: [UInt8(user)])))
        }
        // Devices 1...9: odd ones alice's, even ones bob's.
        for id: UInt64 in 1...9 {
            let uuid = UUID128(high: 0, low: id)
            apply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: id, userID: id % 2 == 1 ? 1 : 2, deviceUUID: uuid, name: "d\(id)",
                        platform: "ios", model: "")))
        }
        // Re-enrolling device 3 (same id) and removing device 5.
        apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 3, userID: 1, deviceUUID: UUID128(high: 0, low: 3), name: "again",
                    platform: "ios",
                    model: "")))
        apply(.deviceRemoved(DeviceRemoved(deviceID: 5)))
        // Bob shares 8 and 4 with alice; 6 only until a time already past.
        apply(.shareGranted(ShareGranted(deviceID: 8, granteeUserID: 1, untilMicros: nil)))
        apply(.shareGranted(ShareGranted(deviceID: 4, granteeUserID: 1, untilMicros: nil)))
        apply(.shareGranted(ShareGranted(deviceID: 6, granteeUserID: 1, untilMicros: 1_000)))
        let visible = registry.visibleDevices(to: 1, atMicros: 2_000)
        #expect(visible.map(\.deviceID) == [1, 3, 4, 7, 8, 9])
        #expect(visible.map(\.sharedByUserID) == [nil, nil, 2, nil, 2, nil])
        #expect(registry.visibleDevices(to: 2, atMicros: 2_000).map(\.deviceID) == [2, 4, 6, 8])
        #expect(registry.visibleDevices(to: 3, atMicros: 2_000).isEmpty)
    }

    /// What the geofence notifier asks of a transition: could the reader see the device both when
    /// its fix arrived and now? An expired or revoked share answers no, a device's owner always yes.
    @Test func visibilityOverASpanNeedsTheShareAtBothEnds() {
        var registry = enrolled()
        registry.apply(
            .userCreated(UserCreated(userID: 2, name: "bob", role: .member, tokenHash: [9])), offset: 3)
        registry.apply(
            .shareGranted(ShareGranted(deviceID: 1, granteeUserID: 2, untilMicros: 5_000)), offset: 4)
        #expect(registry.visibility(of: 1, to: 2, atMicros: 4_000, sinceMicros: 1_000)?.sharedByUserID == 1)
        #expect(registry.visibility(of: 1, to: 2, atMicros: 6_000, sinceMicros: 1_000) == nil)
        #expect(registry.visibility(of: 1, to: 2, atMicros: 4_000, sinceMicros: 5_000) == nil)
        #expect(registry.visibility(of: 1, to: 1, atMicros: 6_000, sinceMicros: 1_000)?.sharedByUserID == nil)
        #expect(registry.visibility(of: 1, to: 1, atMicros: 6_000, sinceMicros: 1_000) != nil)
        registry.apply(.shareRevoked(ShareRevoked(deviceID: 1, granteeUserID: 2)), offset: 5)
        #expect(registry.visibility(of: 1, to: 2, atMicros: 4_000, sinceMicros: 1_000) == nil)
        #expect(registry.visibility(of: 1, to: 1, atMicros: 4_000, sinceMicros: 1_000) != nil)
    }
}
