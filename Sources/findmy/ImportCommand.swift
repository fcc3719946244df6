import CLI
import Maintenance

/// `findmy import`: the arguments; the work is Maintenance's `HistoryImport`.
enum ImportCommand {
    static let command = Command(
        name: "import", summary: "import location history files (Google Takeout, GPX, KML, CSV, ...)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy import --user NAME (--device ID | --new-device NAME) [--format F] [--dry-run]
                             [--user-map RECORDER_USER=FINDMY_USER]... [--json] --data-dir DIR FILE...

        Imports the location history in each FILE into one device of user NAME: a Google Takeout
        archive (.zip) or its Records.json, Semantic Location History or Timeline.json, GPX, KML, KMZ,
        GeoJSON, CSV, or OwnTracks Recorder .rec files (docs/import-export.md). For example:

            findmy import --user jane --new-device pixel --data-dir /var/lib/findmy Takeout.zip

        Each fix goes through the report path like a report from the device, keeping the time it was
        recorded: the same rules reject what is out of range, and fixes older than the device's
        retention window are rejected as expired (widen the window first with `findmy retention set`;
        --dry-run says how many). Importing the same file again stores nothing twice, and running an
        interrupted import again stores only the rest.

        A FILE that is a directory is an OwnTracks Recorder store (STORAGEDIR or its rec/): each of its
        devices goes to the device of the same name of the mapped user, created when missing.

        When a server runs on DIR, the import runs inside it, through its admin socket; otherwise this
        command opens the log itself. Progress goes to standard error (a bar on a terminal), a summary
        of each file to standard output. The exit status is 0 only if every file was imported whole.

        options:
          --user NAME          the user the history belongs to
          --device ID          import into this device of the user
          --new-device NAME    import into the user's device named NAME, created when it has none
          --format F           the file's format, when it cannot be told from its content: one of
                               google-records, google-semantic, google-timeline, gpx, kml, kmz, geojson,
                               csv, owntracks-recorder, zip
          --dry-run            read the files and say what would be stored and what falls outside the
                               retention window; store nothing
          --user-map R=F       (a Recorder store) the Recorder user R's devices go to findmy user F;
                               repeatable; a Recorder user not named goes to --user
          --json               print each file's final status as one line of JSON (as GET
                               /api/find-my/devices/{id}/imports/{import_id} answers it)
          --retention-days N   the default retention window, as for findmy serve (default 30); used
                               only when no server runs (the server's own setting rules otherwise)
          --data-dir DIR       the server's data directory; or set FINDMY_DATA_DIR
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: ["data-dir", "user", "device", "new-device", "format", "user-map", "retention-days"],
            flags: ["dry-run", "json"])
        if options.flag("help") {
            print(help)
            return 0
        }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        let device: HistoryImport.Device?
        switch (options.value("device"), options.value("new-device")) {
        case (let id?, nil):
            guard let number = Int64(id), number > 0 else {
                throw UsageError("--device takes a device id (a number)")
            }
            device = .id(number)
        case (nil, let name?): device = .named(name)
        case (nil, nil): device = nil
        default: throw UsageError("give one of --device ID and --new-device NAME, not both")
        }
        let retentionDays = try options.integer("retention-days", default: 30)
        guard retentionDays >= 1 else { throw UsageError("--retention-days must be at least 1") }
        return try HistoryImport.run(
            data: data,
            HistoryImport.Arguments(
                user: try options.required("user"), device: device, format: options.value("format"),
                dryRun: options.flag("dry-run"), userMaps: options.values("user-map"),
                files: options.positional,
                retentionDays: retentionDays, json: options.flag("json")))
    }
}
