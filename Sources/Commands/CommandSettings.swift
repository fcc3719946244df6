import Events
import Identity
import Threads

/// The command options of `findmy serve` (docs/commands.md, "Rate limits" and "Expiry"), and the
/// dispatcher's start.
extension CommandLimits {
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "command-locate-interval-seconds", "FINDMY_COMMAND_LOCATE_INTERVAL_SECONDS",
            "at most one locate per device within this many seconds; more answer 429 with Retry-After (default 30)"
        ),
        (
            "command-sound-interval-seconds", "FINDMY_COMMAND_SOUND_INTERVAL_SECONDS",
            "at most one sound per device within this many seconds (default 30)"
        ),
        (
            "command-locate-expiry-seconds", "FINDMY_COMMAND_LOCATE_EXPIRY_SECONDS",
            "a locate unanswered this long ends as expired (default 300)"
        ),
        (
            "command-sound-expiry-seconds", "FINDMY_COMMAND_SOUND_EXPIRY_SECONDS",
            "a sound unanswered this long ends as expired (default 3600); a lost lasts until found"
        ),
    ]

    /// Reads the settings with `integer(flag, default, min)`, the serve command's parser.
    public static func configuration(_ integer: (String, Int, Int) throws -> Int) throws -> CommandLimits {
        var limits = CommandLimits()
        limits.locateIntervalSeconds = try integer(
            "command-locate-interval-seconds", limits.locateIntervalSeconds, 0)
        limits.soundIntervalSeconds = try integer(
            "command-sound-interval-seconds", limits.soundIntervalSeconds, 0)
        limits.locateExpirySeconds = try integer(
            "command-locate-expiry-seconds", limits.locateExpirySeconds, 1)
        limits.soundExpirySeconds = try integer("command-sound-expiry-seconds", limits.soundExpirySeconds, 1)
        return limits
    }
}

extension CommandStreamLimits {
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "command-stream-heartbeat-seconds", "FINDMY_COMMAND_STREAM_HEARTBEAT_SECONDS",
            "a command stream quiet this long gets a heartbeat, and a client that left is found out (default 25)"
        ),
        (
            "command-streams-max", "FINDMY_COMMAND_STREAMS_MAX",
            "command streams open at once; more answer 503 too_many_streams (default 1024, and at most three quarters of --connections-max)"
        ),
    ]

    /// Reads the settings with `integer(flag, default, min)`, the serve command's parser. Streams
    /// hold their connections: at most three quarters of `connectionsMax` go to them, so that
    /// ordinary requests always find a connection.
    public static func configuration(_ integer: (String, Int, Int) throws -> Int, connectionsMax: Int) throws
        -> CommandStreamLimits
    {
        var limits = CommandStreamLimits()
        limits.heartbeatSeconds = try integer("command-stream-heartbeat-seconds", limits.heartbeatSeconds, 1)
        limits.streamsMax = min(
            try integer("command-streams-max", limits.streamsMax, 0), connectionsMax - connectionsMax / 4)
        return limits
    }
}

extension CommandStreams {
    /// The command streams, started after the dispatcher and before the listeners, so stopped
    /// after the listeners (which cut the streams' connections first).
    public static func start(
        identity: IdentityService, limits: CommandStreamLimits, group: ServiceGroup
    ) throws -> CommandStreams {
        let streams = CommandStreams(identity: identity, limits: limits)
        try group.start(streams)
        return streams
    }
}

extension CommandService {
    /// The dispatcher over `channels` (in `CommandChannels.order`), started after its channels and
    /// so stopped before them.
    public static func start(
        identity: IdentityService, channels: [any CommandChannel], limits: CommandLimits,
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros, group: ServiceGroup
    ) throws -> CommandService {
        let commands = CommandService(
            identity: identity, channels: CommandChannels.ordered(channels), limits: limits,
            clockMicros: clockMicros)
        try group.start(commands)
        return commands
    }
}
