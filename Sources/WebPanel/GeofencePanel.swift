import Geofences
import Identity
import JSON

// Geofences in the panel (docs/geofences.md, "In the panel"): the section that lists the reader's
// fences and the form that draws one, and the selected device's comings and goings. The server
// renders the structure (the devices a fence may name, the API's limits); panel.js fills the list
// from `GET /api/find-my/geofences`, draws the circles, and saves through the geofence API with the
// session's CSRF token, as the command buttons do. Without JavaScript the section says it needs it.

extension PanelPage {
    /// Transitions listed for a device without a history range chosen: the last week, like the
    /// "Last 7 days" link, and up to an hour ahead for a device clock a little fast.
    static let transitionsDefaultMicros: Int64 = 7 * 86_400_000_000
    static let transitionsAheadMicros: Int64 = 3_600_000_000

    func geofenceSection(_ html: inout HTML) {
        html.raw(
            """
            <section id="geofences" aria-labelledby="geofences-heading">
            <h2 id="geofences-heading">Geofences</h2>
            <p class="note">A geofence is a circle on the map: findmy tells when the devices it watches enter and leave it.</p>
            <ul id="geofence-list" aria-live="polite"><li>Loading…</li></ul>
            <p id="geofence-status" role="status" aria-live="polite"></p>
            <p><button type="button" id="new-geofence">New geofence</button></p>
            <form id="geofence-form" hidden novalidate>
            <h3 id="geofence-form-heading">New geofence</h3>
            <p id="geofence-hint">Click the map where the centre goes, or type its latitude and longitude.</p>
            <label for="geofence-name">Name</label>
            <input id="geofence-name" name="name" maxlength="512" autocomplete="off" placeholder="Home">
            <fieldset class="centre"><legend>Centre</legend>
            <label for="geofence-latitude">Latitude</label>
            <input id="geofence-latitude" name="latitude" type="number" step="any" min="-90" max="90">
            <label for="geofence-longitude">Longitude</label>
            <input id="geofence-longitude" name="longitude" type="number" step="any" min="-180" max="180">
            </fieldset>
            <label for="geofence-radius">Radius in metres (drag the handle on the circle's edge, or type it)</label>

            """)
        html.raw("<input id=\"geofence-radius\" name=\"radius_m\" type=\"number\" step=\"1\" min=\"")
        html.attribute(String(Int64(GeofenceLimits.radiusMetersMin)))
        html.raw("\" max=\"")
        html.attribute(String(Int64(GeofenceLimits.radiusMetersMax)))
        html.raw("\" value=\"150\">\n<fieldset id=\"geofence-devices\"><legend>Devices it watches</legend>\n")
        if devices.isEmpty { html.raw("<p>You have no devices yet.</p>\n") }
        for device in devices {
            html.raw("<label class=\"check\"><input type=\"checkbox\" name=\"device\" value=\"")
            html.attribute(String(device.id))
            html.raw("\"> ")
            html.text(device.name)
            html.raw("</label>\n")
        }
        html.raw(
            """
            </fieldset>
            <p id="geofence-dropped" class="note" hidden></p>
            <p id="geofence-error" class="error" role="alert" hidden></p>
            <p><button type="submit" id="geofence-save">Save</button>
            <button type="button" id="geofence-cancel">Cancel</button></p>
            </form>
            <noscript><p>Drawing and listing geofences needs JavaScript.</p></noscript>
            </section>

            """)
    }

    /// The device's enter and leave transitions, over the history range shown or the last week:
    /// the server's decisions, and the device's own reports marked as its view.
    func transitionsSection(_ html: inout HTML, _ device: PanelDevice, _ history: History?) {
        var from = nowMicros - Self.transitionsDefaultMicros
        var to = nowMicros + Self.transitionsAheadMicros
        if let history, !history.invalid {
            from = history.fromMicros
            to = history.toMicros
        }
        html.raw("<section id=\"transitions\" aria-labelledby=\"transitions-heading\" data-device=\"")
        html.attribute(String(device.id))
        html.raw("\" data-from=\"")
        html.attribute(RFC3339.formatMillis(RFC3339.clampedMicros(from)))
        html.raw("\" data-to=\"")
        html.attribute(RFC3339.formatMillis(RFC3339.clampedMicros(to)))
        html.raw("\">\n<h2 id=\"transitions-heading\">Comings and goings</h2>\n<p class=\"note\">From ")
        time(&html, from, relative: false)
        html.raw(" to ")
        time(&html, to, relative: false)
        html.raw(
            """
            . “Entered” and “left” are the server's decisions: a fix counts only when its whole accuracy circle is inside or outside the geofence. “The device says” is the device's own report (OwnTracks regions).</p>
            <ol id="transition-list" aria-label="Geofence transitions in this range"><li>Loading…</li></ol>
            <p><button type="button" id="transitions-more" hidden>Show more</button></p>
            <noscript><p>The transitions need JavaScript.</p></noscript>
            </section>

            """)
    }

    /// The island's `geofence_radius_m`: the API's range, which the drag handle keeps to.
    func writeGeofenceLimits(_ writer: inout JSONWriter) {
        writer.key("geofence_radius_m")
        writer.beginObject()
        writer.key("min")
        writer.int64(Int64(GeofenceLimits.radiusMetersMin))
        writer.key("max")
        writer.int64(Int64(GeofenceLimits.radiusMetersMax))
        writer.endObject()
        writer.key("same_time_seconds")
        writer.int64(Self.sameTimeMicros / 1_000_000)
    }
}
