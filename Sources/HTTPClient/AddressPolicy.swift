#if canImport(Glibc)
    import Glibc
#endif

/// An IPv4 (4 bytes) or IPv6 (16 bytes) address, in network order.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// A literal as the system resolver reads one: IPv6 (brackets and a `%zone` allowed), or IPv4 in
    /// any spelling `inet_aton` takes (`127.1`, `2130706433`, `0x7f.0.0.1`), since those are what a
    /// URL's host turns into when it is connected to. nil for a name.
    public init?(literal: String) {
        var text = Substring(literal)
        if text.hasPrefix("[") && text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if let zone = text.firstIndex(of: "%") { text = text[..<zone] }
        if text.contains(":") {
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(text), &address) == 1 else { return nil }
            self.bytes = withUnsafeBytes(of: address) { Array($0) }
            return
        }
        // inet_aton stops at the first blank and accepts what came before it; a host has none.
        guard !text.isEmpty, !text.contains(where: { $0 == " " || $0 == "\t" || $0 == "\n" }) else {
            return nil
        }
        var address = in_addr()
        guard inet_aton(String(text), &address) != 0 else { return nil }
        self.bytes = withUnsafeBytes(of: address) { Array($0) }
    }

    /// The address of an `AF_INET` or `AF_INET6` socket address of `length` bytes; nil for another family.
    public init?(socketAddress: UnsafePointer<sockaddr>, length: Int) {
        switch Int32(socketAddress.pointee.sa_family) {
        case AF_INET where length >= MemoryLayout<sockaddr_in>.size:
            let address = UnsafeRawPointer(socketAddress).loadUnaligned(as: sockaddr_in.self)
            self.bytes = withUnsafeBytes(of: address.sin_addr) { Array($0) }
        case AF_INET6 where length >= MemoryLayout<sockaddr_in6>.size:
            let address = UnsafeRawPointer(socketAddress).loadUnaligned(as: sockaddr_in6.self)
            self.bytes = withUnsafeBytes(of: address.sin6_addr) { Array($0) }
        default:
            return nil
        }
    }

    public var isIPv4: Bool { bytes.count == 4 }

    public var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        bytes.withUnsafeBytes { raw in
            _ = inet_ntop(isIPv4 ? AF_INET : AF_INET6, raw.baseAddress, &text, socklen_t(text.count))
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The IPv4 address an IPv6 form carries and that a connection to it may reach: IPv4-mapped
    /// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4
    /// (`2002:AABB:CCDD::/16`). nil for any other address.
    public var embeddedIPv4: IPAddress? {
        guard bytes.count == 16 else { return nil }
        let zeroTen = bytes[0..<10].allSatisfy { $0 == 0 }
        if zeroTen && bytes[10] == 0xFF && bytes[11] == 0xFF {
            return IPAddress(bytes: Array(bytes[12..<16]))
        }
        if zeroTen && bytes[10] == 0 && bytes[11] == 0 { return IPAddress(bytes: Array(bytes[12..<16])) }
        if bytes[0..<12] == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0] {
            return IPAddress(bytes: Array(bytes[12..<16]))
        }
        if bytes[0] == 0x20 && bytes[1] == 0x02 { return IPAddress(bytes: Array(bytes[2..<6])) }
        return nil
    }
}

/// A block of addresses written as CIDR (`10.0.0.0/8`, `fd00::/8`), or one address.
public struct AddressRange: Sendable, Hashable, CustomStringConvertible {
    public let network: IPAddress
    public let prefixBits: Int

    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2 else { return nil }
        // Only the plain spellings here: an operator's list must mean what it looks like.
        let base = String(parts[0])
        var v4 = in_addr()
        var v6 = in6_addr()
        let address: IPAddress
        if inet_pton(AF_INET, base, &v4) == 1 {
            address = IPAddress(bytes: withUnsafeBytes(of: v4) { Array($0) })!
        } else if inet_pton(AF_INET6, base, &v6) == 1 {
            address = IPAddress(bytes: withUnsafeBytes(of: v6) { Array($0) })!
        } else {
            return nil
        }
        let bitsMax = address.bytes.count * 8
        var bits = bitsMax
        if parts.count == 2 {
            guard let prefix = Int(parts[1]), (0...bitsMax).contains(prefix) else { return nil }
            bits = prefix
        }
        self.init(address, prefixBits: bits)
    }

    /// The block of `prefixBits` leading bits of `address`; the host bits are cleared.
    public init(_ address: IPAddress, prefixBits: Int) {
        precondition((0...address.bytes.count * 8).contains(prefixBits), "prefix longer than the address")
        var bytes = address.bytes
        for index in bytes.indices {
            let keep = min(max(prefixBits - index * 8, 0), 8)
            bytes[index] &= keep == 0 ? 0 : UInt8(truncatingIfNeeded: 0xFF << (8 - keep))
        }
        self.network = IPAddress(bytes: bytes)!
        self.prefixBits = prefixBits
    }

    public func contains(_ address: IPAddress) -> Bool {
        guard address.bytes.count == network.bytes.count else { return false }
        return AddressRange(address, prefixBits: prefixBits).network == network
    }

    public var description: String { "\(network)/\(prefixBits)" }
}

