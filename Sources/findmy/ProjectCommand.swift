import CLI
import Events
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

        Runs the projector as its own process: folds the event log in DIR/log into PostgreSQL from its
        checkpoint, then tails the log (reading only what is durable) until SIGTERM or SIGINT. Exactly
        once: rows and checkpoint commit together. Run `findmy serve --projector off` beside it, or two
        projectors take turns harmlessly.

        options:
          --data-dir DIR        the server's data directory; or FINDMY_DATA_DIR
          --\(Database.setting.flag.padding(20))\(Database.setting.help); or \(Database.setting.environment)
        """

    static let replayHelp = """
        usage: findmy replay --data-dir DIR [--database-url URL]

        Builds a fresh generation of every projection table from offset 0 of the event log, while the
        current tables keep serving, then swaps it in in one transaction. Shows progress (records,
        fixes per second, ETA) on a terminal, periodic lines otherwise. Safe while the server runs.

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
        let stop = StopSignal()
        let thread = spawnThread { projector.run(until: stop) }
        printLine("projecting \(data)/log into \(database.description)")
        let waiter = spawnThread {
            var received: Int32 = 0
            var waitFor = signals
            sigwait(&waitFor, &received)
            stop.request()
        }
        pthread_join(thread, nil)
        stop.request()
        pthread_kill(waiter, SIGTERM)
        pthread_join(waiter, nil)
        let status = projector.status
        printLine(
            "stopped at offset \(status.checkpoint) (\(status.recordsFolded) records, \(status.fixesFolded) fixes folded)"
        )
        if status.stopped, let error = status.lastError {
            writeStandardError("findmy project: \(error)")
            return 1
        }
        return 0
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
        return 0
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
