import CLI
import Events
import JSON
import Maintenance
import Postgres

/// `findmy compact`: the arguments; the run is Maintenance's `CompactRun`.
enum CompactCommand {
    static let command = Command(
        name: "compact", summary: "enforce retention now: rewrite the log, delete rows"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy compact --data-dir DIR [--as-of TIME] [--dry-run] [--json] [--retention-days N]
                              [--arrivals-retention-days N] [--database-url URL]

        Runs the retention compactor once (docs/retention.md): fixes past their window, erased fixes and
        removed devices' fixes leave the log segments (rewritten; whole segments deleted when possible)
        and the PostgreSQL projection. After an erasure or a removal it also rewrites the tables that
        held the rows (VACUUM FULL) and checkpoints, so their bytes leave the table files and the WAL.
        Prints what was removed.

        When a server runs on DIR, the run happens inside it, through its admin socket, with the server's
        settings (the retention flags here are then ignored); otherwise this command opens the log itself.

        options:
          --as-of TIME     run as if it were TIME (RFC 3339): to preview, and for tests
          --dry-run        report what would be removed, remove nothing
          --json           print the report as JSON
          --retention-days N, --arrivals-retention-days N   as for findmy serve (defaults 30 and 90)
          --\(Database.setting.flag.padding(15))\(Database.setting.help)
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: [
                "data-dir", "as-of", "retention-days", "arrivals-retention-days", Database.setting.flag,
            ],
            flags: ["dry-run", "json"])
        if options.flag("help") {
            print(help)
            return 0
        }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        var writer = JSONWriter(capacity: 64)
        writer.beginObject()
        if let asOf = options.value("as-of") {
            guard (try? RFC3339.parseMicros(asOf)) != nil else {
                throw UsageError("--as-of must be an RFC 3339 time, like 2025-01-31T12:00:00Z")
            }
            writer.key("as_of")
            writer.string(asOf)
        }
        writer.key("dry_run")
        writer.bool(options.flag("dry-run"))
        writer.endObject()
        let settings = RetentionSettings(
            retentionDays: try options.integer("retention-days", default: 30),
            arrivalsRetentionDays: try options.integer("arrivals-retention-days", default: 90))
        return try CompactRun.run(
            data: data, request: writer.bytes, settings: settings,
            databaseURL: options.value(Database.setting.flag, environment: Database.setting.environment),
            json: options.flag("json"))
    }
}
