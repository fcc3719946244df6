import CLI
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// What `findmy import` prints of an import's status: the summary of a file once it ended.
enum ImportReport {
    static func number(_ status: JSONValue, _ key: String) -> Int64 { (try? status[key]?.int64Value) ?? 0 }

    /// `key: n, key: n` of a JSON object of counts, largest first; nil when empty.
    static func counts(_ value: JSONValue?) -> String? {
        guard case .object(let object)? = value, object.count > 0 else { return nil }
        return object.members.map { ($0.key, (try? $0.value.int64Value) ?? 0) }
            .sorted { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }
            .map { "\($0.0) \($0.1)" }.joined(separator: ", ")
    }

    /// The lines of one file's summary: what was read, stored, rejected (by reason), already
    /// stored, not a fix (by kind), the time range; for a dry run what falls outside the window
    /// and how to widen it; for a failure its error.
    static func summary(_ status: JSONValue) -> [String] {
        let name = (try? status["file_name"]?.stringValue) ?? "?"
        let format = (try? status["format"]?.stringValue) ?? "format not known"
        let dryRun = (try? status["dry_run"]?.boolValue) == true
        let failed = (try? status["state"]?.stringValue) == "failed"
        var lines: [String] = []
        var head =
            "\(name) (\(format), \(number(status, "file_bytes")) bytes): \(number(status, "fixes_read")) fixes read"
        if dryRun {
            head += ", nothing stored (dry run)"
        } else {
            head += ", \(number(status, "accepted")) stored, \(number(status, "rejected")) rejected"
            if let reasons = counts(status["rejected_by_reason"]) { head += " (\(reasons))" }
            head += ", \(number(status, "duplicate")) already stored"
        }
        lines.append(head)
        if let kinds = counts(status["not_a_fix_by_kind"]) {
            lines.append("  not fixes, counted only: \(kinds)")
        }
        if let first = try? status["recorded_min"]?.stringValue,
            let last = try? status["recorded_max"]?.stringValue
        {
            lines.append("  recorded from \(first) to \(last)")
        }
        let outside = number(status, "outside_retention")
        if outside > 0 {
            let device = number(status, "device_id")
            lines.append(
                "  \(outside) fixes are older than the device's retention window of \(number(status, "retention_days")) "
                    + "days and \(dryRun ? "would be" : "were") rejected as expired; to keep them, widen the "
                    + "window first (`findmy retention set --device \(device) --days N`, or the device's settings "
                    + "page) and import again")
        }
        if failed {
            lines.append("  FAILED: " + ((try? status["error"]?.stringValue) ?? "no reason given"))
        }
        return lines
    }
}

/// The progress of the import being followed, on standard error: on a terminal a bar redrawn in
/// place (bytes read of the file's size, fixes, their rate, the time left); otherwise a plain line
/// every `plainLineMicros`, so that a log file gets a few lines, not thousands.
struct ImportProgressLine {
    static let plainLineMicros: Int64 = 5_000_000
    static let barWidth = 24

    let fileName: String
    let terminal: Bool
    private var lastLineMicros: Int64 = 0
    private var drawn = false
    /// When the second pass began, and its fixes then, for the rate.
    private var storingSinceMicros: Int64?

    init(fileName: String, terminal: Bool) {
        self.fileName = fileName
        self.terminal = terminal
    }

    mutating func show(_ status: JSONValue, nowMicros: Int64) {
        let state = (try? status["state"]?.stringValue) ?? ""
        if state == "storing" && storingSinceMicros == nil { storingSinceMicros = nowMicros }
        let line = text(status, state: state, nowMicros: nowMicros)
        if terminal {
            // \r and erase to the end of the line: the bar is redrawn in place.
            write("\r\u{1B}[K" + line)
            drawn = true
        } else if nowMicros - lastLineMicros >= Self.plainLineMicros {
            write("findmy import: " + line + "\n")
            lastLineMicros = nowMicros
        }
    }

    /// Ends the bar's line, so that what follows starts on its own.
    mutating func finish() {
        if drawn { write("\r\u{1B}[K") }
        drawn = false
    }

    private func text(_ status: JSONValue, state: String, nowMicros: Int64) -> String {
        let total = max(1, ImportReport.number(status, "file_bytes"))
        let read = min(total, ImportReport.number(status, "bytes_read"))
        let percent = Int(read * 100 / total)
        let filled = Int(read * Int64(Self.barWidth) / total)
        let bar =
            "[" + String(repeating: "#", count: filled)
            + String(repeating: ".", count: Self.barWidth - filled) + "]"
        let step = state == "reading" ? "hashing" : "importing"
        var line = "\(fileName): \(step) \(bar) \(percent)% \(Self.bytes(read)) of \(Self.bytes(total))"
        guard state == "storing", let since = storingSinceMicros, nowMicros > since + 500_000 else {
            return line
        }
        let fixes = ImportReport.number(status, "fixes_read")
        let seconds = Double(nowMicros - since) / 1e6
        line += ", \(fixes) fixes, \(Int(Double(fixes) / seconds)) fixes/s"
        let bytesPerSecond = Double(read) / seconds
        if bytesPerSecond > 0 { line += ", \(Self.duration(Double(total - read) / bytesPerSecond)) left" }
        return line
    }

    static func bytes(_ count: Int64) -> String {
        if count >= 1 << 30 {
            let tenths = (count * 10) >> 30
            return "\(tenths / 10).\(tenths % 10) GiB"
        }
        if count >= 1 << 20 { return "\(count >> 20) MiB" }
        if count >= 1 << 10 { return "\(count >> 10) KiB" }
        return "\(count) B"
    }

    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded(.up))
        return whole >= 60 ? "\(whole / 60) min \(whole % 60) s" : "\(whole) s"
    }

    private func write(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}
