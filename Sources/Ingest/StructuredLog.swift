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

    static func write(_ level: String, _ event: String, _ fields: KeyValuePairs<String, Field>) {
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
