import CLI
import Maintenance
import Postgres

/// `findmy backup` and `findmy restore`: the arguments; the copies are Maintenance's `Backup`.
enum BackupCommand {
    static let backup = Command(
        name: "backup", summary: "write a consistent copy of the event log, while the server runs"
    ) {
        try runBackup($0)
    }
    static let restore = Command(name: "restore", summary: "bring a backup back into an empty data directory")
    {
        try runRestore($0)
    }

    static let backupHelp = """
        usage: findmy backup --data-dir DIR --to PATH [--json]

        Writes PATH (which must not exist) with PATH/log: the log's segments up to its durable watermark,
        and a watermark that matches, so PATH/log is itself a valid log (`findmy log verify --data-dir
        PATH`). Safe while the server takes reports and compacts (docs/backup.md). The PostgreSQL
        projection is not copied: it is rebuilt from the log after a restore. Settings (flags and
        environment) are not in the log either: keep your service file with the backup.

        A backup holds movement history: every fix it contains, with both clocks, and the users,
        devices, token hashes and push tokens. Retention cannot reach it: delete old backups yourself.
        """

    static let restoreHelp = """
        usage: findmy restore --from PATH --data-dir DIR [--force] [--rebuild] [--json] [--database-url URL]

        Copies the backup's log into DIR/log, verifies every frame of it, and says that the projection
        will be rebuilt from the log when `findmy serve` next starts on DIR (a new embedded cluster
        projects from offset 0). DIR must be empty or absent; with --force a non-empty DIR (its server
        stopped) is moved aside to DIR.before-restore-TIME, nothing is deleted.

        options:
          --rebuild   rebuild the projection now (as `findmy replay`); needed with an external
                      --database-url, whose tables describe the log that was there before
          --json      print the result as JSON
        """

    static func runBackup(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["data-dir", "to"], flags: ["json"])
        if options.flag("help") {
            print(backupHelp)
            return 0
        }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        let target = try options.required("to")
        return try Backup.write(data: data, to: target, json: options.flag("json"))
    }

    static func runRestore(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["from", "data-dir", Database.setting.flag],
            flags: ["force", "rebuild", "json"])
        if options.flag("help") {
            print(restoreHelp)
            return 0
        }
        let source = try options.required("from")
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        return try Backup.restore(
            from: source, data: data, force: options.flag("force"), rebuild: options.flag("rebuild"),
            json: options.flag("json"),
            databaseURL: options.value(Database.setting.flag, environment: Database.setting.environment))
    }
}
