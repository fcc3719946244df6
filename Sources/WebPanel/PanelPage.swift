import Core
import Identity
import Ingest
import JSON

/// The `/find-my` page: the device list, the selected device's details and history, the map, and
/// the data island the map script reads. Rendering only; everything it shows was already filtered
/// to what the reader may see.
struct PanelPage {
    var userName: String
    var isAdmin = false
    var csrf: String?
    var devices: [PanelDevice]
    var selection: PanelService.Selection
    var nowMicros: Int64
    var configuration: PanelService.Configuration
    /// Devices marked lost (an open `lost` command).
    var lost: Set<UInt64> = []
    /// Devices the reader may send commands to: their own, and those shared with permission locate.
    var commandable: Set<UInt64> = []
    /// The tailnet's presence of linked devices (docs/presence.md), from the registry.
    var presence: [UInt64: PresenceView] = [:]
    /// The selected device's armed "notify when found", for its owner (from the registry).
    var foundNotice: Registry.FoundNotice?
    /// How far the sheet over the map is pulled up on a phone (`?sheet=`), kept in the URL.
    var sheet = SheetState.half

    /// Recorded and received times closer than this are shown as one time.
    static let sameTimeMicros: Int64 = 60_000_000
    /// A device is "not heard from" after this many usual cadences...
    static let cadencesBeforeStale: Int64 = 2
    /// ...but never before this long,
    static let staleMicrosMin: Int64 = 10 * 60_000_000
    /// and, with no cadence known, after this long.
    static let staleMicrosWithoutCadence: Int64 = 60 * 60_000_000
    /// Rows of the timeline list at most (the map draws the whole simplified track).
    static let timelineRowsMax = 300

    var selectedID: UInt64? {
        if case .device(let device, _, _) = selection { return device.id }
        return nil
    }

    func render() -> HTML {
        var html = HTML(capacity: 8_192 + devices.count * 600)
        var title = "Find My"
        if case .device(let device, _, _) = selection { title = device.name }
        if case .notFound = selection { title = "Device not found" }
        head(&html, title: title, map: true)
        html.raw(
            "<header class=\"top\">\n<h1><a href=\"/find-my\">findmy</a></h1>\n<nav class=\"links\" aria-label=\"Pages\"><a href=\"/find-my/account\">Account</a>"
        )
        if isAdmin { html.raw(" <a href=\"/find-my/admin\">Admin</a>") }
        html.raw("</nav>\n<p class=\"who\">Logged in as ")
        html.name(userName)
        html.raw("</p>\n")
        if let csrf {
            html.raw(
                "<form method=\"post\" action=\"/logout\" class=\"logout\">\n<input type=\"hidden\" name=\"csrf\" value=\""
            )
            html.attribute(csrf)
            html.raw("\">\n<button type=\"submit\">Log out</button>\n</form>\n")
        }
        html.raw("</header>\n<main id=\"main\">\n")
        // The map first: on a phone it fills the screen and the rest is a sheet over its lower part
        // (panel.css, panel-map.js); without the script the sheet is a plain section below the map.
        html.raw(
            """
            <section class="mapbox" aria-label="Map">
            <div id="map" role="region" aria-label="Map of the positions listed"></div>
            <p id="live-status" role="status" aria-live="polite">Live updates need JavaScript.</p>
            </section>

            """)
        sheetStart(&html)
        // A selected device's card comes first in the sheet, the list of the others after it.
        if selectedID == nil { deviceList(&html) }
        switch selection {
        case .none: break
        case .notFound:
            html.raw(
                "<section id=\"details\" aria-labelledby=\"details-heading\">\n<h2 id=\"details-heading\">Device not found</h2>\n<p>There is no device with this id among yours or those shared with you.</p>\n</section>\n"
            )
        case .device(let device, let cadence, let history):
            details(&html, device, cadenceMicros: cadence)
            historySection(&html, device, history)
            transitionsSection(&html, device, history)
            deviceList(&html)
        }
        geofenceSection(&html)
        html.raw("</div>\n</main>\n")
        html.jsonIsland(id: "findmy-data", island())
        html.raw("</body>\n</html>\n")
        return html
    }

