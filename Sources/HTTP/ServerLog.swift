/// One line for the server's log sink.
public enum LogLine: Equatable, Sendable {
    /// A message from libmicrohttpd (without its trailing newline), or the server's about a slow
    /// client it cut off.
    case message(String)
    /// This many messages were left out by the rate limit since the last line let through.
    case dropped(Int)
}

extension HTTPServer {
    public typealias LogLine = HTTP.LogLine
}

/// At most `linesPerMinuteMax` messages in each minute, counted from the first message of that
/// minute; the rest are counted and the count is reported before the next message let through
/// (or by `finish`). A pure value: the caller supplies the time and writes the lines.
///
/// Why: libmicrohttpd writes a line for every connection a client aborts or the server refuses,
/// so without a limit one client decides how fast the log grows.
public struct LogRateLimiter: Sendable {
    public let linesPerMinuteMax: Int
    private static let windowMicros: Int64 = 60_000_000
    private var windowStartMicros: Int64?
    private var linesInWindow = 0
    private var dropped = 0

    public init(linesPerMinuteMax: Int) {
        precondition(linesPerMinuteMax > 0)
        self.linesPerMinuteMax = linesPerMinuteMax
    }

    /// The lines to write for `message`, arriving at `nowMicros` (monotonic).
    public mutating func admit(_ message: String, nowMicros: Int64) -> [LogLine] {
        var lines: [LogLine] = []
        if let start = windowStartMicros, nowMicros - start < Self.windowMicros {
            // Still in the current minute.
        } else {
            lines = finish()
            windowStartMicros = nowMicros
            linesInWindow = 0
        }
        guard linesInWindow < linesPerMinuteMax else {
            dropped += 1
            return lines
        }
        linesInWindow += 1
        lines.append(.message(message))
        return lines
    }

    /// The count of dropped messages not reported yet, if any; call when the server stops.
    public mutating func finish() -> [LogLine] {
        defer { dropped = 0 }
        return dropped > 0 ? [.dropped(dropped)] : []
    }
}
