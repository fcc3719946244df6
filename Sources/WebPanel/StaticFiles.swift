import HTTP
import Identity

#if canImport(Glibc)
    import Glibc
#endif

/// The panel's script and style sheet (in this binary) and Leaflet (from Debian's libjs-leaflet,
/// read once at start). Served by findmy itself: the browser asks no third party but the tile server.
///
/// The script is Resources/panel.js and the style sheet Resources/panel.css, plain files that SwiftPM
/// compiles into this module as `PackageResources.panel_js` and `.panel_css` (`.embedInCode` in
/// Package.swift): the executable carries them, with no resource bundle to install beside it, and
/// what it sends is the files' bytes as they were at the build.
///
/// panel.js is external because the CSP forbids inline script. It reads the page's JSON data island,
/// draws the map (each latest fix as a marker with its accuracy circle; the history track), shows
/// times in the viewer's time zone, and polls the read API for new positions; everything works
/// without it except the map and the live updates. `window.findmyPanel` exposes the map's layers (the
/// browser tests read them); `data-map-drawn-at` on `<html>` says when they were drawn (the browser
/// benchmark reads it). Its reads (`GET /api/find-my/devices`, commands, geofences, a device's
/// transitions) need only the session cookie. Its changes through `/api/` (commands, geofences)
/// send the session's CSRF token in an `X-CSRF-Token` header (the gate answers 403 without it,
/// docs/api.md); the other panel changes are plain form posts carrying it in their `csrf` field.
///
/// import.js is the settings page's "Import history" form (HistoryFilesPanel.swift): it posts the
/// chosen file as the body of `POST /api/find-my/devices/{id}/imports` with the `X-CSRF-Token` header,
/// as panel.js's changes do, and follows the import's status to its summary.
///
/// panel.css: one column on a phone, list beside the map from tablet width up; visible focus; the
/// map has a plain background when tiles cannot load.
struct StaticFiles: Sendable {
    /// Leaflet's files by served name; a name missing here (the package is not installed) is a 404,
    /// and the page then shows its list and details without a map.
    let leaflet: [String: [UInt8]]
    /// Leaflet, and the clustering of many markers from Debian's libjs-leaflet.markercluster, which
    /// installs beside it. Without that package the map draws every marker on its own.
    static let leafletFiles = [
        "leaflet.js", "leaflet.css", "leaflet.markercluster.js", "MarkerCluster.css",
        "MarkerCluster.Default.css",
    ]
    static let leafletImages = [
        "marker-icon.png", "marker-icon-2x.png", "marker-shadow.png", "layers.png", "layers-2x.png",
    ]
    /// A file larger than this is not read (Leaflet's largest is about 400 KB).
    static let fileBytesMax = 4 << 20

    init(leafletDirectory: String) {
        var files: [String: [UInt8]] = [:]
        for name in Self.leafletFiles + Self.leafletImages.map({ "images/" + $0 }) {
            if let bytes = Self.read(leafletDirectory + "/" + name) { files[name] = bytes }
        }
        leaflet = files
    }

    func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/static/panel.js") { _, _ in
            Self.file(PackageResources.panel_js, type: "text/javascript; charset=utf-8")
        }
        router.add("GET", "/static/import.js") { _, _ in
            Self.file(PackageResources.import_js, type: "text/javascript; charset=utf-8")
        }
        router.add("GET", "/static/panel.css") { _, _ in
            Self.file(PackageResources.panel_css, type: "text/css; charset=utf-8")
        }
        router.add("GET", "/static/panel-map.js") { _, _ in
            Self.file(PackageResources.panel_map_js, type: "text/javascript; charset=utf-8")
        }
        for name in Self.leafletFiles {
            let type = name.hasSuffix(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8"
            router.add("GET", "/static/leaflet/" + name) { [leaflet] _, _ in
                Self.file(leaflet[name], type: type)
            }
        }
        router.add("GET", "/static/leaflet/images/{file}") { [leaflet] request, _ in
            Self.file(leaflet["images/" + (request.pathParameters["file"] ?? "")], type: "image/png")
        }
    }

    static func file(_ bytes: [UInt8]?, type: String) -> HTTPResponse {
        guard let bytes else {
            return .text("not found (is Debian's libjs-leaflet installed?)", status: 404)
        }
        var response = HTTPResponse(status: 200, body: bytes)
        response.headers.set("Content-Type", type)
        response.headers.set("X-Content-Type-Options", "nosniff")
        response.headers.set("Cache-Control", "public, max-age=3600")
        return response
    }

    static func read(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > fileBytesMax { return nil }
        }
        return bytes.isEmpty ? nil : bytes
    }
}
