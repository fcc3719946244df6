import CLI
import Events
import Geofences
import Maintenance
import Postgres
import Projector
import Threads

/// `findmy project` (the projector as its own process) and `findmy replay` (rebuild).
enum ProjectCommand {
    static let project = Command(name: "project", summary: "fold the event log into PostgreSQL, tailing it") {
        try runProject($0)
    }

    static let replay = Command(
        name: "replay", summary: "rebuild the PostgreSQL projection from offset 0 and swap it in"
    ) {
        try runReplay($0)
    }

    static let projectHelp = """
        usage: findmy project --data-dir DIR [--database-url URL]

        Runs both projectors as their own process: folds the event log in DIR/log into PostgreSQL from
        their checkpoints, then tails the log (reading only what is durable) until SIGTERM or SIGINT:
          main       devices, latest positions, history (schema findmy_gen_*)
          geofences  geofence transitions, the devices' own transitions (schema findmy_geofences)
        Exactly once: rows and checkpoint commit together. Run `findmy serve --projector off` beside
        it, or two projectors take turns harmlessly.

        options:
          --data-dir DIR        the server's data directory; or FINDMY_DATA_DIR
          --\(Database.setting.flag.padding(20))\(Database.setting.help); or \(Database.setting.environment)
        """

    static let replayHelp = """
        usage: findmy replay --data-dir DIR [--database-url URL]

        Rebuilds both projections from offset 0 of the event log:
          main       a fresh generation, built while the current tables keep serving, then swapped in
                     in one transaction
          geofences  then dropped and folded again in place (schema findmy_geofences): fence and
                     device transitions are missing until it reaches the log's end; the geofence
                     notifier announces nothing twice (idempotency keys) and nothing old (last hour)
        Shows progress (records, fixes per second, ETA) on a terminal, periodic lines otherwise. Safe
        while the server runs.

        options:
          --data-dir DIR        the server's data directory; or FINDMY_DATA_DIR
          --\(Database.setting.flag.padding(20))\(Database.setting.help); or \(Database.setting.environment)
        """

    static func parse(_ arguments: [String], help: String) throws -> (data: String, url: String?)? {
        let options = try Options(arguments, valued: ["data-dir", Database.setting.flag], flags: [])
        if options.flag("help") {
            print(help)
            return nil
        }
        guard options.positional.isEmpty else {
            throw UsageError("unexpected argument '\(options.positional[0])'")
        }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        try LogInspection.requireLog(data + "/log")
        return (data, options.value(Database.setting.flag, environment: Database.setting.environment))
    }

    static func runProject(_ arguments: [String]) throws -> Int32 {
        guard let (data, url) = try parse(arguments, help: projectHelp) else { return 0 }
        let signals = blockShutdownSignals()
        let database = try DatabaseService(dataDirectory: data, url: url)
        let projector = Projector(client: database.client, reader: LogReader(directory: data + "/log"))
        // It folds no further than the main projector, whose history its recomputes read; each
        // commit of the main one wakes it.
        var fenceOptions = Projector.Options()
        fenceOptions.yieldsTo = projector
        let fences = Projector(
            client: database.client, reader: LogReader(directory: data + "/log"),
            projection: GeofenceProjection(), options: fenceOptions)
        // The process lives as long as the main projector: when it stops by itself, everything stops.
        let group = ServiceGroup(graceMicros: 0)
        try startGroup(
            group,
            [
                database,
                ProjectorService(projector: projector) { group.requestStop("the main projector stopped") },
                ProjectorService(projector: fences, name: "geofences"),
            ])
        printLine("projecting \(data)/log into \(database.description) (main and geofences)")
        requestStopOnSignal(group, signals)
        _ = group.waitForStop()
        group.stop()
        var failed = false
        for (name, each) in [("main", projector), ("geofences", fences)] {
            let status = each.status
            printLine(
                "\(name): stopped at offset \(status.checkpoint) (\(status.recordsFolded) records, \(status.fixesFolded) fixes folded)"
            )
            if status.stopped, let error = status.lastError {
                writeStandardError("findmy project: \(name): \(error)")
                failed = true
            }
        }
        return failed ? 1 : 0
    }

    static func runReplay(_ arguments: [String]) throws -> Int32 {
        guard let (data, url) = try parse(arguments, help: replayHelp) else { return 0 }
        return try Replay.run(dataDirectory: data, url: url)
    }
}
