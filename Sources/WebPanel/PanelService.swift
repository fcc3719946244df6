import Core
import Crypto
import Events
import HTTP
import Identity
import Ingest
import JSON
import Postgres
import Presence
import Tracks

#if canImport(Glibc)
    import Glibc
#endif

/// The web panel (docs/panel.md): server-rendered pages over the same data as the read API.
/// `/find-my` lists the caller's devices beside a map; the selection and the history range are the
/// URL (`?selected=ID&from=&to=`), so every view can be bookmarked and the back button works.
/// Who sees which device is `IdentityService.visibleDevices` / `visibility`, as for the read API.
public final class PanelService: Sendable {
    public struct Configuration: Sendable {
        /// A Leaflet tile URL template.
        public var tileURL = "https://tile.openstreetmap.org/{z}/{x}/{y}.png"
        /// Shown on the map as text (never markup).
        public var tileAttribution = "© OpenStreetMap contributors"
        /// Where Debian's libjs-leaflet puts Leaflet.
        public var leafletDirectory = "/usr/share/javascript/leaflet"
        /// How often the page asks for new positions.
        public var pollSeconds = 5
        /// `findmy serve --mqtt-url`: the broker "Add a device" names for OwnTracks in MQTT mode
        /// (nil: the page says to ask the administrator for it).
        public var mqttURL: String?
        /// `findmy serve --mqtt-topic`: the topic filter whose two `+` levels are the user name and
        /// the device name.
        public var mqttTopicFilter = "owntracks/+/+"
        public init() {}
    }

    let ingest: IngestService
    /// Who the caller is, and what they may see and change (every page but retention and erasure).
    var identity: IdentityService { ingest.identity }
    /// nil on a server with `--projector off`: the pages then answer 503.
    let data: PanelData?
    let configuration: Configuration
    let tileSource: String
    let statics: StaticFiles
    let clockMicros: @Sendable () -> Int64
    /// Linking devices to tailnet nodes (`findmy serve --headscale-url`); nil without it.
    let presence: (any PresenceLinking)?

    public init(
        ingest: IngestService, pool: PostgresPool?, configuration: Configuration = Configuration(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros, presence: (any PresenceLinking)? = nil
    ) {
        self.ingest = ingest
        self.presence = presence
        data = pool.map { PanelData(pool: $0) }
        self.configuration = configuration
        tileSource = cspSource(tileURL: configuration.tileURL)
        statics = StaticFiles(leafletDirectory: configuration.leafletDirectory)
        self.clockMicros = clockMicros
    }

    /// The pages and forms, and the form side of `POST /login` and `POST /logout` (`LoginForms`).
    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/find-my") { [self] request, gate in findMy(request, gate) }
        let loginForms = LoginForms(identity: identity)
        identity.answerLoginForms(with: loginForms)
        router.add("GET", "/login") { request, _ in loginForms.loginPage(request) }
        addFormRoutes(to: &router)
        statics.addRoutes(to: &router)
    }

    // MARK: /find-my

    enum Selection {
        case none
        case notFound
        case device(PanelDevice, cadenceMicros: Int64?, history: History?)
    }

    struct History {
        var fromMicros: Int64
        var toMicros: Int64
        var fixCount: Int
        var truncated: Bool
        /// The simplified track: every fix for a short range.
        var shown: [PanelFix]
        var invalid: Bool
        /// The range as stays and the moves between them (`Tracks.summarizeStays`), from every fix
        /// loaded, not the simplified track.
        var segments: [DaySegment] = []
    }

    /// `gate`: the reader, whom the gate (`.page`) resolved.
    func findMy(_ request: HTTPRequest, _ gate: GateCaller) -> HTTPResponse {
        guard let data else { return unavailablePage() }
        let reader = gate.userID
        let now = clockMicros()
        do {
            let visible = identity.visibleDevices(to: reader)
            let devices = try data.devices(visible, userName: { [identity] in identity.userName($0) })
            var selection = Selection.none
            if let selected = request.query("selected") {
                selection = .notFound
                // Only a device the reader may see now is looked up at all: another user's id
                // gets the same page as an id that never existed.
                if let id = UInt64(selected), identity.visibility(of: id, to: reader) != nil,
                    let device = devices.first(where: { $0.id == id })
                {
                    let cadence = try data.usualCadenceMicros(deviceID: id)
                    let history = try history(request, deviceID: id, data: data, nowMicros: now)
                    selection = .device(device, cadenceMicros: cadence, history: history)
                }
            }
            var page = PanelPage(
                userName: identity.userName(reader) ?? "", isAdmin: identity.role(of: reader) == .admin,
                csrf: gate.sessionCSRFToken,
                devices: devices, selection: selection, nowMicros: now, configuration: configuration)
            page.sheet = PanelPage.SheetState(rawValue: request.query("sheet") ?? "") ?? .half
            // Commands (docs/commands.md): from the registry, ahead of the projection.
            page.lost = identity.lostDevices(devices.map(\.id))
            page.commandable = Set(devices.map(\.id).filter { identity.mayCommand($0, user: reader) })
            page.presence = identity.store.presence(of: devices.map(\.id), nowMicros: now)
            if case .device(let device, _, _) = selection, device.sharedBy == nil {
                page.foundNotice = identity.foundNotice(deviceID: device.id)
            }
            var status = 200
            if case .notFound = selection { status = 404 }
            return pageResponse(page.render(), status: status, tileSource: tileSource)
        } catch {
            StructuredLog.error("panel_read_failed", ["kind": .string("\(type(of: error))")])
            return messagePage(
                status: 503, title: "Database unavailable",
                message: "The database did not answer. Reload the page in a moment.")
        }
    }

