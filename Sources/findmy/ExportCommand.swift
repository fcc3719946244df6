import CLI
import Events
import Export
import JSON
import Maintenance

/// `findmy export`: the arguments; reading the log and writing the file is Maintenance's
/// `HistoryExport`.
enum ExportCommand {
    static let command = Command(
        name: "export", summary: "write a device's location history as GPX, GeoJSON or CSV, from the log"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy export --data-dir DIR --device ID --format gpx|geojson|csv [--from TIME] [--to TIME]
                             [--output FILE] [--retention-days N] [--as-of TIME]

        Writes one device's fixes, with both clocks (recorded_at, received_at), accuracy, battery,
        charging and source, in one format (docs/import-export.md, "Export"). Read from the event log
        itself: it works with PostgreSQL down, and beside a running server (it needs no lock; it reads
        what was durable when it started). This machine's log only: on a JetStream log (--log nats://),
        export through the API.

        It gives what the server still shows and nothing more: fixes an erasure covers are left out,
        and so are those past the device's retention window (its own override, else its user's, else
        --retention-days), even when the compactor has not yet taken them out of the log. A removed
        device has nothing to export.

        Fixes come in log order (the order they arrived in, each batch in its own order), not sorted
        by recorded_at as the API's export is: the export reads the log once, in constant memory. A fix
        the log holds twice (the same time and place, sent again) is written twice; the server's
        history shows it once.

        options:
          --data-dir DIR        the server's data directory (the log is DIR/log); or set FINDMY_DATA_DIR
          --device ID           the device's id (a number: the API's /api/find-my/devices/ID, `findmy log
                                dump` shows it in each device_enrolled record)
          --format F            gpx, geojson or csv
          --from TIME, --to TIME
                                only fixes with recorded_at from TIME (inclusive) to TIME (exclusive),
                                RFC 3339 like 2026-05-01T09:00:00Z; either may be left out
          --output FILE         write FILE (as FILE.partial, renamed once complete); default standard output
          --retention-days N    the server's default window, as `findmy serve` has it (default 30); or
                                FINDMY_RETENTION_DAYS
          --as-of TIME          decide the retention window as if it were TIME (RFC 3339)

        A summary (fixes written, fixes left out as expired or erased) goes to standard error when the
        export goes to standard output, else to standard output. Exit status 0; 1 for an unknown or
        removed device or a damaged log; 2 for a usage error or no log in DIR.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: ["data-dir", "device", "format", "from", "to", "output", "retention-days", "as-of"],
            flags: [])
        if options.flag("help") || arguments.isEmpty {
            print(help)
            return options.flag("help") ? 0 : 2
        }
        guard options.positional.isEmpty else {
            throw UsageError("unexpected argument '\(options.positional[0])'")
        }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        let deviceText = try options.required("device")
        guard let device = UInt64(deviceText), device > 0 else {
            throw UsageError("--device takes a device id (a number), got '\(deviceText)'")
        }
        let formatText = try options.required("format")
        guard let format = ExportFormat(rawValue: formatText) else {
            throw UsageError("--format must be gpx, geojson or csv, got '\(formatText)'")
        }
        let from = try time(options, "from")
        let to = try time(options, "to")
        if let from, let to, from > to {
            throw UsageError("--from is after --to (--from is inclusive, --to exclusive)")
        }
        let days = options.value("retention-days", environment: "FINDMY_RETENTION_DAYS") ?? "30"
        guard let retentionDays = Int(days), retentionDays >= 1 else {
            throw UsageError("--retention-days must be a whole number of days, 1 or more, got '\(days)'")
        }
        return try HistoryExport.run(
            HistoryExport.Request(
                dataDirectory: data, deviceID: device, format: format, fromMicros: from, toMicros: to,
                settings: RetentionSettings(retentionDays: retentionDays),
                nowMicros: try time(options, "as-of") ?? wallClockMicros(),
                out: options.value("output") ?? "-"))
    }

    static func time(_ options: Options, _ name: String) throws -> Int64? {
        guard let text = options.value(name) else { return nil }
        do {
            return try RFC3339.parseMicros(text)
        } catch {
            throw UsageError("--\(name) must be an RFC 3339 time like 2026-05-01T09:00:00Z, got '\(text)'")
        }
    }
}
