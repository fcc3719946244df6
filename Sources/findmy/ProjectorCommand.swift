import CLI
import Compactor
import Events
import Geofences
import JetStreamRetention
import NATSLog
import Postgres
import Projector
import Threads

/// `findmy projector`: one of several processes folding a JetStream log's partitions into
/// PostgreSQL, each partition held by one process at a time (docs/scale.md, "Projectors").
enum ProjectorCommand {
    static let command = Command(
        name: "projector", summary: "fold a NATS JetStream log's partitions into PostgreSQL (one of several)"
    ) { try run($0) }

    static let help = """
        usage: findmy projector --log nats://HOST:PORT[,HOST:PORT...] --database-url URL [--partitions all|LIST]
                                [--geofences on|off]

        Folds the partitions of the findmy log on a NATS JetStream cluster into the PostgreSQL projection,
        each partition with its own checkpoint, written in the same transaction as its rows (exactly
        once). Run several: a partition is folded only by the process holding its lease (a PostgreSQL
        advisory lock); with --partitions all each process takes its share of the partitions (all of them
        divided by the running projectors), and when one dies the others take its partitions over from
        their checkpoints. Runs until SIGTERM or SIGINT. Also applies retention by deletion to the
        partitions it holds (docs/scale.md, "Retention by deletion"), and to the database while it holds
        partition 0.

        Also folds the geofence projection (fence transitions, docs/geofences.md) into the same database:
        one process at a time, the whole stream in offset order with one checkpoint, under a lease of its
        own (another advisory lock); when its holder dies another `findmy projector` takes it over from
        its checkpoint. Its notifications are sent by one ingest node given --database-url.

        options:
          --log URLS                     the NATS nodes, comma-separated (nats://h1:4222,h2:4222,h3:4222); or FINDMY_LOG
          --database-url URL             PostgreSQL conninfo or postgresql:// URL; or FINDMY_DATABASE_URL
          --partitions all|LIST          which partitions this process may take: all (default), or a list
                                         such as 0-3 or 1,5-7 (any of them that is free)
          --stream NAME                  the JetStream stream (default FINDMY_LOG)
          --retention-days N             a fix's window, as `findmy serve` has it (default 30); or FINDMY_RETENTION_DAYS
          --arrivals-retention-days N    an envelope's window (default 90); or FINDMY_ARRIVALS_RETENTION_DAYS
          --compact-interval-seconds N   retention runs this often; 0: never (default 3600)
          --compact-first-run-seconds N  the first run this long after start (default 30)
          --geofences on|off             whether this process may fold the geofence projection (default on)
        """

    static let valued: Set<String> = [
        "log", "database-url", "partitions", "stream", "retention-days", "arrivals-retention-days",
        "compact-interval-seconds", "compact-first-run-seconds", "geofences",
    ]

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: valued, flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        guard options.positional.isEmpty else {
            throw UsageError("unexpected argument '\(options.positional[0])'")
        }
        let servers = try IngestNodeConfiguration.natsServers(
            options.required("log", environment: "FINDMY_LOG"))
        let conninfo = try options.required(Database.setting.flag, environment: Database.setting.environment)
        let selectionText = options.value("partitions") ?? "all"
        guard let selection = PartitionSelection.parse(selectionText) else {
            throw UsageError(
                "--partitions must be 'all' or a list such as 0-3 or 1,5-7, got '\(selectionText)'")
        }
        let settings = RetentionSettings(
            retentionDays: try positive(options, "retention-days", environment: "FINDMY_RETENTION_DAYS", 30),
            arrivalsRetentionDays: try positive(
                options, "arrivals-retention-days", environment: "FINDMY_ARRIVALS_RETENTION_DAYS", 90))
        let intervalSeconds = try options.integer("compact-interval-seconds", default: 3600)
        let firstRunSeconds = try options.integer("compact-first-run-seconds", default: 30)
        guard intervalSeconds >= 0, firstRunSeconds >= 0 else {
            throw UsageError("--compact-interval-seconds and --compact-first-run-seconds must be 0 or more")
        }
        let geofencesText = options.value("geofences") ?? "on"
        guard geofencesText == "on" || geofencesText == "off" else {
            throw UsageError("--geofences must be 'on' or 'off', got '\(geofencesText)'")
        }
        let signals = blockShutdownSignals()
        var configuration = JetStreamLogConfiguration(servers: servers, partitionCount: 1)
        if let stream = options.value("stream") { configuration.streamName = stream }
        let log = try JetStreamLog.openExisting(configuration)
        defer { log.close() }
        let logID = try log.logID()
        var projectorOptions = PartitionedProjector.Options()
        projectorOptions.selection = selection
        projectorOptions.log = { printLine($0) }
        let projector = PartitionedProjector(
            conninfo: conninfo, reader: log, logID: logID, options: projectorOptions)
        printLine(
            "projector: stream \(log.configuration.streamName) (\(log.partitionCount) partitions, log \(logID)), "
                + "partitions \(selection)")
        var services: [any Service] = [ThreadService(name: "projector") { projector.run(until: $0) }]
        var fences: SharedLogProjector<GeofenceProjection>?
        if geofencesText == "on" {
            var fenceOptions = SharedLogProjector<GeofenceProjection>.Options()
            fenceOptions.log = { printLine($0) }
            let folder = SharedLogProjector(
                conninfo: conninfo, reader: log, logID: logID, options: fenceOptions
            ) { GeofenceProjection() }
            fences = folder
            services.append(ThreadService(name: "geofences") { folder.run(until: $0) })
        }
        if intervalSeconds > 0 {
            let schedule = RetentionSchedule(
                log: log, settings: settings, conninfo: conninfo,
                heldPartitions: { projector.status.checkpoints.keys.sorted() },
                firstRunMicros: Int64(firstRunSeconds) * 1_000_000,
                intervalMicros: Int64(intervalSeconds) * 1_000_000, report: { printLine($0) })
            services.append(ThreadService(name: "retention") { schedule.run(until: $0) })
        }
        let group = ServiceGroup(graceMicros: 0)
        try startGroup(group, services)
        requestStopOnSignal(group, signals)
        _ = group.waitForStop()
        group.stop()
        printStopped(projector, fences)
        return 0
    }

    /// What the projectors folded while this process ran, as it stops.
    private static func printStopped(
        _ projector: PartitionedProjector, _ fences: SharedLogProjector<GeofenceProjection>?
    ) {
        let status = projector.status
        printLine(
            "projector: stopped (\(status.recordsFolded) records, \(status.fixesFolded) fixes folded, "
                + "\(status.duplicateArrivals) duplicate arrivals folded; \(status.taken) partitions taken, "
                + "\(status.released) released)")
        if let fences {
            let status = fences.status
            printLine(
                "geofences: stopped (\(status.recordsFolded) records, \(status.fixesFolded) fixes folded; "
                    + "lease taken \(status.taken) times)")
        }
    }

    static func positive(_ options: Options, _ flag: String, environment: String, _ fallback: Int) throws
        -> Int
    {
        guard let text = options.value(flag, environment: environment) else { return fallback }
        guard let number = Int(text), number >= 1 else {
            throw UsageError("--\(flag) must be a whole number of at least 1, got '\(text)'")
        }
        return number
    }
}