    func deviceList(_ html: inout HTML) {
        html.raw("<nav aria-labelledby=\"devices-heading\">\n<h2 id=\"devices-heading\">Devices</h2>\n")
        guard !devices.isEmpty else {
            html.raw(
                "<p>No devices yet. <a id=\"add-device\" href=\"/find-my/devices/new\">Add a device</a> (or enrol one with the API, see docs/api.md).</p>\n</nav>\n"
            )
            return
        }
        html.raw("<ul id=\"device-list\">\n")
        for device in devices {
            html.raw("<li data-device-id=\"")
            html.attribute(String(device.id))
            html.raw("\"><a href=\"/find-my?selected=")
            html.attribute(String(device.id))
            html.raw("\"")
            if device.id == selectedID { html.raw(" aria-current=\"page\"") }
            html.raw(">")
            html.text(device.name)
            html.raw("</a>\n<span class=\"meta\">")
            if let fix = device.latest {
                html.raw("<span class=\"ago\" data-at=\"")
                html.attribute(stamp(fix.recordedAtMicros))
                html.raw("\">")
                html.text(relative(fix.recordedAtMicros))
                html.raw("</span>")
                if let battery = fix.batteryPercent {
                    html.raw(" · ")
                    batteryMark(&html, battery, charging: fix.isCharging)
                }
            } else {
                html.raw("no position yet")
            }
            if let view = presence[device.id] {
                html.raw(" · ")
                presenceState(&html, view)
            }
            if let owner = device.sharedBy {
                html.raw(" · shared by ")
                html.text(owner)
            }
            if lost.contains(device.id) { html.raw(" · <strong class=\"lost-mark\">marked lost</strong>") }
            html.raw("</span></li>\n")
        }
        html.raw(
            "</ul>\n<p><a id=\"add-device\" href=\"/find-my/devices/new\">Add a device</a></p>\n</nav>\n")
    }

    func details(_ html: inout HTML, _ device: PanelDevice, cadenceMicros: Int64?) {
        html.raw("<section id=\"details\" aria-labelledby=\"details-heading\">\n<h2 id=\"details-heading\">")
        html.text(device.name)
        html.raw("</h2>\n")
        if let notice = staleness(device, cadenceMicros: cadenceMicros) {
            html.raw("<p class=\"stale\" id=\"last-known\">")
            html.text(notice)
            html.raw("</p>\n")
        }
        html.raw("<dl>\n")
        row(
            &html, "Platform", device.model.isEmpty ? device.platform : "\(device.platform) (\(device.model))"
        )
        if let owner = device.sharedBy { row(&html, "Shared by", owner) }
        if let fix = device.latest {
            html.raw("<dt>Fix taken at</dt><dd id=\"fix-taken\">")
            time(&html, fix.recordedAtMicros)
            html.raw("</dd>\n")
            if abs(fix.receivedAtMicros - fix.recordedAtMicros) >= Self.sameTimeMicros {
                html.raw("<dt>Reported at</dt><dd id=\"reported\">")
                time(&html, fix.receivedAtMicros)
                html.raw("</dd>\n")
            }
            // Filled by the script when the fix lies inside one of the reader's geofences.
            html.raw(
                "<dt class=\"at-place\" hidden>Place</dt><dd id=\"at-place\" class=\"at-place\" hidden></dd>\n"
            )
            row(&html, "Accuracy", accuracyText(fix.accuracyMeters), id: "accuracy")
            html.raw("<dt>Battery</dt><dd id=\"battery\">")
            if let percent = fix.batteryPercent {
                html.raw("<span class=\"battery")
                if percent < Self.batteryLowPercent { html.raw(" battery-low") }
                if fix.isCharging == true { html.raw(" charging") }
                html.raw("\">")
                html.text(batteryText(percent, charging: fix.isCharging, withLabel: false))
                html.raw("</span>")
            } else {
                html.text(
                    fix.isCharging.map { "unknown, " + ($0 ? "charging" : "not charging") } ?? "unknown")
            }
            html.raw("</dd>\n")
            row(&html, "Source", fix.source, id: "source")
            if fix.clockSuspect {
                row(
                    &html, "Device clock",
                    "suspect: the fix claims a time later than its arrival; the device clock may be wrong",
                    id: "clock")
            }
        } else {
            row(&html, "Position", "none yet: the device has not reported a fix")
        }
        row(
            &html, "Reporting",
            device.paused ? "paused on the device: it sends nothing until resumed" : "on", id: "paused")
        presenceRows(&html, device)
        html.raw("</dl>\n")
        if let fix = device.latest { directions(&html, fix) }
        if device.sharedBy == nil {
            html.raw("<p><a id=\"settings-link\" href=\"/find-my/devices/")
            html.attribute(String(device.id))
            html.raw("/settings\">Sharing, retention and erasing</a></p>\n")
        }
        html.raw("</section>\n")
        if commandable.contains(device.id) { commandsSection(&html, device) }
    }

