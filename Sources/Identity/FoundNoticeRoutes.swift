import Core
import Events
import HTTP
import JSON

/// "Notify when found" (docs/found-notices.md): `PUT /api/find-my/devices/{id}/notify-when-found`,
/// the device's owner alone. Arming appends event 42; the device's next batch with a fix fires it
/// (the geofence projection records the notice, the notifier sends it) and disarms it.
extension IdentityService {
    func addFoundNoticeRoutes(to router: inout GuardedRouter) {
        router.add("PUT", "/api/find-my/devices/{id}/notify-when-found") { [self] request, caller in
            respond { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["armed"])
                let armed = try field { () throws(JSONAccessError) in try object.bool("armed") }
                let offset = try setFoundNotice(
                    deviceID: caller.deviceID, userID: caller.userID, armed: armed, via: "api")
                var writer = JSONWriter(capacity: 48)
                writer.beginObject()
                writer.key("armed")
                writer.bool(armed)
                writer.key("offset")
                writer.int64(Int64(offset))
                writer.endObject()
                return .json(writer.bytes)
            }
        }
    }

    static let noAlertTarget = APIError(
        status: 409, code: .noAlertTarget,
        message:
            "you have no alert target to notify: set notify_ntfy_url or notify_webhook_url first (PUT "
            + "/api/find-my/account/settings, or the panel's account page), then arm it again")

    /// Arms or disarms the notice of `deviceID`, which must be `userID`'s own (checked again under
    /// the mutation lock, so a concurrent removal wins cleanly). Arming needs an alert target:
    /// a notice that could reach nobody would only look like a promise. Arming again moves the
    /// notice's start to now; disarming an unarmed device appends the event all the same (its
    /// offset is the answer's). Returns the log offset.
    public func setFoundNotice(deviceID: UInt64, userID: UInt64, armed: Bool, via: String) throws(APIError)
        -> UInt64
    {
        try store.mutations.withLock { _ throws(APIError) -> UInt64 in
            let (owner, user) = store.registry.read {
                ($0.registry.liveDevice(deviceID)?.userID, $0.registry.users[userID])
            }
            guard owner == userID, let user else { throw APIError.deviceNotFound }
            if armed && user.notifyNtfyURL.isEmpty && user.notifyWebhookURL.isEmpty {
                throw Self.noAlertTarget
            }
            let offset = try appendAndApply(
                .foundNoticeSet(FoundNoticeSet(deviceID: deviceID, userID: userID, armed: armed)),
                receivedAtMicros: clockMicros())
            StructuredLog.info(
                "found_notice_set",
                [
                    "device_id": .int(Int64(deviceID)), "user_id": .int(Int64(userID)), "armed": .bool(armed),
                    "via": .string(via),
                ])
            return offset
        }
    }

    /// The armed notice of `deviceID`, if any (for its owner's views).
    public func foundNotice(deviceID: UInt64) -> Registry.FoundNotice? {
        store.registry.read { $0.registry.foundNotice(deviceID: deviceID) }
    }
}
