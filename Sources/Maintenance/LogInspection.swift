import CLI
import Events
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy log stats|verify|dump|repair` once parsed: what each prints about the event log in a
/// directory, as text or JSON, and its exit status.
package enum LogInspection {
    /// Refuses a directory without a log: `--data-dir` names the wrong place.
    package static func requireLog(_ directory: String) throws {
        var info = stat()
        guard stat(directory, &info) == 0 else {
            throw UsageError("no event log at \(directory): is --data-dir the server's data directory?")
        }
    }

    // MARK: stats

    package static func stats(_ directory: String, json: Bool) throws -> Int32 {
        try requireLog(directory)
        let reader = LogReader(directory: directory)
        let durableEnd = reader.durableEnd()
        var stats = LogStats(logID: try reader.logID(), durableEnd: durableEnd)
        let headersOnly: (RecordHeader) -> Bool = { _ in false }
        try reader.read(from: 0, upTo: durableEnd, wantPayload: headersOnly) { record in
            stats.count(record.header)
            return true
        }
        let files = try PosixFileIO().list(directory).filter { LogFormat.baseOffset(fileName: $0) != nil }
        stats.segments = files.count
        for file in files {
            var info = stat()
            if stat(directory + "/" + file, &info) == 0 { stats.bytes += Int(info.st_size) }
        }
        if json { printStatsJSON(stats) } else { printStatsText(stats) }
        return 0
    }

    private static func printStatsJSON(_ stats: LogStats) {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("log_id")
        if let logID = stats.logID { writer.string(logID.description) } else { writer.null() }
        writer.key("segments")
        writer.int64(Int64(stats.segments))
        writer.key("records")
        writer.int64(Int64(stats.records))
        writer.key("fixes")
        writer.int64(Int64(stats.fixes))
        writer.key("bytes")
        writer.int64(Int64(stats.bytes))
        writer.key("bytes_per_fix")
        writer.double(stats.bytesPerFix)
        writer.key("first_offset")
        optional(stats.firstOffset, &writer)
        writer.key("last_offset")
        optional(stats.lastOffset, &writer)
        writer.key("durable_end")
        writer.int64(Int64(stats.durableEnd))
        writer.key("received_from")
        time(stats.records > 0 ? stats.receivedMin : nil, &writer)
        writer.key("received_to")
        time(stats.records > 0 ? stats.receivedMax : nil, &writer)
        writer.key("recorded_from")
        time(stats.fixes > 0 ? stats.recordedMin : nil, &writer)
        writer.key("recorded_to")
        time(stats.fixes > 0 ? stats.recordedMax : nil, &writer)
        writer.key("records_by_type")
        writer.beginObject()
        for (type, count) in stats.byType.sorted(by: { $0.key < $1.key }) {
            writer.key(EventJSON.typeName(type))
            writer.int64(Int64(count))
        }
        writer.endObject()
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
    }

    private static func printStatsText(_ stats: LogStats) {
        // A log no writer of this version has opened yet has none (docs/log-format.md).
        printLine("log id         \(stats.logID.map { "\($0)" } ?? "none (written before log ids)")")
        printLine("segments       \(stats.segments) (\(stats.bytes) bytes)")
        printLine(
            "records        \(stats.records)"
                + (stats.firstOffset.map { " (offsets \($0)...\(stats.lastOffset!))" } ?? ""))
        printLine(
            "fixes          \(stats.fixes)"
                + (stats.fixes > 0
                    ? " (\(String(format1: stats.bytesPerFix)) bytes per fix on disk)" : ""))
        printLine("durable end    \(stats.durableEnd)")
        if stats.records > 0 {
            printLine(
                "received       \(EventJSON.time(stats.receivedMin, millis: true)) to \(EventJSON.time(stats.receivedMax, millis: true))"
            )
        }
        if stats.fixes > 0 {
            printLine(
                "recorded       \(EventJSON.time(stats.recordedMin, millis: true)) to \(EventJSON.time(stats.recordedMax, millis: true))"
            )
        }
        for (type, count) in stats.byType.sorted(by: { $0.key < $1.key }) {
            printLine("  " + EventJSON.typeName(type).padding(24) + "\(count)")
        }
    }

    // MARK: verify

    package static func verify(_ directory: String, json: Bool) throws -> Int32 {
        try requireLog(directory)
        let report = try LogInspector(directory: directory).verify()
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("ok")
            writer.bool(report.ok)
            writer.key("records")
            writer.int64(Int64(report.records))
            writer.key("fixes")
            writer.int64(Int64(report.fixes))
            writer.key("first_offset")
            optional(report.firstOffset, &writer)
            writer.key("last_offset")
            optional(report.lastOffset, &writer)
            writer.key("segments")
            writer.int64(Int64(report.segments))
            writer.key("bytes")
            writer.int64(Int64(report.bytes))
            writer.key("torn_bytes_truncated")
            writer.int64(Int64(report.tornBytesTruncated))
            writer.key("recovered")
            writer.bool(report.recovered)
            writer.key("unknown_records")
            writer.int64(Int64(report.unknownRecords))
            writer.key("problems")
            writer.beginArray()
            for problem in report.problems {
                writer.beginObject()
                writer.key("file")
                writer.string(problem.file)
                writer.key("position")
                writer.int64(Int64(problem.position))
                writer.key("reason")
                writer.string(problem.reason)
                writer.endObject()
            }
            writer.endArray()
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            printLine(report.ok ? "ok: the log is sound" : "DAMAGED: \(report.problems.count) problem(s)")
            printLine(
                "segments \(report.segments), records \(report.records), fixes \(report.fixes), bytes \(report.bytes)"
            )
            if let first = report.firstOffset { printLine("offsets \(first)...\(report.lastOffset!)") }
            if report.tornBytesTruncated > 0 {
                printLine("truncated a torn tail of \(report.tornBytesTruncated) bytes")
            }
            if !report.recovered {
                printLine("(a server holds the log: checked up to its durable watermark)")
            }
            for problem in report.problems {
                printLine("  \(problem.file) at byte \(problem.position): \(problem.reason)")
            }
            if !report.ok {
                printLine(
                    "run `findmy log repair --data-dir DIR` with the server stopped to cut the log at the first damage"
                )
            }
        }
        return report.ok ? 0 : 1
    }

    // MARK: dump

    package static func dump(_ directory: String, json: Bool, from: UInt64, limit: Int) throws -> Int32 {
        try requireLog(directory)
        var printed = 0
        try LogReader(directory: directory).read(from: from) { record in
            guard printed < limit else { return false }
            printed += 1
            let event: Event
            do {
                event = try record.event()
            } catch {
                event = .unknown(type: record.header.type, version: record.header.eventVersion, payload: [])
            }
            if json {
                var writer = JSONWriter(capacity: 256)
                EventJSON.write(record.header, event, to: &writer)
                printLine(String(decoding: writer.bytes, as: UTF8.self))
            } else {
                printLine(EventJSON.line(record.header, event))
            }
            return true
        }
        return 0
    }

    // MARK: repair

    package static func repair(_ directory: String, json: Bool) throws -> Int32 {
        try requireLog(directory)
        let report = try LogInspector(directory: directory).repair()
        if json {
            var writer = JSONWriter()
            writer.beginObject()
            writer.key("repaired")
            writer.bool(report.cutFile != nil || !report.movedFiles.isEmpty)
            writer.key("end_offset")
            writer.int64(Int64(report.newEndOffset))
            writer.key("cut_file")
            if let file = report.cutFile { writer.string(file) } else { writer.null() }
            writer.key("cut_position")
            writer.int64(Int64(report.cutPosition))
            writer.key("quarantine")
            if let folder = report.quarantine { writer.string(folder) } else { writer.null() }
            writer.key("moved")
            writer.beginArray()
            for file in report.movedFiles { writer.string(file) }
            writer.endArray()
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else if report.movedFiles.isEmpty && report.cutFile == nil {
            printLine(
                "nothing to repair: no damaged frame found; the log ends at offset \(report.newEndOffset)")
        } else {
            printLine(
                "cut the log at offset \(report.newEndOffset)"
                    + (report.cutFile.map { " (\($0), byte \(report.cutPosition))" } ?? ""))
            printLine("moved to \(report.quarantine ?? "?"):")
            for file in report.movedFiles { printLine("  \(file)") }
            printLine(
                "records from offset \(report.newEndOffset) on are no longer in the log; rebuild projections with `findmy replay`"
            )
        }
        return 0
    }

    // MARK: helpers

    static func optional(_ value: UInt64?, _ writer: inout JSONWriter) {
        if let value { writer.int64(Int64(value)) } else { writer.null() }
    }

    static func time(_ micros: Int64?, _ writer: inout JSONWriter) {
        if let micros { writer.string(EventJSON.time(micros)) } else { writer.null() }
    }
}

extension String {
    /// One decimal place, for rates and percentages in progress lines.
    package init(format1 value: Double) {
        guard let tenths = Int64(saturating: (value * 10).rounded()) else {
            self = "unknown"
            return
        }
        self = "\(tenths / 10).\((tenths % 10).magnitude)"
    }
}

/// What `findmy log stats` counts in one pass over the log's record headers, and the segments'
/// files on disk.
private struct LogStats {
    let logID: UUID128?
    let durableEnd: UInt64
    var segments = 0
    var bytes = 0
    var records = 0
    var fixes = 0
    var byType: [UInt8: Int] = [:]
    var firstOffset: UInt64?
    var lastOffset: UInt64?
    var receivedMin = Int64.max
    var receivedMax = Int64.min
    var recordedMin = Int64.max
    var recordedMax = Int64.min

    var bytesPerFix: Double { fixes > 0 ? Double(bytes) / Double(fixes) : 0 }

    mutating func count(_ header: RecordHeader) {
        records += 1
        fixes += Int(header.fixCount)
        byType[header.type, default: 0] += 1
        firstOffset = firstOffset ?? header.offset
        lastOffset = header.offset
        receivedMin = min(receivedMin, header.receivedAtMicros)
        receivedMax = max(receivedMax, header.receivedAtMicros)
        if header.fixCount > 0 {
            recordedMin = min(recordedMin, header.recordedMinMicros)
            recordedMax = max(recordedMax, header.recordedMaxMicros)
        }
    }
}
