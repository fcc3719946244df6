import CLI
import Clients
import Commands
import Compactor
import Core
import Events
import Geofences
import HTTP
import HTTPClient
import Identity
import Importer
import Ingest
import Postgres
import Presence
import Projector
import Push
import ReadAPI
import Synchronization
import Threads
import WebPanel

#if canImport(Glibc)
    import Glibc
#endif

/// What a process reads and runs beside the features (`ServeCommand.startFeatures`): one machine's
/// server has its projector, compactor and notifier; an ingest node has reads, projections and the
/// notifier only with --database-url, and no compactor (retention runs in `findmy projector`).
struct FeatureComposition {
    struct Notifier {
        var conninfo: String
        var configuration: GeofenceNotifySetup.Configuration
        /// Where the registry has applied up to, when the notifier must wait for it (a follower).
        var registryEnd: (@Sendable () -> UInt64)? = nil
    }

    var reads: ReadService?
    var geofences: GeofenceProgress?
    var projectedEnd: @Sendable () -> UInt64
    var notifier: Notifier?
    var compactor: Compactor?
}

/// `findmy serve`: the server. Opens the log (taking its single-writer lock), rebuilds the registry
/// from it, serves the API on --listen and admin commands on DATA_DIR/admin.sock, and shuts down
/// gracefully on SIGTERM or SIGINT.
enum ServeCommand {
    static let command = Command(
        name: "serve", summary: "run the server: the ingest API and the admin socket"
    ) {
        try run($0)
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        guard let configuration = try configuration(arguments) else {
            print(help)
            return 0
        }
        // Block the shutdown signals in this thread before any other starts: every thread inherits
        // the mask, and one thread takes them with sigwait. No C signal handler touches Swift state.
        let signals = blockShutdownSignals()

        // Every service in start order; they stop in reverse on every path out of here: a signal,
        // a service that cannot start, a fatal error (docs/configuration.md, "Start and shutdown").
        let group = ServiceGroup(graceMicros: shutdownGraceMicros, onEvent: logServiceEvent)
        let api: HTTPService
        let durableEnd: () -> UInt64
        do {
            if configuration.heapTrimMillis > 0 {
                try group.start(HeapTrimmer(intervalMicros: Int64(configuration.heapTrimMillis) * 1000))
            }
            if let nats = configuration.nats {
                (durableEnd, api) = try startIngestNode(configuration, nats, group)
            } else {
                let (log, started) = try startServices(configuration, group)
                (durableEnd, api) = ({ log.durableEnd }, started)
            }
        } catch {
            group.stop()
            throw (error as? ServiceStartError)?.underlying ?? error
        }
        let port = api.running!.port
        printLine(url(configuration.listen, port: port))
        StructuredLog.info("serving", ["listen": .string(configuration.listen), "port": .int(Int64(port))])

        requestStopOnSignal(group, signals)
        let reason = group.waitForStop()
        switch reason {
        case .requested(let signal):
            StructuredLog.info("shutting_down", ["signal": .string(signal)])
        case .fatal(let service, let message):
            StructuredLog.error("shutting_down", ["service": .string(service), "error": .string(message)])
        }
        group.stop()
        StructuredLog.info("stopped", ["durable_end": .int(Int64(durableEnd()))])
        if case .fatal = reason { return 1 }
        return 0
    }

    /// How long requests in flight may take to finish once a shutdown begins.
    static let shutdownGraceMicros: Int64 = 10_000_000

