import HTTP
import Identity

/// Builds an HTML document in which every value passes through `text` or `attribute`: there is no
/// way to add a string to the page unescaped except `raw`, which takes only literals of this module.
struct HTML {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 16_384) { bytes.reserveCapacity(capacity) }

    /// Markup written in this module's source, never a value from a request or the database.
    mutating func raw(_ markup: StaticString) {
        markup.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// A value as text content: `& < > " '` escaped.
    mutating func text(_ value: String) { Self.escape(value, into: &bytes) }
    /// A name someone chose, as text: escaped, and without the invisible and text-direction
    /// characters `NameRules` refuses today but a log written before it may hold.
    mutating func name(_ value: String) { text(NameRules.displayable(value)) }

    /// A value inside a double-quoted attribute (the same escaping, which covers both quotes).
    mutating func attribute(_ value: String) { Self.escape(value, into: &bytes) }

    static func escape(_ value: String, into bytes: inout [UInt8]) {
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "&"): bytes.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): bytes.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): bytes.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\""): bytes.append(contentsOf: "&quot;".utf8)
            case UInt8(ascii: "'"): bytes.append(contentsOf: "&#39;".utf8)
            default: bytes.append(byte)
            }
        }
    }

    static func escaped(_ value: String) -> String {
        var bytes: [UInt8] = []
        escape(value, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// JSON for a `<script type="application/json">` data island. `JSONWriter` escapes `<`, `>` and
    /// `&`, so the JSON cannot close the script element; the browser never executes it.
    mutating func jsonIsland(id: StaticString, _ json: [UInt8]) {
        raw("<script type=\"application/json\" id=\"")
        raw(id)
        raw("\">")
        precondition(!json.contains(UInt8(ascii: "<")), "JSONWriter escapes < in strings")
        bytes.append(contentsOf: json)
        raw("</script>\n")
    }
}

/// The headers of every panel page: a strict Content-Security-Policy (scripts and styles from this
/// server only, no inline code; images from here and the tile server; fetches to this server only),
/// no framing, no sniffing, no caching, no referrer leaking a device id to the tile server.
func pageResponse(_ html: HTML, status: Int = 200, tileSource: String) -> HTTPResponse {
    var response = HTTPResponse(status: status, body: html.bytes)
    response.headers.set("Content-Type", "text/html; charset=utf-8")
    let tiles = tileSource == "'none'" ? "" : " " + tileSource
    response.headers.set(
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:\(tiles); "
            + "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    response.headers.set("X-Content-Type-Options", "nosniff")
    response.headers.set("X-Frame-Options", "DENY")
    // same-origin, not no-referrer: a browser then sends the panel's real Origin on its own form
    // posts (no-referrer makes it send "null"), which the CSRF checks compare, while other sites,
    // the tile server among them, still learn nothing of the panel's addresses.
    response.headers.set("Referrer-Policy", "same-origin")
    response.headers.set("Cache-Control", "no-store")
    return response
}

/// The CSP source of a tile URL template: its scheme and host, with a `{s}` subdomain as `*`.
/// `https://{s}.tile.example.org/{z}/{x}/{y}.png` → `https://*.tile.example.org`.
func cspSource(tileURL: String) -> String {
    guard let schemeEnd = tileURL.firstRange(of: "://") else { return "'none'" }
    let scheme = tileURL[..<schemeEnd.lowerBound]
    guard scheme == "https" || scheme == "http" else { return "'none'" }
    let rest = tileURL[schemeEnd.upperBound...]
    let host = String(rest.prefix { $0 != "/" }).replacing("{s}", with: "*")
    guard !host.isEmpty, host.allSatisfy({ $0.isLetter || $0.isNumber || ".-:*_".contains($0) }) else {
        return "'none'"
    }
    return "\(scheme)://\(host)"
}