    /// Locate now, play a sound, mark as lost / found, the progress of the last one, and every
    /// command sent to the device and by whom: the script fills these in from the command API.
    func commandsSection(_ html: inout HTML, _ device: PanelDevice) {
        html.raw("<section id=\"commands\" aria-labelledby=\"commands-heading\" data-device=\"")
        html.attribute(String(device.id))
        html.raw("\">\n<h2 id=\"commands-heading\">Find it now</h2>\n")
        if lost.contains(device.id) {
            html.raw("<p class=\"lost-mark\" id=\"lost-state\">This device is marked as lost.</p>\n")
        }
        html.raw(
            """
            <p class="command-buttons"><button type="button" id="locate-now" data-kind="locate">Locate now</button>
            <button type="button" id="play-sound" data-kind="sound">Play sound</button>

            """)
        if lost.contains(device.id) {
            html.raw("<button type=\"button\" id=\"found\" data-kind=\"found\">Found</button>")
        }
        html.raw("</p>\n")
        if !lost.contains(device.id) {
            html.raw(
                """
                <form id="lost-form">
                <label>Message for the finder <input name="message" maxlength="200" placeholder="This phone is lost. Please call:"></label>
                <label>Phone <input name="phone" maxlength="40" type="tel"></label>
                <button type="submit" id="mark-lost" data-kind="lost">Mark as lost</button>
                </form>

                """)
        }
        if device.sharedBy == nil { notifyWhenFound(&html, device) }
        html.raw(
            """
            <p id="command-progress" role="status" aria-live="polite"></p>
            <noscript><p>Sending commands needs JavaScript.</p></noscript>
            <h3>Sent to this device</h3>
            <ul id="command-log"><li>Loading…</li></ul>
            </section>

            """)
    }

    /// The plain sentence for a device not heard from for longer than usual, or nil.
    func staleness(_ device: PanelDevice, cadenceMicros: Int64?) -> String? {
        guard let fix = device.latest else { return nil }
        let lastHeard = device.lastSeenAtMicros ?? fix.receivedAtMicros
        let silence = nowMicros - lastHeard
        guard silence > staleLimitMicros(cadenceMicros: cadenceMicros) || device.paused else { return nil }
        var text =
            "This is the last known position, taken \(utcText(fix.recordedAtMicros)) (\(relative(fix.recordedAtMicros))). "
        text += "The device has not reported since \(utcText(lastHeard)) (\(relative(lastHeard)))"
        if let cadenceMicros { text += "; it usually reports every \(duration(cadenceMicros))" }
        text += device.paused ? ", and its reporting is paused." : "."
        return text
    }

    /// How long a device may be silent before its position is "last known".
    func staleLimitMicros(cadenceMicros: Int64?) -> Int64 {
        cadenceMicros.map { max($0 * Self.cadencesBeforeStale, Self.staleMicrosMin) }
            ?? Self.staleMicrosWithoutCadence
    }

