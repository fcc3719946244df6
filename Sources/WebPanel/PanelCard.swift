import JSON
import Tracks

// The panel as a find-my (docs/panel.md, "The map first"): the sheet that holds the list and the
// selected device's card over the map on a phone, the card's directions and its place for "notify
// when found", battery marks, and a history range as stays and moves with a time slider. The
// server renders all of it so that it reads without the script; panel-map.js makes the sheet
// draggable, draws the pins, the stays and the slider's marker.

extension PanelPage {
    /// How far the sheet is pulled up over the map on a phone. Without the script, or on a wide
    /// screen, it is only remembered: the list is a plain column.
    enum SheetState: String, Sendable {
        /// Only its bar: the map has the screen.
        case peek
        /// The default: the lower part of the screen.
        case half
        /// Most of the screen, the map's top still showing.
        case full
    }

    /// Battery under this is marked low on the list, the card and the pin.
    static let batteryLowPercent: Int64 = 15

    /// Opens the sheet and its bar: the drag grip and the button that toggles it by keyboard.
    func sheetStart(_ html: inout HTML) {
        html.raw("<div class=\"side sheet\" id=\"sheet\" data-state=\"")
        html.attribute(sheet.rawValue)
        html.raw(
            """
            " aria-label="Devices and details">
            <div class="sheet-bar"><span class="sheet-grip" aria-hidden="true"></span>
            <button type="button" id="sheet-toggle" aria-controls="sheet" aria-expanded="false" hidden>Expand the list</button></div>

            """)
    }

    /// "battery 5 % (low)", marked for the style sheet; the words carry the mark too, not only colour.
    func batteryMark(_ html: inout HTML, _ percent: Int64, charging: Bool?) {
        html.raw("<span class=\"battery")
        if percent < Self.batteryLowPercent { html.raw(" battery-low") }
        if charging == true { html.raw(" charging") }
        html.raw("\">")
        html.text(batteryText(percent, charging: charging, withLabel: true))
        html.raw("</span>")
    }

    func batteryText(_ percent: Int64, charging: Bool?, withLabel: Bool) -> String {
        var text = (withLabel ? "battery " : "") + "\(percent) %"
        if percent < Self.batteryLowPercent { text += " (low)" }
        if let charging { text += charging ? ", charging" : (withLabel ? "" : ", not charging") }
        return text
    }

    /// Directions to the latest fix: the phone's own maps app (`geo:`, RFC 5870) and OpenStreetMap's
    /// route planner in the browser. Neither link carries more than the position.
    func directions(_ html: inout HTML, _ fix: PanelFix) {
        let at = "\(Self.degrees(fix.latitude)),\(Self.degrees(fix.longitude))"
        html.raw("<p id=\"directions\">Directions: <a id=\"directions-geo\" href=\"geo:")
        html.attribute(at)
        html.raw(
            "\">in a maps app</a> · <a id=\"directions-osm\" rel=\"noreferrer\" href=\"https://www.openstreetmap.org/directions?to="
        )
        html.attribute(at.replacingComma())
        html.raw("\">OpenStreetMap</a></p>\n")
    }

    /// "Notify when found" (docs/found-notices.md), on the owner's card only (the notice goes to the
    /// owner's alert targets): a form for `POST /find-my/devices/{id}/notify-when-found` that arms it,
    /// or, while it is armed, says since when and turns it off. `#notify-state` carries the device and
    /// the state for the script, which follows the notice until it went off and fills
    /// `#notify-delivery` from the device's found-notice delivery log.
    func notifyWhenFound(_ html: inout HTML, _ device: PanelDevice) {
        let armed = foundNotice != nil
        html.raw("<form id=\"notify-form\" method=\"post\" action=\"/find-my/devices/")
        html.attribute(String(device.id))
        html.raw("/notify-when-found\">\n<input type=\"hidden\" name=\"csrf\" value=\"")
        html.attribute(csrf ?? "")
        html.raw("\">\n<input type=\"hidden\" name=\"armed\" value=\"")
        html.raw(armed ? "false" : "true")
        // The sheet's state, so that the answer's page keeps it (the script updates it with the URL).
        html.raw("\">\n<input type=\"hidden\" name=\"sheet\" value=\"")
        html.attribute(sheet.rawValue)
        html.raw("\">\n<p id=\"notify-state\" role=\"status\" data-device=\"")
        html.attribute(String(device.id))
        html.raw("\" data-armed=\"")
        html.raw(armed ? "true" : "false")
        html.raw("\">")
        if let notice = foundNotice {
            html.raw("<strong>Notify when found is on</strong>")
            if let micros = notice.armedAtMicros {
                html.text(" since ")
                time(&html, micros, relative: false)
            }
            html.text(": you will be told once, when this device reports again.")
            html.raw(
                "</p>\n<button type=\"submit\" id=\"notify-when-found\">Turn off notify when found</button>\n"
            )
        } else {
            html.raw(
                """
                Be told once, when this device reports again.</p>
                <button type="submit" id="notify-when-found">Notify when found</button>

                """)
        }
        html.raw("<p id=\"notify-delivery\" class=\"note\" aria-live=\"polite\"></p>\n</form>\n")
    }

