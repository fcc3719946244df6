import Commands
import Core
import Events
import Foundation
import Identity
import JSON
import Push
import PushFakeSupport
import Synchronization
import Threads

/// Push tokens from a registry the test folds itself, as Core's registry would.
final class TestTokens: PushTokenSource, @unchecked Sendable {
    private let registry = Locked(Registry(recentBatchesPerDeviceMax: 4))
    private let offset = Atomic<UInt64>(0)

    init() {
        apply(
            .userCreated(
                UserCreated(
                    userID: 1, name: "alice", role: .member, tokenHash: .init(repeating: 1, count: 32))))
        for device in UInt64(1)...9 {
            apply(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: 1, deviceUUID: UUID128(high: 1, low: device),
                        name: "d\(device)",
                        platform: "ios", model: "")))
        }
    }

    func apply(_ event: Event) {
        let at = offset.add(1, ordering: .relaxed).oldValue
        registry.withLock { $0.apply(event, offset: at) }
    }

    func register(
        device: UInt64, provider: String, token: String, topic: String = "", environment: String = "",
        publicKey: [UInt8] = [], authSecret: [UInt8] = []
    ) {
        apply(
            .pushTokenRegistered(
                PushTokenRegistered(
                    deviceID: device, provider: provider, token: token, topic: topic,
                    environment: environment,
                    webPushPublicKey: publicKey, webPushAuthSecret: authSecret)))
    }

    func pushRegistrations(deviceID: UInt64) -> [(
        key: Registry.PushKey, registration: Registry.PushRegistration
    )] {
        registry.withLock { $0.pushRegistrations(deviceID: deviceID) }
    }

    func pushRegistration(provider: String, token: String) -> Registry.PushRegistration? {
        registry.withLock { $0.pushTokens[Registry.PushKey(provider: provider, token: token)] }
    }
}

/// A clock the test moves.
final class TestClock: Sendable {
    private let micros: Atomic<Int64>
    init(seconds: Int64) { micros = Atomic(seconds * 1_000_000) }
    func advance(seconds: Int64) { micros.add(seconds * 1_000_000, ordering: .relaxed) }
    var now: WallClockMicros { { [self] in micros.load(ordering: .relaxed) } }
}

/// Delivers and waits for the one outcome.
func deliverAndWait(
    _ channel: any CommandChannel, _ delivery: CommandDelivery, to address: ChannelAddress,
    seconds: Int64 = 60
) -> DeliveryOutcome? {
    let result = Locked<DeliveryOutcome?>(nil)
    let done = ConditionLock()
    channel.deliver(delivery, to: address) { outcome in
        done.withLock {
            result.withLock { $0 = outcome }
            done.broadcast()
        }
    }
    let deadline = monotonicMicros() + seconds * 1_000_000
    return done.withLock {
        while result.withLock({ $0 }) == nil {
            if !done.wait(0, untilMonotonicMicros: deadline) { break }
        }
        return result.withLock { $0 }
    }
}

func command(_ kind: CommandKind, device: UInt64 = 1, message: String? = nil, phone: String? = nil)
    -> CommandDelivery
{
    CommandDelivery(
        commandID: UUID().uuidString.lowercased(), kind: kind, deviceID: device, message: message,
        phone: phone)
}
