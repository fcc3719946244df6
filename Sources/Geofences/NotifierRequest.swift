import HTTPClient

extension GeofenceNotifier {
    /// The request of one delivery: the webhook's JSON, signed with the fence's secret (or, for a
    /// found notice, the device owner's), or ntfy's message (`NtfyMessage`, the one shape every
    /// ntfy sender of findmy uses) with its title and tags; every attempt carries the delivery's
    /// idempotency key.
    func request(_ delivery: Due) -> OutgoingRequest {
        let headers = ["Idempotency-Key: " + delivery.key, "User-Agent: findmy-geofence-notifier"]
        guard delivery.channel == "webhook" else {
            return NtfyMessage(
                title: delivery.title, tags: delivery.tags,
                body: String(decoding: delivery.body, as: UTF8.self)
            ).request(topicURL: delivery.url, extraHeaders: headers)
        }
        let signature: String
        let event: String
        if delivery.isFoundNotice {
            // Signed with the device owner's secret; a removed device's delivery never gets here
            // (`withholdUnseen`), so the owner is known.
            let owner = identity.deviceOwner(delivery.deviceID) ?? 0
            signature = signing.signature(userID: owner, body: delivery.body)
            event = "device.found"
        } else {
            signature = signing.signature(geofenceID: delivery.geofenceID, body: delivery.body)
            event = "geofence.transition"
        }
        return OutgoingRequest(
            url: delivery.url,
            headers: headers + [
                "Content-Type: application/json", WebhookSigning.signatureHeader + ": " + signature,
                "X-Findmy-Event: " + event,
            ], body: delivery.body)
    }
}
