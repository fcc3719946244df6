import Core
import Crypto
import Events
import HTTP
import Identity
import Ingest
import QRCode

/// "Add a device" (docs/panel.md): the person names the device and picks the app it reports with;
/// the server enrols it through the path of `POST /api/find-my/devices` (`IngestService.enrolDevice`)
/// and answers, once, with the device token and the settings to type into that app, and the app's
/// setup link as a QR code drawn here from `QRCode`'s matrix.
///
/// Shown once: the form carries a device UUID drawn when the form was served, so a second post of
/// the same form (a reload of the answer, a double click) finds the device added already and
/// answers without a token, instead of adding a second device or issuing a new token.
extension PanelService {
    static let addDevicePath = "/find-my/devices/new"

    func addDeviceRoutes(to router: inout GuardedRouter) {
        router.add("GET", Self.addDevicePath) { [self] request, gate in
            withCaller(gate) { addDevicePage(request, $0) }
        }
        router.add("POST", Self.addDevicePath) { [self] request, gate in
            withForm(request, gate) { addDevice(request, $0, $1) }
        }
    }

    static let addDeviceErrors: [String: String] = [
        "invalid_name":
            "The name is empty, too long, or has a character names may not have (control characters, invisible or text-direction characters).",
        "invalid_app": "Pick the app the device will report with.",
        "invalid_topic_name":
            "For OwnTracks in MQTT mode the name becomes a level of the broker topic: it may not be empty or hold '/', '+' or '#'.",
        "failed": "The device could not be stored. Nothing changed; try again.",
    ]

    func addDevicePage(_ request: HTTPRequest, _ caller: Caller) -> HTTPResponse {
        var html = HTML()
        pageTop(&html, title: "Add a device", caller: caller)
        html.raw("<h2>Add a device</h2>\n")
        flash(&html, request, done: [:], errors: Self.addDeviceErrors)
        html.raw(
            "<p>Name the device and pick the app it will report with. The next page shows the settings to type into the app, with its device token, once.</p>\n"
        )
        formStart(&html, action: Self.addDevicePath, caller: caller)
        html.raw("<input type=\"hidden\" name=\"device_uuid\" value=\"")
        html.attribute(UUID128.random().description)
        html.raw(
            """
            ">
            <label for="device-name">Name</label>
            <input id="device-name" name="name" required autocomplete="off" placeholder="Alex's phone">
            <fieldset>
            <legend>App</legend>

            """)
        for (index, app) in SetupApp.allCases.enumerated() {
            html.raw("<label class=\"inline\"><input type=\"radio\" name=\"app\" required value=\"")
            html.attribute(app.rawValue)
            html.raw("\"")
            if index == 1 { html.raw(" checked") }
            html.raw("> ")
            html.text(app.title)
            html.raw("</label>\n")
        }
        html.raw("</fieldset>\n<button type=\"submit\">Add the device</button>\n</form>\n")
        pageBottom(&html)
        return pageResponse(html, tileSource: "'none'")
    }

    func addDevice(_ request: HTTPRequest, _ caller: Caller, _ fields: [String: String]) -> HTTPResponse {
        func back(_ code: String) -> HTTPResponse { redirect(Self.addDevicePath + "?error=" + code) }
        guard let app = fields["app"].flatMap(SetupApp.init(rawValue:)) else { return back("invalid_app") }
        // A form without its UUID was not served by this page: start again with a fresh one.
        guard var uuid = fields["device_uuid"].flatMap({ UUID128($0) }) else { return back("failed") }
        let name = fields["name"] ?? ""
        var topic: String?
        if app == .owntracksMQTT {
            // The device of a topic has the topic's UUID, so that its first message finds this one.
            guard
                let deviceTopic = IngestService.topic(
                    filter: configuration.mqttTopicFilter, userName: caller.name, deviceName: name)
            else { return back("invalid_topic_name") }
            uuid = IngestService.deviceUUID(topic: deviceTopic)
            topic = deviceTopic
        }
        if let existing = identity.registrySnapshot.device(userID: caller.userID, uuid: uuid) {
            return addedAlreadyPage(caller, existing)
        }
        let enrolled: IngestService.EnrolledDevice
        do throws(APIError) {
            enrolled = try ingest.enrolDevice(
                userID: caller.userID, uuid: uuid, name: name, platform: app.platform, model: "")
        } catch {
            return back(error.code == .invalidField ? "invalid_name" : "failed")
        }
        let setup = AppSetup(
            app: app, baseURL: baseURL(request), userName: caller.name, deviceName: name,
            token: enrolled.token, broker: configuration.mqttURL.flatMap { MQTTBroker(url: $0) },
            topic: topic,
            device: (enrolled.deviceID, uuid.description))
        return setupPage(caller, app: app, deviceName: name, setup: setup)
    }

