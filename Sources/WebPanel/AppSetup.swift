import Crypto
import HTTP
import JSON

/// The apps the panel's "Add a device" page sets up (docs/panel.md), and what the person types into
/// each: the settings, in the app's own words, and the app's setup link where it has one. The
/// endpoints and the apps' fields are in docs/clients.md, with their sources.
enum SetupApp: String, CaseIterable, Sendable {
    case findmy
    case owntracksHTTP = "owntracks-http"
    case owntracksMQTT = "owntracks-mqtt"
    case overland
    case gpslogger
    case traccar

    var title: String {
        switch self {
        case .findmy: "findmy (native report API)"
        case .owntracksHTTP: "OwnTracks, HTTP mode (Android, iOS)"
        case .owntracksMQTT: "OwnTracks, MQTT mode (Android, iOS)"
        case .overland: "Overland (iOS)"
        case .gpslogger: "GPSLogger (Android)"
        case .traccar: "Traccar Client or OsmAnd (Android, iOS)"
        }
    }

    /// What the device's `platform` says: the app it reports with (a-z, 0-9, '-', as enrolment
    /// requires).
    var platform: String { rawValue }
}

/// The broker of `findmy serve --mqtt-url mqtt[s]://HOST[:PORT]`, as a phone must reach it.
struct MQTTBroker: Equatable, Sendable {
    var host: String
    var port: Int
    var tls: Bool

    /// Nil for a URL that is not `mqtt://` or `mqtts://` with a host; a login in the URL
    /// (`user@`) is findmy's own and is left out.
    init?(url: String) {
        let tls: Bool
        var rest: Substring
        if url.hasPrefix("mqtts://") {
            tls = true
            rest = url.dropFirst("mqtts://".count)
        } else if url.hasPrefix("mqtt://") {
            tls = false
            rest = url.dropFirst("mqtt://".count)
        } else {
            return nil
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        var port = tls ? 8883 : 1883
        // The last colon after a bracketed IPv6 address (or any colon without one) starts the port.
        if let colon = rest.lastIndex(of: ":"), !rest[colon...].contains("]") {
            guard let number = Int(rest[rest.index(after: colon)...]), number > 0, number < 65536 else {
                return nil
            }
            port = number
            rest = rest[..<colon]
        }
        guard !rest.isEmpty else { return nil }
        self.init(host: String(rest), port: port, tls: tls)
    }

    init(host: String, port: Int, tls: Bool) {
        self.host = host
        self.port = port
        self.tls = tls
    }
}

/// What the page shows for one new device: the settings to type, in order, the setup link (shown
/// as a QR code and as a link), and notes.
struct AppSetup: Equatable, Sendable {
    struct Setting: Equatable, Sendable {
        /// The app's name for the field.
        var label: String
        var value: String
        /// Whether the value is the device token (or holds it): shown once, never again.
        var secret = false
    }

    var settings: [Setting]
    var link: String?
    var notes: [String]

    /// `baseURL`: how the phone reaches findmy (`--public-url`, or the address the browser used),
    /// without a trailing slash.
    /// `topic`: the broker topic of OwnTracks' MQTT mode (`IngestService.topic`).
    /// `device`: the enrolled device's id and UUID, which findmy's own setup link carries.
    init(
        app: SetupApp, baseURL: String, userName: String, deviceName: String, token: String,
        broker: MQTTBroker?, topic: String? = nil, device: (id: UInt64, uuid: String)? = nil
    ) {
        self =
            switch app {
            case .findmy: Self.findmy(baseURL: baseURL, token: token, device: device)
            case .owntracksHTTP:
                Self.owntracksHTTP(baseURL: baseURL, userName: userName, deviceName: deviceName, token: token)
            case .owntracksMQTT:
                Self.owntracksMQTT(
                    broker: broker, topic: topic, userName: userName, deviceName: deviceName, token: token)
            case .overland: Self.overland(baseURL: baseURL, deviceName: deviceName, token: token)
            case .gpslogger: Self.gpslogger(baseURL: baseURL, token: token)
            case .traccar: Self.traccar(baseURL: baseURL, token: token)
            }
    }