    /// Opens the log, rebuilds the registry, and starts the services in order: the log, PostgreSQL,
    /// the projector, the compactor, the admin socket, the API. Throws after the group stopped
    /// whatever had started; the caller stops it again (a no-op) for what failed before a start.
    static func startServices(_ configuration: Configuration, _ group: ServiceGroup) throws
        -> (LogWriter, HTTPService)
    {
        let data = configuration.dataDirectory
        try PosixFileIO().makeDirectory(data)
        var logOptions = configuration.log
        let clock = ServerClock.fromEnvironment()
        logOptions.clockMicros = clock
        logOptions.onSyncFailure = { error in
            // After a failed fsync the kernel may have dropped the dirty pages: nothing of this
            // group may be acknowledged. This thread keeps the group for good; the others stop.
            group.fail("log", "fdatasync failed, stopping so that nothing unsynced is acknowledged: \(error)")
            StopSignal().wait()
            fatalError("unreachable: a stop signal nobody requests")
        }
        let log = try LogWriter(directory: data + "/log", options: logOptions)
        try group.start(log)
        let started = monotonicMicros()
        let snapshots = RegistrySnapshotStore(directory: data + "/snapshots")
        let service = try IngestService(
            log: log, limits: configuration.limits, clockMicros: clock, snapshots: snapshots)
        service.addStatusSource(ServiceGroupStatus(group))
        let registry = service.registrySnapshot
        let start = service.identity.store.startReport
        StructuredLog.info(
            "registry_rebuilt",
            [
                "records": .int(Int64(registry.nextOffset)), "users": .int(Int64(registry.users.count)),
                "devices": .int(Int64(registry.devices.count)),
                "from_snapshot": .bool(start.snapshotOffset != nil),
                "snapshot_offset": .int(Int64(start.snapshotOffset ?? 0)),
                "records_replayed": .int(Int64(start.recordsReplayed)),
                "millis": .int((monotonicMicros() - started) / 1000),
            ])
        RegistryStartLog.snapshotsPassedOver(start)
        // Started before the listeners, so stopped after them: its last snapshot holds every record.
        let snapshotter = RegistrySnapshotter(
            registry: service.identity.store, store: snapshots, report: RegistryStartLog.snapshotOutcome)
        try group.start(snapshotter)

        let projection =
            configuration.projector
            ? try startProjection(configuration, service, log: log, group: group) : nil
        let client = projection?.client
        var projectorCheckpoint: @Sendable () -> UInt64? = { nil }
        if let projection { projectorCheckpoint = projection.checkpoint }
        let compaction = CompactService.service(
            configuration.compactor, log: log, client: client, addStatusSource: service.addStatusSource,
            readerCheckpoint: projectorCheckpoint,
            snapshotAfterRewrite: { snapshotter.snapshotAfterCompaction(stop: $0) })
        try group.start(compaction)
        var notifier: FeatureComposition.Notifier?
        if let client {
            notifier = .init(conninfo: client.conninfo, configuration: configuration.geofenceNotify)
        }
        let checkpoint = projectorCheckpoint
        let api = try startFeatures(
            configuration, service, clock: clock, group: group,
            FeatureComposition(
                reads: projection?.reads, geofences: projection?.geofences,
                projectedEnd: { checkpoint() ?? 0 },
                notifier: notifier, compactor: compaction.compactor))
        return (log, api)
    }

    /// The projection of a local log: its database, the projector and the geofence projector,
    /// started after the log (whose lock keeps a second server off this data directory and its
    /// cluster) and stopped before it, and the read service over them.
    static func startProjection(
        _ configuration: Configuration, _ service: IngestService, log: LogWriter, group: ServiceGroup
    ) throws -> (
        client: PostgresClient, reads: ReadService, checkpoint: @Sendable () -> UInt64?,
        geofences: GeofenceProgress
    ) {
        let data = configuration.dataDirectory
        let database = try DatabaseService(
            dataDirectory: data, url: configuration.databaseURL, supervised: true,
            onSupervisorEvent: logSupervisorEvent)
        try group.start(database)
        var options = Projector.Options()
        options.coalesceWindowMicros = Int64(configuration.projectorWindowMillis) * 1_000
        let projector = Projector(
            client: database.client, reader: LogReader(directory: data + "/log", writer: log),
            options: options)
        service.addStatusSource(ProjectorStatusSource(projector: projector))
        let readService = readService(
            configuration, service, conninfo: database.client.conninfo,
            admission: {
                let status = projector.status
                guard status.boundLogID == nil else { return nil }
                return status.stopped
                    ? "the projection does not match this log: \(status.lastError ?? "see /healthz")"
                    : "the projector has not yet checked that the projection belongs to this log "
                        + "(see /healthz)"
            },
            projectedEnd: { projector.status.checkpoint }, bells: projector.checkpointBells)
        database.addBorrower { readService.pool.close() }
        service.addStatusSource(readService.statusSource)
        // A projection of another log (a database left from an older installation) is dropped
        // as the projector starts, before the HTTP server does.
        try group.start(ProjectorService(projector: projector))
        StructuredLog.info("projector_started", ["database": .string(database.description)])
        // The geofence projection: the same log folded again, with its own checkpoint.
        // It yields to the main projector while that one drains a backlog: reads wait for the main one.
        var fenceOptions = options
        fenceOptions.yieldsTo = projector
        let fences = Projector(
            client: database.client, reader: LogReader(directory: data + "/log", writer: log),
            projection: GeofenceProjection(), options: fenceOptions)
        service.addStatusSource(
            ProjectorStatusSource(
                projector: fences, name: "geofences", metricPrefix: "findmy_geofences_projector"))
        let geofences = GeofenceProgress(
            checkpoint: { fences.status.checkpoint }, bells: fences.checkpointBells,
            unavailable: {
                let status = fences.status
                guard status.boundLogID == nil else { return nil }
                return status.stopped
                    ? "stopped: \(status.lastError ?? "see /healthz")"
                    : "not yet bound to this log (see /healthz)"
            })
        try group.start(ProjectorService(projector: fences, name: "geofences"))
        return (database.client, readService, { projector.status.checkpoint }, geofences)
    }