/// Which addresses the server's own requests (webhooks, ntfy topics, UnifiedPush endpoints: URLs
/// its users give it) may connect to. A user must not be able to make the server reach what only
/// the server can reach (its own API, the database, a router's admin page, a cloud metadata
/// service) and read the answer back, so loopback, private, link-local, unique-local, shared
/// (CGNAT), unspecified, multicast and reserved addresses are refused, also in the IPv6 forms that
/// carry an IPv4 address, unless the operator allowed a block of them (`--allow-private-targets`,
/// for an ntfy server on the LAN).
///
/// The check is made on the address a connection is about to be opened to (after the name was
/// resolved, in the client's socket callback), so a name that resolves to a public address when a
/// URL is set and to 127.0.0.1 when it is used gains nothing, and odd spellings of an address mean
/// nothing either. `refusal(host:)` checks a URL's literal address early, for a clear 400.
public struct AddressPolicy: Sendable, Equatable {
    /// Blocks the operator allowed although they are not public.
    public var allowed: [AddressRange]

    public init(allowed: [AddressRange] = []) { self.allowed = allowed }

    /// A comma-separated list of CIDR blocks (`127.0.0.0/8,fd00::/8`); nil when an entry is not one.
    public static func parse(_ list: String) -> AddressPolicy? {
        var ranges: [AddressRange] = []
        for entry in list.split(separator: ",") {
            let trimmed = entry.filter { $0 != " " }
            guard !trimmed.isEmpty else { continue }
            guard let range = AddressRange(String(trimmed)) else { return nil }
            ranges.append(range)
        }
        return AddressPolicy(allowed: ranges)
    }

    /// Why a connection to `address` is refused (the kind of address: "loopback", "private", ...),
    /// or nil when it may be made.
    public func refusal(_ address: IPAddress) -> String? {
        guard let kind = Self.nonPublicKind(address) else { return nil }
        if allowed.contains(where: { $0.contains(address) }) { return nil }
        if let inner = address.embeddedIPv4, allowed.contains(where: { $0.contains(inner) }) { return nil }
        return kind
    }

    /// Why a URL whose host is `host` is refused before any connection: a literal address of a kind
    /// `refusal(_:)` refuses, or `localhost` (RFC 6761: always loopback). nil for any other name,
    /// which is checked when it is connected to.
    public func refusal(host: String) -> String? {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") {
            return refusal(IPAddress(bytes: [127, 0, 0, 1])!)
        }
        guard let address = IPAddress(literal: name) else { return nil }
        return refusal(address)
    }

    /// The host of an `http` or `https` URL, as written (no port, no user info, IPv6 brackets
    /// kept); nil when there is none.
    public static func host(ofURL url: String) -> String? {
        guard let colon = url.firstIndex(of: ":"), url[colon...].hasPrefix("://") else { return nil }
        var authority = url[url.index(colon, offsetBy: 3)...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            return String(authority[...close])
        }
        let host = authority.prefix { $0 != ":" }
        return host.isEmpty ? nil : String(host)
    }

    /// The kind of a non-public address, or nil for a public one.
    public static func nonPublicKind(_ address: IPAddress) -> String? {
        let b = address.bytes
        if address.isIPv4 {
            switch (b[0], b[1]) {
            case (0, _): return "unspecified"
            case (10, _), (172, 16...31), (192, 168): return "private"
            case (100, 64...127): return "shared (CGNAT)"
            case (127, _): return "loopback"
            case (169, 254): return "link-local"
            case (224...239, _): return "multicast"
            case (240...255, _): return "reserved"
            default: return nil
            }
        }
        if b.allSatisfy({ $0 == 0 }) { return "unspecified" }
        if b[0..<15].allSatisfy({ $0 == 0 }) && b[15] == 1 { return "loopback" }
        if let inner = address.embeddedIPv4 { return nonPublicKind(inner) }
        if b[0] & 0xFE == 0xFC { return "unique-local" }
        if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return "link-local" }
        if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return "site-local" }
        if b[0] == 0xFF { return "multicast" }
        // NAT64 for local use (RFC 8215) reaches whatever the local translator reaches.
        if b[0..<6] == [0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01] { return "private" }
        return nil
    }
}