    private init(settings: [Setting], link: String? = nil, notes: [String] = []) {
        self.settings = settings
        self.link = link
        self.notes = notes
    }

    /// findmy's own clients (FindMyClient, findmy-agent): the report endpoint and the device token,
    /// and the setup link `findmy://setup?url=&device_id=&device_uuid=&token=` that gives them all
    /// four at once (docs/client-library.md): the client takes them as they are, no second enrolment.
    private static func findmy(baseURL: String, token: String, device: (id: UInt64, uuid: String)?)
        -> AppSetup
    {
        var settings: [Setting] = [
            Setting(label: "Server URL", value: baseURL),
            Setting(label: "Report endpoint", value: baseURL + "/api/find-my/report"),
            Setting(label: "Device token (Authorization: Bearer)", value: token, secret: true),
        ]
        guard let device else { return AppSetup(settings: settings) }
        settings.insert(Setting(label: "Device id", value: String(device.id)), at: 1)
        settings.insert(Setting(label: "Device UUID", value: device.uuid), at: 2)
        let link =
            "findmy://setup?url=\(percentEncoded(baseURL))&device_id=\(device.id)"
            + "&device_uuid=\(percentEncoded(device.uuid))&token=\(percentEncoded(token))"
        let notes = [
            "On a Linux device: findmy-agent enrol --setup-link 'LINK' --name NAME (docs/agent.md), then findmy-agent run."
        ]
        return AppSetup(settings: settings, link: link, notes: notes)
    }

    /// OwnTracks in HTTP mode, with its setup link.
    private static func owntracksHTTP(
        baseURL: String, userName: String, deviceName: String, token: String
    ) -> AppSetup {
        let url = baseURL + "/api/find-my/owntracks"
        let settings: [Setting] = [
            Setting(label: "Mode", value: "HTTP"),
            Setting(label: "URL (Host)", value: url),
            Setting(label: "Authentication", value: "on"),
            Setting(label: "Username (UserID)", value: userName),
            Setting(label: "Password", value: token, secret: true),
            Setting(label: "Device ID", value: deviceName),
            Setting(label: "Tracker ID", value: Self.trackerID(deviceName)),
        ]
        let link =
            "owntracks:///config?inline="
            + percentEncoded(
                Base64.encode(
                    Self.owntracksConfiguration(
                        url: url, userName: userName, token: token, deviceName: deviceName)))
        let notes = [
            "OwnTracks for iOS imports a setup link only once \"Allow URL configuration\" (allowConfigurationByURIAndConfigFile) is on in its settings; otherwise type the settings above."
        ]
        return AppSetup(settings: settings, link: link, notes: notes)
    }

    /// OwnTracks in MQTT mode: the broker findmy subscribes to, when it has one, and the topic.
    private static func owntracksMQTT(
        broker: MQTTBroker?, topic: String?, userName: String, deviceName: String, token: String
    ) -> AppSetup {
        var settings: [Setting]
        if let broker {
            settings = [
                Setting(label: "Mode", value: "MQTT"),
                Setting(label: "Host", value: broker.host),
                Setting(label: "Port", value: String(broker.port)),
                Setting(label: "TLS", value: broker.tls ? "on" : "off"),
            ]
        } else {
            settings = [
                Setting(label: "Mode", value: "MQTT"),
                Setting(
                    label: "Host, port and TLS",
                    value: "ask your administrator for the broker (this server runs without --mqtt-url)"),
            ]
        }
        settings += [
            Setting(label: "Username (UserID)", value: userName),
            Setting(label: "Password", value: "your login at the broker (your administrator gives it)"),
            Setting(label: "Device ID", value: deviceName),
            Setting(label: "Tracker ID", value: Self.trackerID(deviceName)),
            Setting(
                label: "Topic the app publishes to", value: topic ?? "owntracks/\(userName)/\(deviceName)"
            ),
            Setting(label: "Device token (not typed into the app)", value: token, secret: true),
        ]
        let notes = [
            "The broker decides who may publish to which topic: the app's username must be your findmy user name, so that its topic is yours."
        ]
        return AppSetup(settings: settings, notes: notes)
    }

