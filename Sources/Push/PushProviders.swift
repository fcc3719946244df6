import CLI
import Commands
import HTTPClient
import Identity
import Threads

/// The push providers of `findmy serve` (docs/commands.md, "Providers"): each is configured by
/// its options, and only a configured one is constructed. `PushChannelsService` loads their keys
/// when it starts (refusing key files others can read), exposes the channels for the command
/// dispatcher, and closes their connections when it stops.
public enum PushProviders {
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "apns-key-file", "FINDMY_APNS_KEY_FILE",
            "APNs: the token-auth key (AuthKey_KEYID.p8 from developer.apple.com, Keys); readable by its owner only. "
                + "Setting it turns APNs on and makes --apns-key-id, --apns-team-id and --apns-bundle-id required"
        ),
        ("apns-key-id", "FINDMY_APNS_KEY_ID", "APNs: the key's 10-character key id"),
        (
            "apns-team-id", "FINDMY_APNS_TEAM_ID",
            "APNs: the 10-character team id of the app's developer account"
        ),
        (
            "apns-bundle-id", "FINDMY_APNS_BUNDLE_ID",
            "APNs: the app's bundle id, the topic of its pushes (location pushes go to <bundle id>.location-query)"
        ),
        (
            "apns-critical-sound", "FINDMY_APNS_CRITICAL_SOUND",
            "APNs: on: `sound` rings as a critical alert, through silent mode (needs Apple's critical-alerts entitlement "
                + "for the app); off (default): a normal alert sound"
        ),
        (
            "apns-alert-after-seconds", "FINDMY_APNS_ALERT_AFTER_SECONDS",
            "APNs: a locate to a phone without a location-push token is a background push; the alert asking to open "
                + "the app follows if the command is still unanswered this many seconds later (default 30)"
        ),
        (
            "apns-url", "FINDMY_APNS_URL",
            "APNs: production base URL (default https://api.push.apple.com; tests point it at a fake)"
        ),
        (
            "apns-sandbox-url", "FINDMY_APNS_SANDBOX_URL",
            "APNs: sandbox base URL, for tokens registered with environment sandbox (default https://api.sandbox.push.apple.com)"
        ),
        (
            "fcm-service-account-file", "FINDMY_FCM_SERVICE_ACCOUNT_FILE",
            "FCM: the service-account JSON key file (Firebase console, Project settings, Service accounts); "
                + "readable by its owner only. Setting it turns FCM on"
        ),
        (
            "fcm-project", "FINDMY_FCM_PROJECT",
            "FCM: the Firebase project id (default: the service account's project_id)"
        ),
        (
            "fcm-url", "FINDMY_FCM_URL",
            "FCM: base URL of the HTTP v1 API (default https://fcm.googleapis.com)"
        ),
        (
            "fcm-token-url", "FINDMY_FCM_TOKEN_URL",
            "FCM: the OAuth 2.0 token endpoint (default: the service account's token_uri)"
        ),
        (
            "unifiedpush-contact", "FINDMY_UNIFIEDPUSH_CONTACT",
            "UnifiedPush / Web Push: a mailto: or https: contact for push service operators (the VAPID subject). "
                + "Setting it turns UnifiedPush on; the server's VAPID key is made on first start in DATA_DIR/push/vapid-key.pem (mode 0600)"
        ),
        (
            "push-ca-file", "FINDMY_PUSH_CA_FILE",
            "trust only this CA file for every push provider's TLS (tests with local fakes); default: the system's"
        ),
    ]

    public struct Configuration: Sendable {
        public var apns: APNsOptions?
        public var fcm: FCMOptions?
        public var unifiedPushContact: String?
        public var caFile: String?
        /// Where UnifiedPush endpoints may be reached (`--allow-private-targets`).
        public var addressPolicy = AddressPolicy()

        var isEmpty: Bool { apns == nil && fcm == nil && unifiedPushContact == nil }
    }

    public struct APNsOptions: Sendable {
        public var keyFile: String
        public var configuration: APNsConfiguration
    }

    public struct FCMOptions: Sendable {
        public var serviceAccountFile: String
        public var project: String?
        public var baseURL: String?
        public var tokenURL: String?
    }

    public static func configuration(_ value: (String, String) -> String?) throws -> Configuration? {
        func option(_ flag: String) -> String? {
            let environment = settings.first { $0.flag == flag }!.environment
            guard let text = value(flag, environment), !text.isEmpty else { return nil }
            return text
        }
        func url(_ flag: String) throws -> String? {
            guard let text = option(flag) else { return nil }
            guard text.hasPrefix("https://") else {
                throw UsageError("--\(flag) must be an https:// URL, got '\(text)'")
            }
            return text.hasSuffix("/") ? String(text.dropLast()) : text
        }
        var configuration = Configuration(caFile: option("push-ca-file"))
        let apnsFlags = ["apns-key-file", "apns-key-id", "apns-team-id", "apns-bundle-id"]
        if apnsFlags.contains(where: { option($0) != nil }) {
            let missing = apnsFlags.filter { option($0) == nil }
            guard missing.isEmpty else {
                throw UsageError(
                    "APNs needs --apns-key-file, --apns-key-id, --apns-team-id and --apns-bundle-id together; missing "
                        + missing.map { "--" + $0 }.joined(separator: ", "))
            }
            var apns = APNsConfiguration(
                teamID: option("apns-team-id")!, keyID: option("apns-key-id")!,
                bundleID: option("apns-bundle-id")!)
            switch option("apns-critical-sound") ?? "off" {
            case "on": apns.criticalSound = true
            case "off": apns.criticalSound = false
            case let other: throw UsageError("--apns-critical-sound is on or off, got '\(other)'")
            }
            if let text = option("apns-alert-after-seconds") {
                guard let seconds = Int(text), (0...3600).contains(seconds) else {
                    throw UsageError(
                        "--apns-alert-after-seconds is a number of seconds from 0 to 3600, got '\(text)'")
                }
                apns.alertAfterSeconds = seconds
            }
            if let production = try url("apns-url") { apns.productionURL = production }
            if let sandbox = try url("apns-sandbox-url") { apns.sandboxURL = sandbox }
            apns.caFile = configuration.caFile
            configuration.apns = APNsOptions(keyFile: option("apns-key-file")!, configuration: apns)
        }
        if let file = option("fcm-service-account-file") {
            configuration.fcm = FCMOptions(
                serviceAccountFile: file, project: option("fcm-project"), baseURL: try url("fcm-url"),
                tokenURL: try url("fcm-token-url"))
        } else if option("fcm-project") != nil || option("fcm-url") != nil || option("fcm-token-url") != nil {
            throw UsageError("the FCM options need --fcm-service-account-file")
        }
        if let contact = option("unifiedpush-contact") {
            guard contact.hasPrefix("mailto:") || contact.hasPrefix("https://") else {
                throw UsageError(
                    "--unifiedpush-contact must be a mailto: or https: URI (RFC 8292's subject), got '\(contact)'"
                )
            }
            configuration.unifiedPushContact = contact
        }
        return configuration.isEmpty ? nil : configuration
    }
}

