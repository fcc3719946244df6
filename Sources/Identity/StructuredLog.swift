import Events
import JSON

/// One JSON object per line on standard error: `{"ts": ..., "level": ..., "event": ..., ...}`.
/// Never pass coordinates or tokens: a log line is copied to places a location history must not go.
public enum StructuredLog {
    public enum Field: Sendable {
        case string(String)
        case int(Int64)
        case bool(Bool)
    }

    public static func info(_ event: String, _ fields: KeyValuePairs<String, Field> = [:]) {
        write("info", event, fields)
    }

    public static func error(_ event: String, _ fields: KeyValuePairs<String, Field> = [:]) {
        write("error", event, fields)
    }

    /// `text` fit for a log line that people read: at most `bytesMax` bytes of UTF-8 (cut on a
    /// character, then `…`), and every character a name may not contain (`NameRules`: controls,
    /// text-direction and zero-width characters) replaced by U+FFFD, which shows that one was
    /// there: a name a client chose can neither forge the look of a line nor fill the log. (The
    /// JSON writer escapes quotes and controls; this is about what people see.)
    public static func sanitized(_ text: String, bytesMax: Int = 64) -> String {
        var out = String.UnicodeScalarView()
        var bytes = 0
        for scalar in text.unicodeScalars {
            let shown = NameRules.isForbidden(scalar) ? Unicode.Scalar(0xFFFD)! : scalar
            let width = UTF8.width(shown)
            guard bytes + width <= bytesMax else { return String(out) + "…" }
            out.append(shown)
            bytes += width
        }
        return String(out)
    }

    package static func write(_ level: String, _ event: String, _ fields: KeyValuePairs<String, Field>) {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("ts")
        writer.string(RFC3339.formatMillis(wallClockMicros()))
        writer.key("level")
        writer.string(level)
        writer.key("event")
        writer.string(event)
        for (key, value) in fields {
            writer.key(key)
            switch value {
            case .string(let text): writer.string(text)
            case .int(let number): writer.int64(number)
            case .bool(let flag): writer.bool(flag)
            }
        }
        writer.endObject()
        writeStandardError(String(decoding: writer.bytes, as: UTF8.self))
    }
}
