import Core
import Events
import HTTP
import HTTPClient
import Identity
import JSON

/// A device's ntfy topic (docs/api.md, docs/commands.md "ntfy"): where the ntfy command channel
/// rings the phone that subscribes to it. `PUT /api/find-my/devices/{id}/ntfy`, the owner's alone
/// (the gate's `.owner`: anyone else gets the 404 of an unknown device). One event (type 41).
extension IngestService {
    public func addDeviceNtfyRoutes(to router: inout GuardedRouter) {
        router.add("PUT", "/api/find-my/devices/{id}/ntfy") { [self] request, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["topic_url"])
                guard object["topic_url"] != nil else {
                    throw .badRequest(
                        .missingField, "topic_url is required: the topic's URL, or null to remove it")
                }
                let topicURL = try field { () throws(JSONAccessError) in
                    try object.stringIfPresent("topic_url")
                }
                let offset = try setNtfyTopic(deviceID: caller.deviceID, topicURL: topicURL ?? "")
                return .json(
                    Self.ntfyAnswer(identity.ntfyTopicURL(deviceID: caller.deviceID), offset: offset))
            }
        }
    }

    /// Sets the device's ntfy topic ("" removes it); the caller has checked ownership. The URL is
    /// checked as a geofence's ntfy URL is (`OutgoingURL`), without `user:password@`: a topic
    /// protected by a password is not supported, and the URL is shown back on the settings page.
    /// Used by the API and by the panel's settings form. Returns the log offset.
    public func setNtfyTopic(deviceID: UInt64, topicURL: String) throws(APIError) -> UInt64 {
        if !topicURL.isEmpty,
            let problem = OutgoingURL.problem(
                topicURL, field: "topic_url", policy: limits.outgoingTargets, allowsUserinfo: false)
        {
            throw .badRequest(.invalidField, problem)
        }
        let offset = try identity.store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(
                .deviceNtfySet(DeviceNtfySet(deviceID: deviceID, topicURL: topicURL)),
                receivedAtMicros: clockMicros())
        }
        StructuredLog.info(
            "device_ntfy_set", ["device_id": .int(Int64(deviceID)), "set": .bool(!topicURL.isEmpty)])
        return offset
    }

    static func ntfyAnswer(_ topicURL: String?, offset: UInt64) -> [UInt8] {
        var w = JSONWriter(capacity: 128 + (topicURL?.utf8.count ?? 0))
        w.beginObject()
        w.key("topic_url")
        if let topicURL { w.string(topicURL) } else { w.null() }
        w.key("offset")
        w.int64(Int64(offset))
        w.endObject()
        return w.bytes
    }
}
