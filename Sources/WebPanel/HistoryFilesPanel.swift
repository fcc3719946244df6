import JSON

/// History in files (docs/import-export.md): the device page's "Download" links for the range
/// shown, and the settings page's "Import history" form. The download is the read API's export
/// route (`GET /api/find-my/devices/{id}/export`), which the session cookie authenticates like the
/// page's own reads; the import is Resources/import.js posting the chosen file to
/// `POST /api/find-my/devices/{id}/imports` with the session's CSRF token, then following
/// `GET .../imports/{import_id}` to the summary.
extension PanelPage {
    static let exportFormats: [(label: StaticString, format: String)] = [
        ("GPX", "gpx"), ("GeoJSON", "geojson"), ("CSV", "csv"),
    ]

    /// The range shown, as a file in each format. Only for a valid range: the links say exactly
    /// which fixes the file holds (every one, not the simplified track the map draws).
    func downloadLinks(_ html: inout HTML, _ device: PanelDevice, _ history: History) {
        html.raw("<p id=\"download\">Download this range (every fix, both clocks):")
        for (label, format) in Self.exportFormats {
            html.raw(" <a download data-format=\"")
            html.attribute(format)
            html.raw("\" href=\"")
            html.attribute(
                "/api/find-my/devices/\(device.id)/export?format=\(format)"
                    + "&from=\(RFC3339.formatMicros(RFC3339.clampedMicros(history.fromMicros)))"
                    + "&to=\(RFC3339.formatMicros(RFC3339.clampedMicros(history.toMicros)))")
            html.raw("\">")
            html.raw(label)
            html.raw("</a>")
        }
        html.raw("</p>\n")
    }
}

extension PanelService {
    /// The owner's form to import a file into this device. Works only with JavaScript (the file is
    /// the request's body, not a form post); without it the page says what to use instead.
    func importSection(_ html: inout HTML, _ caller: Caller, _ form: FormDevice) {
        let (_, effective) = ingest.retentionDays(deviceID: form.device.id)
        html.raw(
            """
            <section id="import" aria-labelledby="import-heading">
            <h3 id="import-heading">Import history</h3>
            <p class="note">A file from another tracker or from Google: GPX, KML or KMZ, GeoJSON, CSV, an OwnTracks Recorder <code>.rec</code> file, Google Takeout's <code>.zip</code> or its JSON files, or Timeline's export from the phone. Each fix keeps the time the file gives it and is received today. Importing the same file again stores nothing twice.</p>
            <form id="import-form" data-device="
            """)
        html.attribute(String(form.device.id))
        html.raw("\" data-csrf=\"")
        html.attribute(caller.csrf ?? "")
        html.raw("\" data-retention-days=\"")
        html.attribute(String(effective))
        html.raw(
            """
            ">
            <label for="import-file">File</label>
            <input id="import-file" name="file" type="file" required>
            <p class="command-buttons"><button type="button" id="import-check">Check first</button>
            <button type="submit" id="import-start">Import</button></p>
            </form>
            <p id="import-progress" role="status" aria-live="polite"></p>
            <div id="import-summary" aria-live="polite"></div>
            <noscript><p>Importing from the panel needs JavaScript. On the server, <code>findmy import</code> does the same.</p></noscript>
            <p class="note" id="import-window">
            """)
        html.text(
            "Fixes older than this device's retention window (\(effective) day\(effective == 1 ? "" : "s")) "
                + "are not stored. “Check first” reads the file and stores nothing: it says how many fall "
                + "outside the window, and how far to widen it above.")
        html.raw("</p>\n</section>\n")
    }
}