    func historySection(_ html: inout HTML, _ device: PanelDevice, _ history: History?) {
        html.raw(
            "<section id=\"history\" aria-labelledby=\"history-heading\">\n<h2 id=\"history-heading\">History</h2>\n"
        )
        html.raw("<ul class=\"ranges\">\n")
        let dayMicros: Int64 = 86_400_000_000
        let today = nowMicros - ((nowMicros % dayMicros) + dayMicros) % dayMicros
        for (label, kind, from, to) in [
            ("Today", "today", today, today + dayMicros),
            ("Yesterday", "yesterday", today - dayMicros, today),
            ("Last 7 days", "7d", nowMicros - 7 * dayMicros, nowMicros + 3_600_000_000),
        ] {
            html.raw("<li><a data-range=\"")
            html.attribute(kind)
            html.raw("\" data-device=\"")
            html.attribute(String(device.id))
            html.raw("\" href=\"")
            html.attribute(
                "/find-my?selected=\(device.id)&from=\(RFC3339.formatMillis(from))&to=\(RFC3339.formatMillis(to))"
            )
            html.raw("\">")
            html.text(label)
            html.raw("</a></li>\n")
        }
        html.raw("</ul>\n")
        guard let history else {
            html.raw("</section>\n")
            return
        }
        if history.invalid {
            html.raw(
                "<p class=\"error\" role=\"alert\">This range is not valid: from and to must be RFC 3339 times (2026-12-02T14:00:00Z), from before to.</p>\n</section>\n"
            )
            return
        }
        html.raw("<p id=\"range\">From ")
        time(&html, history.fromMicros, relative: false)
        html.raw(" to ")
        time(&html, history.toMicros, relative: false)
        html.raw(": ")
        html.text("\(history.fixCount) fix\(history.fixCount == 1 ? "" : "es")")
        if history.shown.count < history.fixCount {
            html.text(", \(history.shown.count) drawn (simplified; every stop kept)")
        }
        if history.truncated {
            html.text("; only the first \(history.fixCount) are loaded, choose a shorter range")
        }
        html.raw(".</p>\n")
        if history.fixCount > 0 { downloadLinks(&html, device, history) }
        guard !history.shown.isEmpty else {
            html.raw("</section>\n")
            return
        }
        slider(&html, history)
        staysList(&html, history)
        // The raw fixes, one click away: the stays above are how the range reads.
        html.raw("<details id=\"fixes\"><summary>Every fix drawn (")
        html.text(String(history.shown.count))
        html.raw(")</summary>\n<ol id=\"timeline\" aria-label=\"Fixes in this range\">\n")
        for (index, fix) in history.shown.prefix(Self.timelineRowsMax).enumerated() {
            html.raw("<li tabindex=\"0\" data-index=\"")
            html.attribute(String(index))
            html.raw("\">")
            time(&html, fix.recordedAtMicros, relative: false)
            html.text(" · " + accuracyText(fix.accuracyMeters))
            if let battery = fix.batteryPercent { html.text(" · battery \(battery) %") }
            html.raw("</li>\n")
        }
        html.raw("</ol>\n")
        if history.shown.count > Self.timelineRowsMax {
            html.text("The first \(Self.timelineRowsMax) of \(history.shown.count) points are listed.")
        }
        html.raw("</details>\n</section>\n")
    }

    typealias History = PanelService.History

    func row(_ html: inout HTML, _ label: StaticString, _ value: String, id: StaticString? = nil) {
        html.raw("<dt>")
        html.raw(label)
        html.raw("</dt><dd")
        if let id {
            html.raw(" id=\"")
            html.raw(id)
            html.raw("\"")
        }
        html.raw(">")
        html.text(value)
        html.raw("</dd>\n")
    }

    /// A time as `<time>`: UTC text the script turns into the viewer's time zone, and how long ago.
    func time(_ html: inout HTML, _ micros: Int64, relative showRelative: Bool = true) {
        html.raw("<time class=\"local\" datetime=\"")
        html.attribute(stamp(micros))
        html.raw("\">")
        html.text(utcText(micros))
        html.raw("</time>")
        if showRelative {
            html.raw(" (<span class=\"ago\" data-at=\"")
            html.attribute(stamp(micros))
            html.raw("\">")
            html.text(relative(micros))
            html.raw("</span>)")
        }
    }

    /// A stored time as RFC 3339 for attributes and the data island. PostgreSQL keeps years past
    /// 9999, which RFC 3339 text cannot say (formatting them traps): they are shown as 9999.
    func stamp(_ micros: Int64) -> String { RFC3339.formatMillis(RFC3339.clampedMicros(micros)) }

    func utcText(_ micros: Int64) -> String {
        let text = RFC3339.formatMicros(RFC3339.clampedMicros(micros))
        return String(text.prefix(10)) + " " + String(text.dropFirst(11).prefix(5)) + " UTC"
    }

