import HTTPClient

extension GeofenceNotifier {
    /// The request of one delivery: the webhook's JSON, signed with the fence's secret (or, for a
    /// found notice, the device owner's), or ntfy's text with its title and tags; every attempt
    /// carries the delivery's idempotency key.
    func request(_ delivery: Due) -> OutgoingRequest {
        var headers = ["Idempotency-Key: " + delivery.key, "User-Agent: findmy-geofence-notifier"]
        if delivery.channel == "webhook", delivery.isFoundNotice {
            // Signed with the device owner's secret; a removed device's delivery never gets here
            // (`withholdUnseen`), so the owner is known.
            let owner = identity.deviceOwner(delivery.deviceID) ?? 0
            headers += [
                "Content-Type: application/json",
                WebhookSigning.signatureHeader + ": " + signing.signature(userID: owner, body: delivery.body),
                "X-Findmy-Event: device.found",
            ]
        } else if delivery.channel == "webhook" {
            headers += [
                "Content-Type: application/json",
                WebhookSigning.signatureHeader + ": "
                    + signing.signature(geofenceID: delivery.geofenceID, body: delivery.body),
                "X-Findmy-Event: geofence.transition",
            ]
        } else {
            headers += [
                "Content-Type: text/plain; charset=utf-8",
                "Title: " + AlertMessages.headerValue(delivery.title),
                "Tags: " + AlertMessages.headerValue(delivery.tags),
            ]
        }
        return OutgoingRequest(url: delivery.url, headers: headers, body: delivery.body)
    }
}
