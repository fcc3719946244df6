import HTTPClient
import JSON

/// One transition of the geofence projection, as the notifier reads it.
public struct TransitionRow: Sendable, Equatable {
    public var id: Int64
    public var geofenceID: UInt64
    public var deviceID: UInt64
    /// `enter` or `leave`.
    public var event: String
    public var recordedAtMicros: Int64
    public var receivedAtMicros: Int64
    public var fixAccuracyMeters: Double
    public var logOffset: Int64
    public var fixIndex: Int32

    public init(
        id: Int64, geofenceID: UInt64, deviceID: UInt64, event: String, recordedAtMicros: Int64,
        receivedAtMicros: Int64, fixAccuracyMeters: Double, logOffset: Int64, fixIndex: Int32
    ) {
        self.id = id
        self.geofenceID = geofenceID
        self.deviceID = deviceID
        self.event = event
        self.recordedAtMicros = recordedAtMicros
        self.receivedAtMicros = receivedAtMicros
        self.fixAccuracyMeters = fixAccuracyMeters
        self.logOffset = logOffset
        self.fixIndex = fixIndex
    }

    /// The same for every delivery of this transition, on every channel and every retry, and across
    /// a rebuild of the projection (it names the fix that decided, not the row): a receiver drops a
    /// message whose key it has seen.
    public var idempotencyKey: String {
        "gf\(geofenceID)-d\(deviceID)-\(event)-\(recordedAtMicros)-o\(logOffset).\(fixIndex)"
    }
}

/// What is announced: the payloads of both channels (docs/geofences.md, "Payload").
public enum AlertMessages {
    /// The webhook's JSON body.
    public static func webhookBody(_ row: TransitionRow, fenceName: String, deviceName: String) -> [UInt8] {
        var w = JSONWriter(capacity: 384)
        w.beginObject()
        w.key("type")
        w.string("geofence.transition")
        w.key("idempotency_key")
        w.string(row.idempotencyKey)
        w.key("geofence_id")
        w.int64(Int64(bitPattern: row.geofenceID))
        w.key("geofence_name")
        w.string(fenceName)
        w.key("device_id")
        w.int64(Int64(bitPattern: row.deviceID))
        w.key("device_name")
        w.string(deviceName)
        w.key("event")
        w.string(row.event)
        w.key("recorded_at")
        w.string(RFC3339.formatMicros(RFC3339.clampedMicros(row.recordedAtMicros)))
        w.key("received_at")
        w.string(RFC3339.formatMicros(RFC3339.clampedMicros(row.receivedAtMicros)))
        w.key("fix_accuracy_m")
        w.finiteDouble(row.fixAccuracyMeters)
        w.endObject()
        return w.bytes
    }

    /// ntfy's title, tags and text body.
    public static func ntfy(_ row: TransitionRow, fenceName: String, deviceName: String)
        -> (title: String, tags: String, body: [UInt8])
    {
        let verb = row.event == "enter" ? "arrived at" : "left"
        let title = "\(deviceName) \(verb) \(fenceName)"
        let time = RFC3339.formatMicros(RFC3339.clampedMicros(row.recordedAtMicros))
        let text =
            "\(title) at \(time) (fix accuracy \(Int64(saturating: row.fixAccuracyMeters.rounded()).map { String($0) } ?? "unknown") m; "
            + "received \(RFC3339.formatMicros(RFC3339.clampedMicros(row.receivedAtMicros))))"
        // Emoji short codes ntfy shows before the title, then plain tags.
        let tags = (row.event == "enter" ? "house" : "runner") + ",findmy,geofence-" + row.event
        return (title, tags, Array(text.utf8))
    }

    /// A header value as ntfy reads it (`NtfyMessage.headerValue`).
    public static func headerValue(_ text: String) -> String { NtfyMessage.headerValue(text) }
}