    /// What the features share whatever the log: the command channels and dispatcher, the geofence
    /// notifier and routes, presence, the panel, the routers and the listeners, in that order (so
    /// stopped in reverse). `projection` says what this process reads and runs beside them.
    static func startFeatures(
        _ configuration: Configuration, _ service: IngestService, clock: @escaping @Sendable () -> Int64,
        group: ServiceGroup, _ projection: FeatureComposition
    ) throws -> HTTPService {
        let data = configuration.dataDirectory
        let identity = service.identity
        let reads = projection.reads
        // The channels a command can take besides report answers (docs/commands.md): OwnTracks over
        // MQTT and the push providers, each only when configured, and ntfy, which needs no key.
        let channels =
            try OwnTracksMQTTService.start(
                configuration.mqtt, ingest: service, dataDirectory: data, group: group)
            + PushChannelsService.start(
                configuration.push, tokens: identity, dataDirectory: data, group: group)
            + NtfyChannelService.start(
                topics: identity, addressPolicy: configuration.limits.outgoingTargets,
                caFile: configuration.geofenceNotify.caFile, group: group)
        let commands = try CommandService.start(
            identity: identity, channels: channels, limits: configuration.commands, clockMicros: clock,
            group: group)
        let commandStreams = try CommandStreams.start(
            identity: identity, limits: configuration.commandStreams, group: group)
        let commandRoutes = CommandRoutes(
            service: commands, pool: reads?.pool, projectedEnd: projection.projectedEnd,
            afterOffsetWaitMillisMax: configuration.read.readAfterOffsetWaitMillisMax)

        // Geofence notifications: after the projections whose transitions it follows, stopped
        // before them and before the database.
        let signing = try WebhookSigning.load(dataDirectory: data)
        if let notifier = projection.notifier {
            try GeofenceNotifySetup.start(
                notifier.configuration, conninfo: notifier.conninfo, identity: identity, signing: signing,
                wake: projection.geofences?.bells, registryEnd: notifier.registryEnd, clockMicros: clock,
                group: group)
        }
        let alerts = GeofenceAlertRoutes(
            identity: identity, signing: signing, pool: reads?.pool,
            outgoingTargets: configuration.limits.outgoingTargets)

        // Presence from headscale (docs/presence.md).
        let presence = try PresenceService.start(
            configuration.headscale, identity: identity, clockMicros: clock, group: group)

        let panel = PanelService(
            ingest: service, pool: reads?.pool, configuration: configuration.panel, clockMicros: clock,
            presence: presence)
        // History imports: started before the listeners, so stopped after them and before the log.
        let imports = ImportJobs(ingest: service, uploadDirectory: data + "/imports")
        try group.start(imports)
        // Every route passes through the permission table; a route without an entry stops the start.
        let (router, adminRouter) = try routers(
            service, reads: reads, panel: panel, compactor: projection.compactor, commands: commandRoutes,
            commandStreams: commandStreams, presence: presence, geofences: projection.geofences,
            alerts: alerts, imports: imports,
            importBytesMax: configuration.importBytesMax)
        return try startListeners(
            configuration, group, router: router, adminRouter: adminRouter, metrics: service.metrics)
    }

    /// A service that could not start, in the structured log; starts and stops stay quiet (the
    /// lines `serving`, `shutting_down` and `stopped` say as much).
    static func logServiceEvent(_ event: ServiceGroup.Event) {
        if case .startFailed(let service, let error) = event {
            StructuredLog.error(
                "service_start_failed", ["service": .string(service), "error": .string(error)])
        }
    }

