import HTTP

/// A web origin, `scheme://host:port` (RFC 6454), as browsers send it in the `Origin` header:
/// lowercased, with the scheme's default port made explicit, so that `https://a.example` and
/// `https://A.example:443` compare equal. Only `http` and `https`.
struct WebOrigin: Equatable {
    var scheme: String
    var host: String
    var port: Int

    /// Parses `scheme://authority`, ignoring a path after the authority (so a `--public-url` with
    /// a trailing `/` is accepted); nil for anything else, or for an authority with user info.
    init?(_ text: String) {
        let lowered = text.lowercased()
        guard let colon = lowered.firstIndex(of: ":") else { return nil }
        let rest = lowered[lowered.index(after: colon)...]
        guard rest.hasPrefix("//") else { return nil }
        let authority = rest.dropFirst(2).prefix { $0 != "/" }
        self.init(scheme: String(lowered[..<colon]), authority: String(authority))
    }

    /// An origin from a scheme and a `host[:port]` (the form of a `Host` header).
    init?(scheme: String, authority: String) {
        guard scheme == "http" || scheme == "https", !authority.isEmpty, !authority.contains("@") else {
            return nil
        }
        let defaultPort = scheme == "https" ? 443 : 80
        var host = authority
        var port = defaultPort
        let hostEnd: String.Index
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            hostEnd = authority.index(after: close)
        } else {
            hostEnd = authority.firstIndex(of: ":") ?? authority.endIndex
        }
        if hostEnd < authority.endIndex {
            guard authority[hostEnd] == ":", let number = Int(authority[authority.index(after: hostEnd)...]),
                (1...65_535).contains(number)
            else { return nil }
            port = number
        }
        host = String(authority[..<hostEnd])
        guard !host.isEmpty else { return nil }
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
    }
}

enum OriginVerdict: Equatable {
    /// No `Origin` header, or `Origin: null`.
    case absent
    case own
    case foreign(String)
}

extension IdentityService {
    /// Whether the request's `Origin` is this server's own. Own: the origin of `--public-url`, or
    /// the request's `Host` (a browser sets `Host` to the server it connects to; no page of another
    /// site can change it), with `https` when a TLS proxy says so (`X-Forwarded-Proto: https`).
    ///
    /// `Origin: null` counts as absent: browsers send it on a form post from a page whose
    /// Referrer-Policy is `no-referrer` (the panel's was, before `same-origin`; a page cached from
    /// then may still post), and also from sandboxed frames, so it says nothing either way; the
    /// CSRF token still has to match.
    func originVerdict(_ request: HTTPRequest) -> OriginVerdict {
        let values = request.headers.values("Origin")
        guard let text = values.first, text != "null" else { return .absent }
        guard values.count == 1, let origin = WebOrigin(text) else { return .foreign(text) }
        if let configured = limits.publicURL, WebOrigin(configured) == origin { return .own }
        let overTLS = request.headers["X-Forwarded-Proto"]?.lowercased() == "https"
        if let host = request.headers["Host"], WebOrigin(scheme: origin.scheme, authority: host) == origin,
            !overTLS || origin.scheme == "https"
        {
            return .own
        }
        return .foreign(text)
    }
}

/// The media type of the request's body, lowercased, without parameters (`; charset=utf-8`).
func mediaType(_ request: HTTPRequest) -> String {
    let value = request.headers["Content-Type"] ?? ""
    return (value.split(separator: ";", maxSplits: 1).first.map { Substring($0).trimmingSpaces } ?? "")
        .lowercased()
}

extension IdentityLimits {
    /// Whether `url` can be `publicURL`: `http` or `https`, a host, an optional port and path.
    public static func isPublicURL(_ url: String) -> Bool { WebOrigin(url) != nil }
}