    /// Degrees with at most six decimals (about 10 cm), never in exponent form (`1e-06` is no URL).
    static func degrees(_ value: Double) -> String {
        guard value.isFinite else { return "0" }
        let micro = Int64((abs(value) * 1_000_000).rounded())
        let whole = micro / 1_000_000
        var fraction = String(micro % 1_000_000)
        fraction = String(repeating: "0", count: 6 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        let sign = value < 0 && micro > 0 ? "-" : ""
        return sign + String(whole) + (fraction.isEmpty ? "" : "." + fraction)
    }

    /// The range as stays and moves, oldest first: the day as a person thinks of it. Each row is
    /// focusable; the script shows its place on the map and names a stay inside a geofence.
    func staysList(_ html: inout HTML, _ history: History) {
        html.raw("<h3 id=\"stays-heading\">Stays and trips</h3>\n")
        guard !history.segments.isEmpty else {
            html.raw(
                "<p id=\"stays-none\" class=\"note\">No stays or trips: too few usable fixes in this range.</p>\n"
            )
            return
        }
        html.raw("<ol id=\"stays\" aria-labelledby=\"stays-heading\">\n")
        for (index, segment) in history.segments.enumerated() {
            html.raw("<li tabindex=\"0\" data-segment=\"")
            html.attribute(String(index))
            switch segment {
            case .stay(let stay):
                html.raw("\" class=\"stay\"><strong>Stayed</strong> <span class=\"stay-place\"></span>")
                span(&html, stay.startMicros, stay.endMicros)
                html.text(" · within " + meters(stay.radiusMeters))
            case .move(let move):
                html.raw("\" class=\"move\"><strong>Moved</strong> ")
                span(&html, move.startMicros, move.endMicros)
                html.text(" · " + meters(move.distanceMeters))
                if move.hasGap { html.text(" · with a gap in reporting (the path there is unknown)") }
            }
            html.raw("</li>\n")
        }
        html.raw("</ol>\n")
    }

    /// "10:02 – 12:30 (2 h)": both ends as local times, and how long.
    func span(_ html: inout HTML, _ start: Int64, _ end: Int64) {
        time(&html, start, relative: false)
        html.raw(" – ")
        time(&html, end, relative: false)
        html.text(" (" + duration(max(end - start, 0)) + ")")
    }

    /// The slider that scrubs the track (the script shows it: it only moves a marker).
    func slider(_ html: inout HTML, _ history: History) {
        guard history.shown.count >= 2 else { return }
        html.raw(
            """
            <div id="scrub" hidden>
            <label for="track-slider">Where it was at <output id="scrub-time" for="track-slider"></output></label>
            <input type="range" id="track-slider" min="0" max="1000" value="1000" step="1">
            </div>

            """)
    }

    /// The island's `segments`: what the map draws of the stays (circles) and the moves' times.
    func writeSegments(_ writer: inout JSONWriter, _ segments: [DaySegment]) {
        writer.beginArray()
        for segment in segments {
            writer.beginObject()
            switch segment {
            case .stay(let stay):
                writer.key("type")
                writer.string("stay")
                writer.key("latitude")
                writer.finiteDouble(stay.latitude)
                writer.key("longitude")
                writer.finiteDouble(stay.longitude)
                writer.key("radius_m")
                writer.finiteDouble(stay.radiusMeters)
                writer.key("start")
                writer.string(stamp(stay.startMicros))
                writer.key("end")
                writer.string(stamp(stay.endMicros))
            case .move(let move):
                writer.key("type")
                writer.string("move")
                writer.key("start")
                writer.string(stamp(move.startMicros))
                writer.key("end")
                writer.string(stamp(move.endMicros))
            }
            writer.endObject()
        }
        writer.endArray()
    }

    /// What the pins need besides the fix: the platform's icon, whether the device is marked lost,
    /// and when it last reported against how long a silence makes its position "last known".
    func writePinFacts(_ writer: inout JSONWriter, _ device: PanelDevice) {
        writer.key("platform")
        writer.string(device.platform)
        writer.key("lost")
        writer.bool(lost.contains(device.id))
        writer.key("paused")
        writer.bool(device.paused)
        writer.key("last_heard")
        if let heard = device.lastSeenAtMicros ?? device.latest?.receivedAtMicros {
            writer.string(stamp(heard))
        } else {
            writer.null()
        }
        // The selected device is judged by its usual cadence, as its card is; the others by the
        // default, which needs no query per device.
        writer.key("stale_after_s")
        var cadence: Int64?
        if case .device(let selected, let usual, _) = selection, selected.id == device.id { cadence = usual }
        writer.int64(staleLimitMicros(cadenceMicros: cadence) / 1_000_000)
    }
}

extension String {
    /// "52.5,13.4" as a URL's query value: the comma percent-encoded, as OpenStreetMap writes it.
    fileprivate func replacingComma() -> String {
        split(separator: ",", omittingEmptySubsequences: false).joined(separator: "%2C")
    }
}