    /// The read side over the projection in `conninfo`: `admission` says why no read may borrow a
    /// connection now (nil: go on), `projectedEnd` and `bells` how far the projection is.
    static func readService(
        _ configuration: Configuration, _ service: IngestService, conninfo: String,
        admission: @escaping @Sendable () -> String?, projectedEnd: @escaping @Sendable () -> UInt64,
        bells: Doorbells
    ) -> ReadService {
        ReadService(
            identity: service.identity,
            pool: PostgresPool(
                conninfo: conninfo, limits: .init(connectionsMax: configuration.readConnectionsMax),
                admission: admission),
            limits: configuration.read, projectedEnd: projectedEnd, projectionBells: bells,
            clockMicros: service.identity.clockMicros)
    }

    /// Starts the admin socket's listener, then the network API's (last, so that nothing answers
    /// reports before every service behind them runs); returns the API's service.
    static func startListeners(
        _ configuration: Configuration, _ group: ServiceGroup, router: Router, adminRouter: Router,
        metrics: IngestMetrics
    ) throws -> HTTPService {
        let data = configuration.dataDirectory
        try group.start(
            HTTPService(name: "admin") {
                try HTTPServer.start(
                    listen: "unix:" + data + "/admin.sock", router: adminRouter, logSink: httpLogSink("admin")
                )
            })
        let api = HTTPService(name: "api") {
            try HTTPServer.start(
                listen: configuration.listen, router: router, limits: configuration.http,
                observer: { metrics.observe($0) }, logSink: httpLogSink("api"))
        }
        try group.start(api)
        return api
    }

    /// The network API's router and the admin socket's, each built through the permission table.
    /// The panel's pages answer 503 without `reads` (`--projector off`); its static files are served.
    static func routers(
        _ service: IngestService, reads: ReadService?, panel: PanelService, compactor: Compactor?,
        commands: CommandRoutes, commandStreams: CommandStreams, presence: PresenceService? = nil,
        geofences: GeofenceProgress? = nil,
        alerts: GeofenceAlertRoutes, imports: ImportJobs, importBytesMax: Int64
    ) throws
        -> (api: Router, admin: Router)
    {
        var api = GuardedRouter(service: service, listener: .api)
        service.addRoutes(to: &api)
        ClientsService(ingest: service, friends: reads.map { ProjectionFriends(pool: $0.pool) }).addRoutes(
            to: &api)
        service.identity.addAccountRoutes(to: &api, alertTargets: alerts.alertTargetRules)
        service.identity.addGeofenceRoutes(to: &api)
        if let reads {
            reads.addRoutes(to: &api)
        } else {
            ReadService.addUnavailableRoutes(to: &api)
        }
        if let reads, let geofences {
            GeofenceTransitionRoutes(reads: reads, progress: geofences).addRoutes(to: &api)
        } else {
            GeofenceTransitionRoutes.addUnavailableRoute(to: &api)
        }
        commands.addRoutes(to: &api)
        commandStreams.addRoutes(to: &api)
        if let presence {
            presence.addRoutes(to: &api)
        } else {
            PresenceService.addUnavailableRoutes(to: &api)
        }
        alerts.addRoutes(to: &api)
        imports.addRoutes(to: &api, uploadBytesMax: importBytesMax)
        panel.addRoutes(to: &api)
        var admin = GuardedRouter(service: service, listener: .adminSocket)
        service.addAdminRoutes(to: &admin)
        service.identity.addAccountAdminRoutes(to: &admin)
        imports.addAdminRoutes(to: &admin)
        // An ingest node of a JetStream log compacts nothing: the projectors apply retention.
        if let compactor { CompactService.addAdminRoute(to: &admin, compactor: compactor) }
        return (try api.build(), try admin.build())
    }

    /// libmicrohttpd's messages (already rate-limited by the server) as structured log lines.
    static func httpLogSink(_ listener: String) -> HTTPServer.LogSink {
        { line in
            switch line {
            case .message(let text):
                StructuredLog.info("http_message", ["listener": .string(listener), "message": .string(text)])
            case .dropped(let count):
                StructuredLog.info(
                    "http_messages_dropped", ["listener": .string(listener), "dropped": .int(Int64(count))])
            }
        }
    }

    static func url(_ listen: String, port: Int) -> String {
        if listen.hasPrefix("unix:") { return listen }
        let host = listen.split(separator: ":").first.map(String.init) ?? "127.0.0.1"
        return "http://\(host):\(port)"
    }
}
