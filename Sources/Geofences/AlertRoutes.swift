import Events
import HTTP
import HTTPClient
import Identity
import JSON
import Postgres

/// The notification settings of a fence and its delivery log (docs/api.md, docs/geofences.md):
/// `GET`/`PUT /api/find-my/geofences/{id}/notifications` and `GET .../deliveries`. The fence's owner
/// alone; anyone else gets the 404 of a missing fence. The answer carries the fence's webhook secret,
/// which the log never holds (it is derived from the server key, `WebhookSigning`). The same log
/// for a device's found notices (docs/found-notices.md): `GET
/// /api/find-my/devices/{id}/found-notices/deliveries`, the device's owner alone (the gate's `.owner`).
public struct GeofenceAlertRoutes: Sendable {
    let identity: IdentityService
    let signing: WebhookSigning
    /// The projection's pool, for the delivery log; nil with `--projector off`.
    let pool: PostgresPool?
    /// Where a notification URL may point (`--allow-private-targets`).
    let outgoingTargets: AddressPolicy
    /// Rows of one answer of the delivery log.
    public static let deliveriesPerPageMax = 100

    public init(
        identity: IdentityService, signing: WebhookSigning, pool: PostgresPool?,
        outgoingTargets: AddressPolicy
    ) {
        self.identity = identity
        self.signing = signing
        self.pool = pool
        self.outgoingTargets = outgoingTargets
    }