    /// Overland, with its setup link.
    private static func overland(baseURL: String, deviceName: String, token: String) -> AppSetup {
        let url = baseURL + "/api/find-my/overland"
        let settings: [Setting] = [
            Setting(label: "Receiver Endpoint", value: url),
            Setting(label: "Access Token", value: token, secret: true),
            Setting(label: "Device ID", value: deviceName),
        ]
        let link =
            "overland://setup?url=\(percentEncoded(url))&token=\(percentEncoded(token))&device_id=\(percentEncoded(deviceName))"
        return AppSetup(settings: settings, link: link)
    }

    /// GPSLogger's custom URL, in the OsmAnd protocol.
    private static func gpslogger(baseURL: String, token: String) -> AppSetup {
        let settings: [Setting] = [
            Setting(label: "Log to custom URL", value: "on"),
            Setting(
                label: "URL",
                value: baseURL + "/api/find-my/osmand?id=" + percentEncoded(token)
                    + "&lat=%LAT&lon=%LON&timestamp=%TIMESTAMP&altitude=%ALT&accuracy=%ACC&bearing=%DIR&speed_mps=%SPD&batt=%BATT&charge=%ISCHARGING&hdop=%HDOP",
                secret: true),
            Setting(label: "HTTP Method", value: "POST"),
            Setting(label: "HTTP Body", value: "(empty)"),
        ]
        let notes = [
            "%SPD is metres per second, so the URL sends it as speed_mps (the protocol's own speed is knots)."
        ]
        return AppSetup(settings: settings, notes: notes)
    }

    /// Traccar Client and OsmAnd, in the OsmAnd protocol.
    private static func traccar(baseURL: String, token: String) -> AppSetup {
        let settings: [Setting] = [
            Setting(label: "Server URL (Traccar Client)", value: baseURL + "/api/find-my/osmand"),
            Setting(label: "Device identifier (Traccar Client)", value: token, secret: true),
            Setting(
                label: "Web address (OsmAnd online tracking)",
                value: baseURL + "/api/find-my/osmand?id=" + percentEncoded(token)
                    + "&lat={0}&lon={1}&timestamp={2}&accuracy={3}&altitude={4}&speed_mps={5}&bearing={6}",
                secret: true),
        ]
        let notes = [
            "OsmAnd's default template sends its accuracy as hdop and its speed in m/s as knots; use the web address above instead."
        ]
        return AppSetup(settings: settings, notes: notes)
    }

    /// OwnTracks' `_type: configuration` for HTTP mode (`mode` 3), with Basic authentication: the
    /// keys both apps read (Android `preferences/Preferences.kt`, iOS `Settings.m`).
    static func owntracksConfiguration(url: String, userName: String, token: String, deviceName: String)
        -> [UInt8]
    {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("_type")
        writer.string("configuration")
        writer.key("mode")
        writer.int64(3)
        writer.key("url")
        writer.string(url)
        writer.key("auth")
        writer.bool(true)
        writer.key("username")
        writer.string(userName)
        writer.key("password")
        writer.string(token)
        writer.key("deviceId")
        writer.string(deviceName)
        writer.key("tid")
        writer.string(trackerID(deviceName))
        writer.endObject()
        return writer.bytes
    }

    /// OwnTracks' two-character tracker id, shown on the map: the first two letters or digits of
    /// the device name, upper case ("FM" for a name without any).
    static func trackerID(_ deviceName: String) -> String {
        let characters = deviceName.unicodeScalars.filter {
            ($0 >= "a" && $0 <= "z") || ($0 >= "A" && $0 <= "Z") || ($0 >= "0" && $0 <= "9")
        }
        guard characters.count >= 2 else { return "FM" }
        return String(String.UnicodeScalarView(characters.prefix(2))).uppercased()
    }
}