    func relative(_ micros: Int64) -> String {
        // Clamped like the times shown beside it, which also keeps the subtraction from overflowing.
        let seconds = (nowMicros - RFC3339.clampedMicros(micros)) / 1_000_000
        if seconds < -60 { return "in the future: " + duration(-seconds * 1_000_000) + " ahead" }
        if seconds < 60 { return "just now" }
        return duration(seconds * 1_000_000) + " ago"
    }

    func duration(_ micros: Int64) -> String {
        let seconds = micros / 1_000_000
        if seconds < 90 { return "\(seconds) s" }
        if seconds < 90 * 60 { return "\((seconds + 30) / 60) min" }
        if seconds < 36 * 3600 { return "\((seconds + 1800) / 3600) h" }
        return "\((seconds + 43_200) / 86_400) days"
    }

    /// An accuracy radius as text. Ingest accepts (0, `accuracyMetersMax`], but a log written before
    /// that range existed can hold 1e308 or a negative number, and this runs on every view of the
    /// device: it must show them, never trap on them.
    func meters(_ value: Double) -> String {
        guard value > 0, let tenthsOfKilometres = Int64(saturating: value / 100) else { return "unknown" }
        if value > IngestLimits.accuracyMetersMax {
            return "more than " + meters(IngestLimits.accuracyMetersMax)
        }
        if value < 1000 { return "\(Int64(saturating: value.rounded()) ?? 0) m" }
        return "\(Double(tenthsOfKilometres) / 10) km"
    }

    /// "± 12 m", or "accuracy unknown" for a fix whose app sent none (stored NULL, read as 0).
    func accuracyText(_ value: Double) -> String {
        value > 0 ? "± " + meters(value) : "accuracy unknown"
    }

    /// What the map script needs; JSONWriter escapes `<`, `>` and `&` in every string.
    func island() -> [UInt8] {
        var writer = JSONWriter(capacity: 1024 + devices.count * 200)
        writer.beginObject()
        writer.key("now")
        writer.string(RFC3339.formatMillis(nowMicros))
        writer.key("poll_seconds")
        writer.int64(Int64(configuration.pollSeconds))
        writer.key("tile_url")
        writer.string(configuration.tileURL)
        writer.key("tile_attribution")
        writer.string(configuration.tileAttribution)
        writer.key("selected")
        if let selectedID { writer.int64(Int64(selectedID)) } else { writer.null() }
        // The session's CSRF token, which the command buttons' POST sends (X-CSRF-Token).
        writer.key("csrf")
        if let csrf { writer.string(csrf) } else { writer.null() }
        writeGeofenceLimits(&writer)
        writer.key("devices")
        writer.beginArray()
        for device in devices {
            writer.beginObject()
            writer.key("id")
            writer.int64(Int64(device.id))
            writer.key("name")
            writer.string(device.name)
            writePinFacts(&writer, device)
            writer.key("latest")
            if let fix = device.latest { writeFix(&writer, fix, battery: true) } else { writer.null() }
            writer.endObject()
        }
        writer.endArray()
        writer.key("track")
        if case .device(_, _, let history?) = selection {
            writer.beginArray()
            for fix in history.shown { writeFix(&writer, fix) }
            writer.endArray()
        } else {
            writer.null()
        }
        writer.key("segments")
        if case .device(_, _, let history?) = selection {
            writeSegments(&writer, history.segments)
        } else {
            writer.null()
        }
        writer.endObject()
        return writer.bytes
    }

    /// `battery`: with the battery facts (a device's latest fix; a track's points go without them).
    func writeFix(_ writer: inout JSONWriter, _ fix: PanelFix, battery: Bool = false) {
        writer.beginObject()
        writer.key("latitude")
        writer.finiteDouble(fix.latitude)
        writer.key("longitude")
        writer.finiteDouble(fix.longitude)
        writer.key("accuracy_m")
        // null: accuracy unknown; the map draws no circle and says so rather than a precise dot.
        if fix.accuracyMeters > 0 { writer.finiteDouble(fix.accuracyMeters) } else { writer.null() }
        writer.key("recorded_at")
        writer.string(stamp(fix.recordedAtMicros))
        if battery {
            writer.key("battery_pct")
            if let percent = fix.batteryPercent { writer.int64(percent) } else { writer.null() }
            writer.key("is_charging")
            if let charging = fix.isCharging { writer.bool(charging) } else { writer.null() }
        }
        writer.endObject()
    }
}