    /// How a phone reaches this server: `--public-url`, or the address this browser used (its
    /// `Host`, over https when a TLS proxy says so).
    func baseURL(_ request: HTTPRequest) -> String {
        if let configured = identity.limits.publicURL {
            return configured.hasSuffix("/") ? String(configured.dropLast()) : configured
        }
        let overTLS = request.headers["X-Forwarded-Proto"]?.lowercased() == "https"
        return (overTLS ? "https://" : "http://") + (request.headers["Host"] ?? "localhost")
    }

    func setupPage(_ caller: Caller, app: SetupApp, deviceName: String, setup: AppSetup) -> HTTPResponse {
        var html = HTML()
        pageTop(&html, title: "Set up " + deviceName, caller: caller)
        html.raw("<h2>Set up <q>")
        html.name(deviceName)
        html.raw("</q> in ")
        html.text(app.title)
        html.raw(
            "</h2>\n<p class=\"flash\" role=\"status\" id=\"added\">The device is added. Its token is on this page only, once: only its hash is kept. Type the settings into the app now (or scan the code). Lost it? Add the device again; the old one can be removed in its settings.</p>\n<dl id=\"settings\">\n"
        )
        for setting in setup.settings {
            html.raw("<dt>")
            html.text(setting.label)
            html.raw(setting.secret ? "</dt><dd><code class=\"secret\">" : "</dt><dd><code>")
            html.text(setting.value)
            html.raw("</code></dd>\n")
        }
        html.raw("</dl>\n")
        if let link = setup.link {
            html.raw("<figure id=\"setup-link\">\n")
            if let code = try? QRCode(encoding: link) {
                qrSVG(code, into: &html)
            }
            html.raw(
                "<figcaption>Scan this with the phone's camera, or open the link on the phone: <a href=\"")
            html.attribute(link)
            html.raw("\">set up the app</a>.</figcaption>\n</figure>\n")
        }
        for note in setup.notes {
            html.raw("<p class=\"note\">")
            html.text(note)
            html.raw("</p>\n")
        }
        html.raw("<p><a href=\"/find-my\">Back to your devices</a></p>\n")
        pageBottom(&html)
        return pageResponse(html, status: 201, tileSource: "'none'")
    }

    func addedAlreadyPage(_ caller: Caller, _ device: Registry.Device) -> HTTPResponse {
        var html = HTML()
        pageTop(&html, title: "Added already", caller: caller)
        html.raw("<h2>This device is added already</h2>\n<p><q>")
        html.name(device.name)
        html.raw(
            "</q> was added by this form before. Its token was shown once, then; it is not shown again. If it was not copied, <a href=\"/find-my/devices/new\">add the device again</a> and remove this one in its <a href=\"/find-my/devices/"
        )
        html.text(String(device.id))
        html.raw("/settings\">settings</a>.</p>\n")
        pageBottom(&html)
        return pageResponse(html, status: 409, tileSource: "'none'")
    }
}

/// The QR code as inline SVG: one path of dark runs per row, inside the quiet zone of four
/// modules the standard asks for, dark on white whatever the page's colours.
func qrSVG(_ code: QRCode, into html: inout HTML) {
    let quietModules = 4
    let side = code.size + 2 * quietModules
    var path = ""
    for y in 0..<code.size {
        var x = 0
        while x < code.size {
            guard code[x, y] else {
                x += 1
                continue
            }
            let start = x
            while x < code.size, code[x, y] { x += 1 }
            path += "M\(start + quietModules) \(y + quietModules)h\(x - start)v1h-\(x - start)z"
        }
    }
    html.raw("<svg class=\"qr\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ")
    html.text("\(side) \(side)")
    html.raw(
        "\" role=\"img\" aria-label=\"QR code of the setup link\" shape-rendering=\"crispEdges\" data-version=\""
    )
    html.text(String(code.version))
    html.raw("\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n<path fill=\"#000\" d=\"")
    html.attribute(path)
    html.raw("\"/>\n</svg>\n")
}