/// The configured push channels as one service: started after the log (the channels read the
/// registry's push tokens), stopped before it. `channels` is what the command dispatcher takes.
public final class PushChannelsService: Service {
    public let name = "push"
    let configuration: PushProviders.Configuration
    let tokens: any PushTokenSource
    let dataDirectory: String
    private let started = Locked<[any CommandChannel]>([])
    private let closers = Locked<[@Sendable () -> Void]>([])
    private let current = Locked<ServiceState>(.idle)

    init(_ configuration: PushProviders.Configuration, tokens: any PushTokenSource, dataDirectory: String) {
        self.configuration = configuration
        self.tokens = tokens
        self.dataDirectory = dataDirectory
    }

    /// Starts the configured providers (none without `configuration`): after the log and the
    /// registry whose push tokens they read, stopped before them. Their channels are what it returns,
    /// for the dispatcher.
    public static func start(
        _ configuration: PushProviders.Configuration?, tokens: any PushTokenSource, dataDirectory: String,
        group: ServiceGroup
    ) throws -> [any CommandChannel] {
        guard let configuration else { return [] }
        let push = PushChannelsService(configuration, tokens: tokens, dataDirectory: dataDirectory)
        try group.start(push)
        return push.channels
    }

    /// The channels, in the order a command tries them: APNs, FCM, UnifiedPush. Empty before start.
    public var channels: [any CommandChannel] { started.withLock { $0 } }
    public var state: ServiceState { current.withLock { $0 } }

    public func start() throws {
        var channels: [any CommandChannel] = []
        var closers: [@Sendable () -> Void] = []
        do {
            if let apns = configuration.apns {
                let channel = APNsChannel(
                    configuration: apns.configuration, key: try PushSetup.apnsKey(apns.keyFile),
                    tokens: tokens)
                channels.append(channel)
                closers.append { channel.close() }
            }
            if let fcm = configuration.fcm {
                var settings = FCMConfiguration(
                    account: try PushSetup.fcmServiceAccount(fcm.serviceAccountFile))
                if let project = fcm.project { settings.projectID = project }
                if let base = fcm.baseURL { settings.baseURL = base }
                if let token = fcm.tokenURL { settings.tokenURL = token }
                settings.caFile = configuration.caFile
                let channel = FCMChannel(configuration: settings, tokens: tokens)
                channels.append(channel)
                closers.append { channel.close() }
            }
            if let contact = configuration.unifiedPushContact {
                var settings = UnifiedPushConfiguration(contact: contact)
                settings.caFile = configuration.caFile
                settings.addressPolicy = configuration.addressPolicy
                let channel = UnifiedPushChannel(
                    configuration: settings,
                    vapidKey: try PushSetup.vapidKey(inDirectory: dataDirectory + "/push"),
                    tokens: tokens)
                channels.append(channel)
                closers.append { channel.close() }
            }
        } catch {
            for close in closers { close() }
            current.withLock { $0 = .failed("\(error)") }
            throw error
        }
        started.withLock { $0 = channels }
        self.closers.withLock { $0 = closers }
        current.withLock { $0 = .running }
        StructuredLog.info(
            "push_channels", ["channels": .string(channels.map(\.name).joined(separator: ","))])
    }

    public func stop(graceMicros: Int64) {
        for close in closers.withLock({ $0 }) { close() }
        current.withLock { $0 = .stopped }
    }
}
