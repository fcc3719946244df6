import JSON

/// One notice of the geofence projection's `found_notices`, as the notifier reads it.
public struct FoundNoticeRow: Sendable, Equatable {
    public var id: Int64
    public var deviceID: UInt64
    public var userID: UInt64
    /// The record of the batch that fired it.
    public var logOffset: UInt64
    /// The batch's newest fix.
    public var recordedAtMicros: Int64
    public var receivedAtMicros: Int64
    public var latitude: Double
    public var longitude: Double
    /// nil: the fix came without an accuracy.
    public var accuracyMeters: Double?

    public init(
        id: Int64, deviceID: UInt64, userID: UInt64, logOffset: UInt64, recordedAtMicros: Int64,
        receivedAtMicros: Int64, latitude: Double, longitude: Double, accuracyMeters: Double?
    ) {
        self.id = id
        self.deviceID = deviceID
        self.userID = userID
        self.logOffset = logOffset
        self.recordedAtMicros = recordedAtMicros
        self.receivedAtMicros = receivedAtMicros
        self.latitude = latitude
        self.longitude = longitude
        self.accuracyMeters = accuracyMeters
    }

    /// The same on every channel, retry and rebuild: it names the batch's record, and a batch fires
    /// at most one notice.
    public var idempotencyKey: String { "found-d\(deviceID)-o\(logOffset)" }
}

/// What a found notice says (docs/found-notices.md, "What arrives").
public enum FoundNoticeMessages {
    public static func webhookBody(_ notice: FoundNoticeRow, deviceName: String) -> [UInt8] {
        var w = JSONWriter(capacity: 384)
        w.beginObject()
        w.key("type")
        w.string("device.found")
        w.key("idempotency_key")
        w.string(notice.idempotencyKey)
        w.key("device_id")
        w.int64(Int64(bitPattern: notice.deviceID))
        w.key("device_name")
        w.string(deviceName)
        w.key("recorded_at")
        w.string(RFC3339.formatMicros(RFC3339.clampedMicros(notice.recordedAtMicros)))
        w.key("received_at")
        w.string(RFC3339.formatMicros(RFC3339.clampedMicros(notice.receivedAtMicros)))
        w.key("latitude")
        w.finiteDouble(notice.latitude)
        w.key("longitude")
        w.finiteDouble(notice.longitude)
        w.key("accuracy_m")
        if let accuracy = notice.accuracyMeters { w.finiteDouble(accuracy) } else { w.null() }
        w.endObject()
        return w.bytes
    }

    /// ntfy's title, tags (`tada`, which ntfy shows as 🎉) and text body, with a map link.
    public static func ntfy(_ notice: FoundNoticeRow, deviceName: String) -> (
        title: String, tags: String, body: [UInt8]
    ) {
        let time = RFC3339.formatMicros(RFC3339.clampedMicros(notice.recordedAtMicros))
        let accuracy =
            notice.accuracyMeters.flatMap { Int64(saturating: $0.rounded()) }.map { "±\($0) m" }
            ?? "accuracy unknown"
        let link = "https://www.openstreetmap.org/?mlat=\(notice.latitude)&mlon=\(notice.longitude)"
        let text = "\(deviceName) reported again at \(time) (\(accuracy)): \(link)"
        return ("\(deviceName) was found", "tada", Array(text.utf8))
    }
}
