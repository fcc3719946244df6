/// The ways `findmy serve` reaches a device for a command, in the order `CommandService` tries them
/// (docs/commands.md, "Channels and their order"): APNs, FCM, UnifiedPush, ntfy, OwnTracks over
/// MQTT. Only the configured ones are given (ntfy always is, and reaches only a device with a
/// topic); without any, commands still reach a device through its report answers.
public enum CommandChannels {
    public static let order = ["apns", "fcm", "unifiedpush", "ntfy", "owntracks-mqtt"]

    public static func ordered(_ channels: [any CommandChannel]) -> [any CommandChannel] {
        channels.sorted {
            (order.firstIndex(of: $0.name) ?? order.count) < (order.firstIndex(of: $1.name) ?? order.count)
        }
    }
}
