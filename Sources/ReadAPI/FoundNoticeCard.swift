import Core
import JSON

/// "Notify when found" on a device's own card (docs/found-notices.md): its owner sees whether it
/// is armed, and since when; a reader it is shared with does not (the notice is the owner's).
/// From the live registry, not the projection: a report's fold disarms it there at once, so the
/// panel shows it went off as soon as the device reported.
enum FoundNoticeCard {
    /// `card` (one JSON object) with `"notify_when_found": {"armed": true, "since": time,
    /// "since_offset": n}` or `{"armed": false}` before its closing brace.
    static func appending(_ notice: Registry.FoundNotice?, to card: [UInt8]) -> [UInt8] {
        precondition(card.last == UInt8(ascii: "}"))
        var writer = JSONWriter(capacity: 96)
        writer.beginObject()
        writer.key("armed")
        writer.bool(notice != nil)
        if let notice {
            writer.key("since")
            if let micros = notice.armedAtMicros {
                writer.string(RFC3339.formatMicros(RFC3339.clampedMicros(micros)))
            } else {
                writer.null()
            }
            writer.key("since_offset")
            writer.int64(Int64(notice.armedOffset))
        }
        writer.endObject()
        return card.dropLast() + Array(",\"notify_when_found\":".utf8) + writer.bytes + [UInt8(ascii: "}")]
    }
}
