import HTTP
import Ingest

#if canImport(Glibc)
    import Glibc
#endif

/// The panel's script and style sheet (in this binary) and Leaflet (from Debian's libjs-leaflet,
/// read once at start). Served by findmy itself: the browser asks no third party but the tile server.
struct StaticFiles: Sendable {
    /// Leaflet's files by served name; a name missing here (the package is not installed) is a 404,
    /// and the page then shows its list and details without a map.
    let leaflet: [String: [UInt8]]
    static let leafletImages = [
        "marker-icon.png", "marker-icon-2x.png", "marker-shadow.png", "layers.png", "layers-2x.png",
    ]
    /// A file larger than this is not read (Leaflet's largest is about 400 KB).
    static let fileBytesMax = 4 << 20

    init(leafletDirectory: String) {
        var files: [String: [UInt8]] = [:]
        for name in ["leaflet.js", "leaflet.css"] + Self.leafletImages.map({ "images/" + $0 }) {
            if let bytes = Self.read(leafletDirectory + "/" + name) { files[name] = bytes }
        }
        leaflet = files
    }

    func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/static/panel.js") { _ in
            Self.file(Array(panelScript.utf8), type: "text/javascript; charset=utf-8")
        }
        router.add("GET", "/static/panel.css") { _ in
            Self.file(Array(panelStyle.utf8), type: "text/css; charset=utf-8")
        }
        router.add("GET", "/static/leaflet/leaflet.js") { [leaflet] _ in
            Self.file(leaflet["leaflet.js"], type: "text/javascript; charset=utf-8")
        }
        router.add("GET", "/static/leaflet/leaflet.css") { [leaflet] _ in
            Self.file(leaflet["leaflet.css"], type: "text/css; charset=utf-8")
        }
        router.add("GET", "/static/leaflet/images/{file}") { [leaflet] request in
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