    /// The account settings' rules for a user's alert targets (found notices): the same URL checks
    /// and server key as the fences'.
    public var alertTargetRules: AlertTargetRules {
        IdentityService.alertTargetRules(policy: outgoingTargets, signing: signing)
    }

    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/api/find-my/geofences/{id}/notifications") { [self] request, caller in
            respond { () throws(APIError) in
                let fence = try identity.ownedGeofence(request, caller)
                return .json(settingsAnswer(fence.geofenceID, offset: nil))
            }
        }
        router.add("PUT", "/api/find-my/geofences/{id}/notifications") { [self] request, caller in
            respond { () throws(APIError) in
                let fence = try identity.ownedGeofence(request, caller)
                let object = try parseObject(request.body, allowed: ["webhook_url", "ntfy_url"])
                let webhook = try field { () throws(JSONAccessError) in
                    try object.stringIfPresent("webhook_url")
                }
                let ntfy = try field { () throws(JSONAccessError) in try object.stringIfPresent("ntfy_url") }
                let offset = try identity.setGeofenceNotifications(
                    fence.geofenceID, owner: caller.userID, webhookURL: webhook ?? "", ntfyURL: ntfy ?? "",
                    outgoingTargets: outgoingTargets)
                return .json(settingsAnswer(fence.geofenceID, offset: offset))
            }
        }
        router.add("GET", "/api/find-my/geofences/{id}/deliveries") { [self] request, caller in
            respond { () throws(APIError) in
                let fence = try identity.ownedGeofence(request, caller)
                return .json(try deliveries(fence.geofenceID, devices: identity.visibleDevices(of: fence)))
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/found-notices/deliveries") { [self] _, caller in
            respond { () throws(APIError) in
                .json(try deliveries(AlertTables.foundNoticeGeofenceID, devices: [caller.deviceID]))
            }
        }
    }

    func settingsAnswer(_ geofenceID: UInt64, offset: UInt64?) -> [UInt8] {
        let settings = identity.geofenceNotifications(geofenceID)
        var w = JSONWriter(capacity: 256)
        w.beginObject()
        w.key("geofence_id")
        w.int64(Int64(bitPattern: geofenceID))
        w.key("webhook_url")
        if let url = settings?.webhookURL, !url.isEmpty { w.string(url) } else { w.null() }
        w.key("ntfy_url")
        if let url = settings?.ntfyURL, !url.isEmpty { w.string(url) } else { w.null() }
        w.key("webhook_secret")
        w.string(signing.secret(geofenceID: geofenceID))
        w.key("signature_header")
        w.string(WebhookSigning.signatureHeader)
        if let offset {
            w.key("offset")
            w.int64(Int64(offset))
        }
        w.endObject()
        return w.bytes
    }

    /// A delivery's `last_error` as its owner is shown it. Versions before the notifier kept only the
    /// status wrote "answered 500: " and the start of the receiver's body; rows of theirs still in
    /// the table are shown as the status alone, since that body may be an internal service's words.
    public static func shownError(_ stored: String) -> String {
        let prefix = "answered "
        guard stored.hasPrefix(prefix) else { return stored }
        let status = stored.dropFirst(prefix.count).prefix { $0.isASCII && $0.isNumber }
        return status.isEmpty ? stored : prefix + status
    }

    static let databaseUnavailable = APIError(
        status: 503, code: .databaseUnavailable,
        message: "the database did not answer; retry shortly (the server log has the cause)")

    /// The fence's newest deliveries of `devices`, newest first: a device its owner can no longer
    /// see (a share ended) has none, sent or not, as in the fence's transitions. With
    /// `AlertTables.foundNoticeGeofenceID`, the found notices' deliveries of `devices` (the caller's own device).
    func deliveries(_ geofenceID: UInt64, devices: [UInt64]) throws(APIError) -> [UInt8] {
        guard let pool else {
            throw APIError(
                status: 503, code: .readsUnavailable,
                message: "this server runs without a database (--projector off), so it keeps no delivery log")
        }
        do {
            return try pool.withConnection { connection in
                let rows = try connection.execute(
                    """
                    SELECT id, transition_id, device_id, event, recorded_at_micros, channel, url, idempotency_key,
                        state, attempts, last_status, last_error, next_attempt_micros, created_micros, finished_micros
                    FROM \(AlertTables.deliveries) WHERE geofence_id = $1 AND device_id = ANY($3::bigint[])
                    ORDER BY id DESC LIMIT $2
                    """,
                    [
                        .int64(Int64(bitPattern: geofenceID)), .int64(Int64(Self.deliveriesPerPageMax)),
                        .array(PostgresArray(.bigint, devices.map { .int64(Int64(bitPattern: $0)) })),
                    ])
                var w = JSONWriter(capacity: 512)
                w.beginObject()
                w.key("deliveries")
                w.beginArray()
                for i in 0..<rows.rowCount { try Self.writeDelivery(rows, i, to: &w) }
                w.endArray()
                w.endObject()
                return w.bytes
            }
        } catch let error as APIError {
            throw error
        } catch {
            // A table not made yet (the notifier has not started): no deliveries, said as an empty log.
            if case let postgres as PostgresError = error, "\(postgres)".contains("does not exist") {
                return Array(#"{"deliveries":[]}"#.utf8)
            }
            StructuredLog.error("geofence_deliveries_read_failed", ["error": .string("\(error)")])
            throw Self.databaseUnavailable
        }
    }

    /// Row `i` of the deliveries query: the next attempt only while the delivery is pending.
    private static func writeDelivery(_ rows: PostgresResult, _ i: Int, to w: inout JSONWriter) throws {
        w.beginObject()
        w.key("delivery_id")
        w.int64(try rows.int64(i, 0) ?? 0)
        w.key("transition_id")
        w.int64(try rows.int64(i, 1) ?? 0)
        w.key("device_id")
        w.int64(try rows.int64(i, 2) ?? 0)
        w.key("event")
        w.string(rows.string(i, 3) ?? "")
        w.key("recorded_at")
        w.string(RFC3339.formatMicros(RFC3339.clampedMicros(try rows.int64(i, 4) ?? 0)))
        w.key("channel")
        w.string(rows.string(i, 5) ?? "")
        w.key("url")
        w.string(rows.string(i, 6) ?? "")
        w.key("idempotency_key")
        w.string(rows.string(i, 7) ?? "")
        let state = rows.string(i, 8) ?? ""
        w.key("state")
        w.string(state)
        w.key("attempts")
        w.int64(try rows.int64(i, 9) ?? 0)
        w.key("last_status")
        if let status = try rows.int64(i, 10) { w.int64(status) } else { w.null() }
        w.key("last_error")
        if let error = rows.string(i, 11) { w.string(Self.shownError(error)) } else { w.null() }
        w.key("next_attempt_at")
        if state == "pending" {
            w.string(RFC3339.formatMicros(RFC3339.clampedMicros(try rows.int64(i, 12) ?? 0)))
        } else {
            w.null()
        }
        w.key("queued_at")
        w.string(RFC3339.formatMicros(RFC3339.clampedMicros(try rows.int64(i, 13) ?? 0)))
        w.key("finished_at")
        if let finished = try rows.int64(i, 14) {
            w.string(RFC3339.formatMicros(RFC3339.clampedMicros(finished)))
        } else {
            w.null()
        }
        w.endObject()
    }
}