    func history(_ request: HTTPRequest, deviceID: UInt64, data: PanelData, nowMicros: Int64) throws
        -> History?
    {
        let fromText = request.query("from")
        let toText = request.query("to")
        guard fromText != nil || toText != nil else { return nil }
        func parse(_ text: String?) -> Int64?? {
            guard let text else { return .some(nil) }
            guard let micros = try? RFC3339.parseMicros(text) else { return nil }
            return .some(micros)
        }
        guard let from = parse(fromText), let to = parse(toText) else {
            return History(
                fromMicros: 0, toMicros: 0, fixCount: 0, truncated: false, shown: [], invalid: true)
        }
        let fromMicros = from ?? (nowMicros - 86_400_000_000)
        let toMicros = to ?? (nowMicros + 3_600_000_000)
        guard fromMicros < toMicros else {
            return History(
                fromMicros: 0, toMicros: 0, fixCount: 0, truncated: false, shown: [], invalid: true)
        }
        let fixes = try data.history(deviceID: deviceID, fromMicros: fromMicros, toMicros: toMicros)
        let points = fixes.map {
            TrackPoint(
                latitude: $0.latitude, longitude: $0.longitude, accuracyMeters: $0.accuracyMeters,
                recordedAtMicros: $0.recordedAtMicros, clockSuspect: $0.clockSuspect)
        }
        let kept = TrackSimplifier().keep(points)
        // The same function as the read API's /stays over the fixes this page loaded: the list
        // works without the script and costs no second query.
        return History(
            fromMicros: fromMicros, toMicros: toMicros, fixCount: fixes.count,
            truncated: fixes.count == PanelData.historyFixesMax, shown: kept.map { fixes[$0] },
            invalid: false,
            segments: summarizeStays(points))
    }

    func unavailablePage() -> HTTPResponse {
        messagePage(
            status: 503, title: "The panel needs the database",
            message:
                "This server runs with --projector off, so it has no database to show positions from. Start it with --projector on."
        )
    }

    func messagePage(status: Int, title: String, message: String) -> HTTPResponse {
        var html = HTML()
        head(&html, title: title)
        html.raw("<main id=\"main\" class=\"login\">\n<h1>")
        html.text(title)
        html.raw("</h1>\n<p>")
        html.text(message)
        html.raw("</p>\n</main>\n</body>\n</html>\n")
        var response = pageResponse(html, status: status, tileSource: "'none'")
        if status == 503 { response.headers.set("Retry-After", "5") }
        return response
    }
}

/// The document head shared by every page; `title` is escaped, and cleaned like a name (it often
/// holds one). `script`: a page's own script from this server (`/static/...`), for a form page.
func head(_ html: inout HTML, title: String, map: Bool = false, script: StaticString? = nil) {
    html.raw(
        """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>
        """)
    html.name(title)
    html.raw(" · findmy</title>\n")
    if map {
        html.raw(
            """
            <link rel="stylesheet" href="/static/leaflet/leaflet.css">
            <link rel="stylesheet" href="/static/leaflet/MarkerCluster.css">
            <link rel="stylesheet" href="/static/leaflet/MarkerCluster.Default.css">

            """)
    }
    html.raw("<link rel=\"stylesheet\" href=\"/static/panel.css\">\n")
    if map {
        html.raw(
            """
            <script src="/static/leaflet/leaflet.js" defer></script>
            <script src="/static/leaflet/leaflet.markercluster.js" defer></script>
            <script src="/static/panel-map.js" defer></script>
            <script src="/static/panel.js" defer></script>

            """
        )
    }
    if let script {
        html.raw("<script src=\"")
        html.raw(script)
        html.raw("\" defer></script>\n")
    }
    html.raw("</head>\n<body>\n<a class=\"skip\" href=\"#main\">Skip to content</a>\n")
}
