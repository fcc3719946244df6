import Core
import Events
import Testing

/// Who may send commands, and the open commands, as folds of the log (docs/commands.md).
@Suite struct CommandRegistryTests {
    func registry() -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: 3)
        for (id, name, role) in [(1, "olga", Role.member), (2, "mia", .member), (3, "adam", .admin)] {
            registry.apply(
                .userCreated(
                    UserCreated(
                        userID: UInt64(id), name: name, role: role,
                        tokenHash: [UInt8](repeating: UInt8(id), count: 32))), offset: registry.nextOffset)
        }
        registry.apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: UUID128.random(), name: "phone", platform: "ios",
                    model: "")),
            offset: registry.nextOffset)
        return registry
    }

    @Test func aShareSeesOnlyUntilItPermitsLocatingAndKeepsThatWhenGrantedAgain() {
        var registry = registry()
        func may(_ user: UInt64, at now: Int64 = 0) -> Bool {
            registry.mayCommand(1, user: user, atMicros: now)
        }
        #expect(may(1) && !may(2) && !may(3))
        registry.apply(
            .shareGranted(ShareGranted(deviceID: 1, granteeUserID: 2, untilMicros: 100)),
            offset: registry.nextOffset)
        #expect(!may(2), "a new share sees only")
        registry.apply(
            .sharePermissionChanged(SharePermissionChanged(deviceID: 1, granteeUserID: 2, locate: true)),
            offset: registry.nextOffset)
        #expect(may(2) && !may(2, at: 100), "while the share is active")
        registry.apply(
            .shareGranted(ShareGranted(deviceID: 1, granteeUserID: 2, untilMicros: nil)),
            offset: registry.nextOffset)
        #expect(may(2, at: 100), "granting again keeps the permission")
        // A permission for a share that does not exist grants nothing.
        registry.apply(
            .sharePermissionChanged(SharePermissionChanged(deviceID: 1, granteeUserID: 3, locate: true)),
            offset: registry.nextOffset)
        #expect(!may(3), "an administrator is no exception")
        registry.apply(
            .shareRevoked(ShareRevoked(deviceID: 1, granteeUserID: 2)), offset: registry.nextOffset)
        registry.apply(
            .shareGranted(ShareGranted(deviceID: 1, granteeUserID: 2, untilMicros: nil)),
            offset: registry.nextOffset)
        #expect(!may(2), "revoking ended the permission with the share")
    }

    @Test func openCommandsCloseOnAnswerAndExpiryAndGoWithTheDevice() {
        var registry = registry()
        let (locate, lost) = (UUID128.random(), UUID128.random())
        for (id, kind, at) in [(locate, CommandKindCode.locate, Int64(10)), (lost, .lost, 20)] {
            registry.apply(
                .commandRequested(
                    CommandRequested(
                        commandID: id, deviceID: 1, kind: kind, requestedByUserID: 2, requestedAtMicros: at)),
                offset: registry.nextOffset)
        }
        registry.apply(
            .commandSent(CommandSent(commandID: locate, deviceID: 1, channel: "report-answer")),
            offset: registry.nextOffset)
        #expect(registry.commands.open(deviceID: 1).map(\.request.commandID) == [locate, lost])
        #expect(registry.commands.open[locate]?.sentChannels == ["report-answer"])
        #expect(registry.commands.lastRequested[CommandBook.KindKey(deviceID: 1, kind: .locate)] == 10)
        registry.apply(
            .commandAnswered(
                CommandAnswered(
                    commandID: locate, deviceID: 1, batchOffset: 9, fixIndex: 0, clientProtocol: .native)),
            offset: registry.nextOffset)
        #expect(registry.commands.open(deviceID: 1).map(\.request.commandID) == [lost])
        #expect(registry.commands.lost(deviceID: 1)?.request.commandID == lost)
        registry.apply(.deviceRemoved(DeviceRemoved(deviceID: 1)), offset: registry.nextOffset)
        #expect(registry.commands == CommandBook())
    }
}
