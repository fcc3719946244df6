import Events
import Import
import JSON

/// What to import: a file on this machine into one device (docs/import-export.md, "The command"
/// and "The API"). The file is read where it is, twice (its SHA-256, then its fixes); it must not
/// change while the import runs.
public struct ImportRequest: Sendable, Equatable {
    public var deviceID: UInt64
    /// Who asked for the import (the device's owner), kept in the `history_imported` record.
    public var userID: UInt64
    public var path: String
    /// The name the user knows the file by, without a directory (an upload's `name=`); it helps
    /// format detection when the content leaves it open, and names the file in the audit.
    public var fileName: String
    /// nil: detected from the content (`ImportFormat.detect`).
    public var format: ImportFormat?
    /// Read the file and count (what lies outside the retention window too), store nothing.
    public var dryRun: Bool
    /// The file is the import's own (an upload kept for it): removed once the import ends.
    public var ownsFile: Bool

    public init(
        deviceID: UInt64, userID: UInt64, path: String, fileName: String, format: ImportFormat? = nil,
        dryRun: Bool = false, ownsFile: Bool = false
    ) {
        self.ownsFile = ownsFile
        self.deviceID = deviceID
        self.userID = userID
        self.path = path
        self.fileName = fileName
        self.format = format
        self.dryRun = dryRun
    }
}

/// Where an import is: what `GET .../imports/{id}` answers and what the command line's progress
/// and summary show.
public struct ImportStatus: Sendable, Equatable {
    public enum State: String, Sendable {
        /// The first pass: the file's SHA-256 (`bytesRead` counts the bytes hashed).
        case reading
        /// The second pass: fixes read, cut into chunks and (unless a dry run) stored; `bytesRead`
        /// counts from 0 again.
        case storing
        /// Read to its end, every chunk durable and the `history_imported` record after them.
        case done
        /// Stopped at `error`; what was stored before it stays (running the import again stores
        /// only the rest).
        case failed
    }

    public var importID: UUID128
    public var deviceID: UInt64
    public var state: State = .reading
    public var dryRun: Bool
    /// nil until the format is decided (given, or detected at the start of the second pass).
    public var format: ImportFormat?
    public var fileName: String
    public var fileBytes: Int64 = 0
    public var bytesRead: Int64 = 0
    public var fixesRead = 0
    /// Fixes stored, and fixes the report path's rules refused (by the rejection's code:
    /// `expired`, `out_of_range`, ...).
    public var accepted = 0
    public var rejected = 0
    public var rejectedByReason: [String: Int] = [:]
    /// Fixes of chunks stored before (a re-import, or the part of an interrupted one): nothing added.
    public var duplicate = 0
    public var notAFix = 0
    public var notAFixByKind: [String: Int] = [:]
    /// Fixes older than the device's retention window: the report path rejects them as expired.
    public var outsideRetention = 0
    /// The device's window when the import began, for the advice on how to widen it.
    public var retentionDays = 0
    public var recordedMinMicros: Int64?
    public var recordedMaxMicros: Int64?
    public var error: String?

    public init(importID: UUID128, request: ImportRequest) {
        self.importID = importID
        deviceID = request.deviceID
        dryRun = request.dryRun
        format = request.format
        fileName = request.fileName
    }

    public var isFinished: Bool { state == .done || state == .failed }

    /// The fields of the summary of `ImportSummary` so far.
    mutating func take(_ summary: ImportSummary) {
        fixesRead = summary.fixes
        notAFixByKind = summary.notAFixByKind
        notAFix = summary.notAFixByKind.values.reduce(0, +)
        outsideRetention = summary.outsideRetention
        recordedMinMicros = summary.earliestRecordedAtMicros
        recordedMaxMicros = summary.latestRecordedAtMicros
    }

    /// `{"import_id", "device_id", "state", "dry_run", "format", "file_name", "file_bytes",
    /// "bytes_read", "fixes_read", "accepted", "rejected", "rejected_by_reason", "duplicate",
    /// "not_a_fix", "not_a_fix_by_kind", "outside_retention", "retention_days", "recorded_min",
    /// "recorded_max", "error"}`; times in RFC 3339, null when unknown.
    public func json(into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("import_id")
        writer.string(importID.description)
        writer.key("device_id")
        writer.int64(Int64(deviceID))
        writer.key("state")
        writer.string(state.rawValue)
        writer.key("dry_run")
        writer.bool(dryRun)
        writer.key("format")
        if let format { writer.string(format.rawValue) } else { writer.null() }
        writer.key("file_name")
        writer.string(fileName)
        let counts: [(String, Int)] = [
            ("file_bytes", Int(fileBytes)), ("bytes_read", Int(bytesRead)), ("fixes_read", fixesRead),
            ("accepted", accepted), ("rejected", rejected),
        ]
        for (key, count) in counts {
            writer.key(key)
            writer.int64(Int64(count))
        }
        writer.key("rejected_by_reason")
        Self.write(rejectedByReason, into: &writer)
        for (key, count) in [("duplicate", duplicate), ("not_a_fix", notAFix)] {
            writer.key(key)
            writer.int64(Int64(count))
        }
        writer.key("not_a_fix_by_kind")
        Self.write(notAFixByKind, into: &writer)
        for (key, count) in [("outside_retention", outsideRetention), ("retention_days", retentionDays)] {
            writer.key(key)
            writer.int64(Int64(count))
        }
        for (key, micros) in [("recorded_min", recordedMinMicros), ("recorded_max", recordedMaxMicros)] {
            writer.key(key)
            if let micros { writer.string(RFC3339.formatMicros(micros)) } else { writer.null() }
        }
        writer.key("error")
        if let error { writer.string(error) } else { writer.null() }
        writer.endObject()
    }

    public var jsonBytes: [UInt8] {
        var writer = JSONWriter(capacity: 512)
        json(into: &writer)
        return writer.bytes
    }

    private static func write(_ counts: [String: Int], into writer: inout JSONWriter) {
        writer.beginObject()
        for (key, count) in counts.sorted(by: { $0.key < $1.key }) {
            writer.key(key)
            writer.int64(Int64(count))
        }
        writer.endObject()
    }
}
