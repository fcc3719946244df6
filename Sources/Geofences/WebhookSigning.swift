import Crypto

/// The webhooks' signatures (docs/geofences.md, "Checking a signature"). The log holds no secret: a
/// server key of 32 random bytes is made once in the data directory (`geofence-webhook.key`, mode
/// 0600), and each fence's secret is derived from it, so a fence's secret is stable across restarts
/// and replays, differs between fences, and is shown only to the fence's owner.
public struct WebhookSigning: Sendable {
    /// The header that carries `sha256=<hex>` of HMAC-SHA256(secret, body).
    public static let signatureHeader = "X-Findmy-Signature"
    public static let keyFileName = "geofence-webhook.key"
    static let keyBytes = 32

    let serverKey: [UInt8]

    public init(serverKey: [UInt8]) { self.serverKey = serverKey }

    /// The key of `dataDirectory`, made on first use.
    public static func load(dataDirectory: String) throws(KeyFileError) -> WebhookSigning {
        WebhookSigning(
            serverKey: try KeyFile.loadOrCreateRandom(dataDirectory + "/" + keyFileName, count: keyBytes))
    }

    /// Fence `geofenceID`'s secret, as hex text; its UTF-8 bytes are the HMAC key.
    public func secret(geofenceID: UInt64) -> String {
        Hex.encode(HKDF.hmacSHA256(key: serverKey, Array("findmy geofence webhook v1 \(geofenceID)".utf8)))
    }

    /// User `userID`'s secret for the webhook of its found notices (docs/found-notices.md): derived
    /// like a fence's, under another label, so it is no fence's secret.
    public func secret(userID: UInt64) -> String {
        Hex.encode(
            HKDF.hmacSHA256(key: serverKey, Array("findmy found notice webhook v1 user \(userID)".utf8)))
    }

    /// The signature header's value for `body` sent to user `userID`'s found-notice webhook.
    public func signature(userID: UInt64, body: [UInt8]) -> String {
        "sha256=" + Hex.encode(HKDF.hmacSHA256(key: Array(secret(userID: userID).utf8), body))
    }

    /// The signature header's value for `body` sent for fence `geofenceID`.
    public func signature(geofenceID: UInt64, body: [UInt8]) -> String {
        "sha256=" + Hex.encode(HKDF.hmacSHA256(key: Array(secret(geofenceID: geofenceID).utf8), body))
    }
}
