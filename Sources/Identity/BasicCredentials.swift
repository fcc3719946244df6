import Crypto
import Synchronization

/// HTTP Basic credentials as an app sends them (OwnTracks: the findmy user name and the device
/// token as password): the user name, and the SHA-256 under which the registry keeps the token.
struct BasicCredentials: Sendable {
    let userName: String
    let tokenHash: [UInt8]
}

/// Basic headers already decoded, by a keyed digest of the exact header. An app sends the same
/// header with every request, and decoding it (base64, UTF-8, the split at `:`, the token's
/// SHA-256) cost as much as the rest of the gate. Only what the header's own bytes determine is
/// kept, never whether the token is valid: every request still looks the hash and the user name up
/// in the registry, so a token revoked by re-enrolling its device, or the token of a removed device,
/// is refused from the next request on, exactly as without the memo.
///
/// The header holds the device token in the clear, so the memo keys by `HeaderDigest`, never by
/// the header: what stays in memory is the token's SHA-256 (as in the registry) and 128 bits of
/// SipHash under this process's random seed, which nobody outside the process can compute or
/// aim a header at. At `entriesMax` headers the memo starts over, so it holds the phones that
/// reported lately.
final class BasicCredentialsMemo: Sendable {
    /// Headers kept at most: an entry is under 200 bytes, so the memo stays under 1 MB.
    static let entriesMax = 4_096
    private let entries = Mutex<[HeaderDigest: BasicCredentials]>([:])

    /// Two SipHash values of one header, each under the process's seed with its own prefix.
    struct HeaderDigest: Hashable {
        let first: Int
        let second: Int

        init(_ header: String) {
            var first = Hasher()
            first.combine(UInt8(1))
            first.combine(header)
            var second = Hasher()
            second.combine(UInt8(2))
            second.combine(header)
            self.first = first.finalize()
            self.second = second.finalize()
        }
    }

    /// The credentials of `header` (`Basic <base64>`): from the memo, or from `decode`, kept
    /// when it succeeds. `decode` hashes the token once per distinct header.
    func credentials(
        _ header: String, decode: (String) throws(APIError) -> BasicCredentials
    ) throws(APIError) -> BasicCredentials {
        let key = HeaderDigest(header)
        if let known = entries.withLock({ $0[key] }) { return known }
        let decoded = try decode(header)
        entries.withLock { entries in
            if entries.count >= Self.entriesMax { entries.removeAll(keepingCapacity: true) }
            entries[key] = decoded
        }
        return decoded
    }

    var count: Int { entries.withLock { $0.count } }
}

extension IdentityService {
    /// Whether an Authorization header is HTTP Basic: `Basic ` in any case and something after it.
    /// On the header's bytes: this runs on every OwnTracks request.
    static func isBasic(_ header: String) -> Bool {
        let bytes = header.utf8
        guard bytes.count > 6 else { return false }
        return zip(bytes.prefix(6), "basic ".utf8).allSatisfy { byte, lower in
            byte | (byte >= 0x41 && byte <= 0x5A ? 0x20 : 0) == lower
        }
    }

    /// A Basic header (`isBasic`) decoded: base64 of `user:password` (the device token), the token
    /// trimmed of spaces and hashed as the registry keeps it.
    static func decodeBasic(_ header: String) throws(APIError) -> BasicCredentials {
        guard let decoded = Base64.decode(header.dropFirst(6).trimmingSpaces),
            let text = String(validating: decoded, as: UTF8.self),
            let colon = text.firstIndex(of: ":")
        else {
            throw APIError(
                status: 401, code: .missingToken,
                message: "the Basic credentials are not base64 of 'user:password'")
        }
        let token = text[text.index(after: colon)...].trimmingSpaces
        return BasicCredentials(userName: String(text[..<colon]), tokenHash: SHA256.hash(Array(token.utf8)))
    }
}
