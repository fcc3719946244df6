import CLI
import Events
import Identity
import Threads

/// The options of presence from headscale (docs/presence.md, "Configuration"): only a server given
/// `--headscale-url` polls.
public enum HeadscaleOptions {
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "headscale-url", "FINDMY_HEADSCALE_URL",
            "presence: the headscale server whose node list tells which linked devices are online "
                + "(https://, or http:// on this machine); setting it turns presence on and makes --headscale-api-key-file required"
        ),
        (
            "headscale-api-key-file", "FINDMY_HEADSCALE_API_KEY_FILE",
            "presence: a file holding a headscale API key (headscale apikeys create), readable by its owner only"
        ),
        (
            "headscale-poll-seconds", "FINDMY_HEADSCALE_POLL_SECONDS",
            "presence: seconds between polls of GET /api/v1/node (1-86400, default 30); failures back off to 600"
        ),
        (
            "headscale-users", "FINDMY_HEADSCALE_USERS",
            "presence: findmy=headscale user name pairs, comma-separated, for users whose names differ "
                + "(default: each findmy user's nodes are those of the headscale user of the same name)"
        ),
        (
            "headscale-ca-file", "FINDMY_HEADSCALE_CA_FILE",
            "presence: trust only this CA file for headscale's TLS (default: the system's)"
        ),
    ]

    public static func configuration(_ value: (String, String) -> String?) throws -> HeadscaleConfiguration? {
        func option(_ flag: String) -> String? {
            let environment = settings.first { $0.flag == flag }!.environment
            guard let text = value(flag, environment), !text.isEmpty else { return nil }
            return text
        }
        guard let url = option("headscale-url") else {
            if let other = settings.dropFirst().first(where: { option($0.flag) != nil }) {
                throw UsageError("--\(other.flag) needs --headscale-url")
            }
            return nil
        }
        guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
            throw UsageError("--headscale-url must be an https:// (or http://) URL, got '\(url)'")
        }
        guard let keyFile = option("headscale-api-key-file") else {
            throw UsageError("--headscale-url needs --headscale-api-key-file (a file holding the API key)")
        }
        var configuration = HeadscaleConfiguration(url: url, apiKeyFile: keyFile)
        if let text = option("headscale-poll-seconds") {
            guard let seconds = Int(text),
                (HeadscaleConfiguration.pollSecondsMin...HeadscaleConfiguration.pollSecondsMax).contains(
                    seconds)
            else {
                throw UsageError(
                    "--headscale-poll-seconds must be a whole number from 1 to 86400, got '\(text)'")
            }
            configuration.pollSeconds = seconds
        }
        if let text = option("headscale-users") {
            for pair in text.split(separator: ",") {
                let parts = pair.split(separator: "=", omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw UsageError("--headscale-users takes findmy=headscale pairs, got '\(pair)'")
                }
                configuration.userNames[String(parts[0])] = String(parts[1])
            }
        }
        configuration.caFile = option("headscale-ca-file")
        return configuration
    }
}

extension PresenceService {
    /// Starts the poller when `configuration` is given: after the log and the registry it appends
    /// to, stopped before them. nil without it (the presence routes then answer that it is off).
    public static func start(
        _ configuration: HeadscaleConfiguration?, identity: IdentityService,
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros, group: ServiceGroup
    ) throws -> PresenceService? {
        guard let configuration else { return nil }
        let poller = PresenceService(configuration, identity: identity, clockMicros: clockMicros)
        identity.addStatusSource(poller)
        try group.start(poller)
        return poller
    }
}
