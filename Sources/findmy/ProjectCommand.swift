import CLI
import Events
import Geofences
import JSON
import Postgres
import Projector
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

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
        try LogCommand.requireLog(data + "/log")
        return (data, options.value(Database.setting.flag, environment: Database.setting.environment))
    }

    static func runProject(_ arguments: [String]) throws -> Int32 {
        guard let (data, url) = try parse(arguments, help: projectHelp) else { return 0 }
        let signals = blockShutdownSignals()
        let database = try Database.open(dataDirectory: data, url: url)
        defer { database.close() }
        let projector = Projector(client: database.client, reader: LogReader(directory: data + "/log"))
        let fences = Projector(
            client: database.client, reader: LogReader(directory: data + "/log"),
            projection: GeofenceProjection())
        let stop = StopSignal()
        let thread = spawnThread { projector.run(until: stop) }
        let fenceThread = spawnThread { fences.run(until: stop) }
        printLine("projecting \(data)/log into \(database.description) (main and geofences)")
        let waiter = spawnThread {
            var received: Int32 = 0
            var waitFor = signals
            sigwait(&waitFor, &received)
            stop.request()
        }
        pthread_join(thread, nil)
        stop.request()
        pthread_join(fenceThread, nil)
        pthread_kill(waiter, SIGTERM)
        pthread_join(waiter, nil)
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
        let database = try Database.open(dataDirectory: data, url: url)
        defer { database.close() }
        let terminal = isatty(1) != 0
        var lastLine = monotonicMicros()
        let result = try Rebuild.run(client: database.client, reader: LogReader(directory: data + "/log")) {
            progress in
            let now = monotonicMicros()
            guard terminal || now - lastLine >= 2_000_000 else { return }
            lastLine = now
            let line = describe(progress)
            if terminal {
                print("\r" + line + "   ", terminator: "")
                fflush(nil)
            } else {
                printLine(line)
            }
        }
        if terminal { print("") }
        printLine(
            "rebuilt: \(result.recordsFolded) records, \(result.fixesFolded) fixes up to offset \(result.checkpoint) "
                + "in \(String(format1: result.elapsedSeconds)) s; the new tables are live")
        let fences = try replayGeofences(database.client, reader: LogReader(directory: data + "/log"))
        printLine(
            "geofences: rebuilt, \(fences.recordsFolded) records, \(fences.fixesFolded) fixes up to offset \(fences.checkpoint)"
        )
        return 0
    }

    /// The geofence projection dropped and folded again from offset 0 up to the log's durable end
    /// as it is now (records appended meanwhile are the running server's projector's to fold).
    static func replayGeofences(_ client: PostgresClient, reader: LogReader) throws -> ProjectorStatus {
        guard let logID = try reader.logID() else {
            throw ProjectorError.logWithoutID(directory: reader.directory)
        }
        let projection = GeofenceProjection()
        try client.withConnection { try projection.dropAndRecreate(logID: logID, $0) }
        let projector = Projector(client: client, reader: reader, projection: projection)
        try projector.prepare()
        let target = reader.durableEnd()
        var lastLine = monotonicMicros()
        while projector.status.checkpoint < target, try projector.step(logEnd: target) > 0 {
            let now = monotonicMicros()
            guard now - lastLine >= 2_000_000 else { continue }
            lastLine = now
            printLine("geofences: offset \(projector.status.checkpoint)/\(target)")
        }
        return projector.status
    }

    static func describe(_ progress: RebuildProgress) -> String {
        let percent = progress.target > 0 ? Double(progress.checkpoint) * 100 / Double(progress.target) : 100
        var line =
            "replay: offset \(progress.checkpoint)/\(progress.target) (\(String(format1: percent))%), "
            + "\(progress.recordsFolded) records, \(Int64(saturating: progress.fixesPerSecond) ?? 0) fixes/s"
        if let eta = progress.etaSeconds.flatMap({ Int64(saturating: $0.rounded()) }) {
            line += ", ETA \(eta) s"
        }
        return line
    }
}

/// Blocks SIGTERM and SIGINT in this thread (and every thread started after), so that they can
/// be taken with sigwait instead of a C handler that would have to touch Swift state.
func blockShutdownSignals() -> sigset_t {
    var signals = sigset_t()
    sigemptyset(&signals)
    sigaddset(&signals, SIGTERM)
    sigaddset(&signals, SIGINT)
    pthread_sigmask(SIG_BLOCK, &signals, nil)
    signal(SIGPIPE, SIG_IGN)
    return signals
}
