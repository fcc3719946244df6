import Events
import Testing

@testable import Core

/// "Notify when found" in the registry (event 42): armed by the device's owner, fired and disarmed
/// by the device's first batch with an accepted fix after it in the log (never by one before it),
/// disarmed by its owner or by removing the device, and kept by the snapshot body (version 10).
struct FoundNoticeRegistryTests {
    static let armedAt: Int64 = 1_764_770_400_000_000

    /// The records folded as the server folds them: each from its stored bytes, at its offset.
    struct Fold {
        var registry = Registry(recentBatchesPerDeviceMax: 4)
        var offset: UInt64 = 0

        init() {
            for user in [UInt64(1), 2] {
                add(
                    .userCreated(
                        UserCreated(
                            userID: user, name: "u\(user)", role: .member,
                            tokenHash: [UInt8](repeating: UInt8(user), count: 32))))
            }
            add(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: 7, userID: 1, deviceUUID: UUID128(high: 7, low: 7), name: "Anna's phone",
                        platform: "ios", model: "")))
        }

        mutating func add(_ event: Event, receivedAtMicros: Int64 = FoundNoticeRegistryTests.armedAt) {
            var encoded = EventCodec.encode(event, receivedAtMicros: receivedAtMicros)
            encoded.header.offset = offset
            try! registry.apply(
                LogRecord(
                    header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0))
            offset += 1
        }

        mutating func arm(_ armed: Bool = true, user: UInt64 = 1) {
            add(.foundNoticeSet(FoundNoticeSet(deviceID: 7, userID: user, armed: armed)))
        }

        mutating func report(fixes: Int, rejected: Int = 0) {
            let batchID = UUID128(high: 9, low: offset)
            add(
                .fixBatch(
                    FixBatch(
                        deviceID: 7, batchID: batchID,
                        fixes: (0..<fixes).map { i in
                            Fix(
                                latitude: 52.5, longitude: 13.4, accuracyMeters: 10, source: "significant",
                                recordedAtMicros: FoundNoticeRegistryTests.armedAt + Int64(i))
                        },
                        rejections: (0..<rejected).map {
                            Rejection(index: UInt32($0), reason: "out of range")
                        })))
        }
    }

    @Test func theOwnerArmsItWithTheRecordsOffsetAndTime() {
        var fold = Fold()
        fold.arm(user: 2)  // not the owner: not trusted
        #expect(fold.registry.foundNotice(deviceID: 7) == nil)
        fold.arm()
        #expect(
            fold.registry.foundNotice(deviceID: 7)
                == Registry.FoundNotice(userID: 1, armedOffset: 4, armedAtMicros: Self.armedAt))
    }

    @Test func aBatchAfterItFiresAndDisarmsItABatchBeforeItDoesNot() {
        var fold = Fold()
        fold.report(fixes: 2)
        fold.arm()
        #expect(fold.registry.foundNotice(deviceID: 7) != nil)
        // Every fix refused: the device did not say where it is.
        fold.report(fixes: 0, rejected: 3)
        #expect(fold.registry.foundNotice(deviceID: 7) != nil)
        fold.report(fixes: 1)
        #expect(fold.registry.foundNotice(deviceID: 7) == nil)
    }

    @Test func aBatchFoldedAsAnEventFiresItToo() {
        var registry = Fold().registry
        registry.apply(.foundNoticeSet(FoundNoticeSet(deviceID: 7, userID: 1, armed: true)), offset: 10)
        registry.apply(
            .fixBatch(
                FixBatch(
                    deviceID: 7, batchID: UUID128(high: 1, low: 1),
                    fixes: [
                        Fix(latitude: 1, longitude: 2, accuracyMeters: 5, source: "x", recordedAtMicros: 1)
                    ])),
            offset: 11)
        #expect(registry.foundNotice(deviceID: 7) == nil)
    }

    @Test func itsOwnerOrRemovingTheDeviceDisarmsIt() {
        var fold = Fold()
        fold.arm()
        fold.arm(false)
        #expect(fold.registry.foundNotice(deviceID: 7) == nil)
        fold.arm()
        fold.add(.deviceRemoved(DeviceRemoved(deviceID: 7)))
        #expect(fold.registry.foundNotice(deviceID: 7) == nil)
        // A removed device cannot be armed again.
        fold.arm()
        #expect(fold.registry.foundNotice(deviceID: 7) == nil)
    }

    @Test func theAlertTargetsAreTheUsersLastSettings() {
        var fold = Fold()
        fold.add(
            .userSettingChanged(
                UserSettingChanged(userID: 1, name: "notify_ntfy_url", value: "https://ntfy.sh/a")))
        fold.add(
            .userSettingChanged(
                UserSettingChanged(userID: 1, name: "notify_webhook_url", value: "https://x.example/h")))
        fold.add(.userSettingChanged(UserSettingChanged(userID: 1, name: "notify_ntfy_url", value: "")))
        #expect(fold.registry.users[1]?.notifyNtfyURL == "")
        #expect(fold.registry.users[1]?.notifyWebhookURL == "https://x.example/h")
    }

    @Test func theSnapshotBodyKeepsNoticesAndTargets() throws {
        var fold = Fold()
        fold.add(
            .userSettingChanged(
                UserSettingChanged(userID: 1, name: "notify_webhook_url", value: "https://x.example/h")))
        fold.arm()
        let body = fold.registry.encodeBody()
        var reader = ByteReader(body[...])
        let decoded = try Registry.decodeBody(&reader, recentBatchesPerDeviceMax: 4)
        #expect(reader.remaining == 0)
        #expect(decoded.differences(from: fold.registry) == [])
        #expect(decoded.foundNotice(deviceID: 7)?.armedAtMicros == Self.armedAt)
        #expect(decoded.users[1]?.notifyWebhookURL == "https://x.example/h")
    }
}
