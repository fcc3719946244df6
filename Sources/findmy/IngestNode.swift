import CLI
import Clients
import Commands
import Core
import Crypto
import Events
import Geofences
import HTTP
import Identity
import Ingest
import JSON
import NATSLog
import Postgres
import Presence
import ProjectionSchema
import Projector
import Push
import ReadAPI
import Threads
import WebPanel

/// `findmy serve --log nats://...`: a stateless ingest node of a JetStream log (docs/scale.md,
/// "Ingest nodes").
struct IngestNodeConfiguration {
    var servers: [String]
    /// Nil: the existing stream's count, or `partitionsDefault` for a stream this node creates.
    var partitions: Int?

    static let partitionsDefault = 8

    /// Nil for the local log (the default, and `--log local`).
    static func parse(log: String?, partitions: String?, projector: String?) throws
        -> IngestNodeConfiguration?
    {
        guard let log, !log.isEmpty, log != "local" else {
            if partitions != nil {
                throw UsageError("--log-partitions (FINDMY_LOG_PARTITIONS) is for --log nats://...")
            }
            return nil
        }
        guard log.hasPrefix("nats://") else {
            throw UsageError("--log (FINDMY_LOG) is local or nats://HOST:PORT[,HOST:PORT...], got '\(log)'")
        }
        let servers = try natsServers(log)
        if projector == "on" {
            throw UsageError(
                "--projector on cannot be combined with --log nats://: an ingest node runs no projector; "
                    + "run `findmy projector --log nats://...` as separate processes (docs/scale.md)")
        }
        var configuration = IngestNodeConfiguration(servers: servers)
        if let partitions {
            guard let count = Int(partitions), count >= 1, count <= 1024 else {
                throw UsageError(
                    "--log-partitions (FINDMY_LOG_PARTITIONS) must be a whole number from 1 to 1024, got '\(partitions)'"
                )
            }
            configuration.partitions = count
        }
        return configuration
    }

    /// `nats://h1:4222,h2:4222` or `nats://h1:4222,nats://h2:4222`: one URL per node.
    static func natsServers(_ text: String) throws -> [String] {
        guard text.hasPrefix("nats://") else {
            throw UsageError("--log (FINDMY_LOG) must be nats://HOST:PORT[,HOST:PORT...], got '\(text)'")
        }
        let hosts = text.dropFirst("nats://".count).split(separator: ",").map {
            $0.hasPrefix("nats://") ? String($0.dropFirst("nats://".count)) : String($0)
        }
        guard !hosts.isEmpty, hosts.allSatisfy({ !$0.isEmpty && !$0.contains("/") }) else {
            throw UsageError("--log (FINDMY_LOG) must be nats://HOST:PORT[,HOST:PORT...], got '\(text)'")
        }
        return hosts.map { "nats://" + $0 }
    }

    /// Opens the stream: an existing one with its own partition count (refused when
    /// `--log-partitions` names another), or a new one with `partitions`.
    func open() throws -> JetStreamLog {
        var configuration = JetStreamLogConfiguration(
            servers: servers, partitionCount: partitions ?? Self.partitionsDefault)
        configuration.createsStream = false
        do {
            return try JetStreamLog(configuration)
        } catch JetStreamLogError.streamMissing {
            configuration.createsStream = true
            return try JetStreamLog(configuration)
        } catch JetStreamLogError.wrongPartitionCount(_, let found, _) where partitions == nil {
            configuration.partitionCount = found
            return try JetStreamLog(configuration)
        }
    }
}

/// The JetStream log as the registry store appends to it, and the threads that wait for
/// acknowledgements on behalf of the report path's event-loop threads.
final class JetStreamSharedLog: SharedEventLog, Service, @unchecked Sendable {
    let name = "log"
    let log: JetStreamLog
    /// Appends waiting for their acknowledgement at once, for callers that must not block.
    static let appendsInFlightMax = 64
    private let queue: JetStreamAppendQueue
    private let stopped = Locked(false)

    init(_ log: JetStreamLog) {
        self.log = log
        queue = JetStreamAppendQueue(threadsCount: Self.appendsInFlightMax)
    }

    var partitionCount: Int { log.partitionCount }

    /// Appends handed to the acknowledgement threads and not answered yet.
    var appendsInFlight: Int { queue.pending }

    func appendShared(_ record: EncodedEvent, messageID: String) throws -> SharedAppend {
        let appended = try log.append(record: record, messageID: messageID)
        return SharedAppend(offset: appended.offset, duplicate: appended.duplicate)
    }

    func appendSharedLater(
        _ record: EncodedEvent, messageID: String,
        completion: @escaping @Sendable (Result<SharedAppend, any Error>) -> Void
    ) {
        queue.submit { [self] in
            completion(Result { try appendShared(record, messageID: messageID) })
        }
    }

    func durableEndOffset() throws -> UInt64 { try log.durableEndOffset() }

    func start() throws {}

    /// After every service that appends has stopped: the acknowledgements still awaited arrive
    /// (or time out), then the connection closes.
    func stop(graceMicros: Int64) {
        queue.stop()
        log.close()
        stopped.withLock { $0 = true }
    }

    var state: ServiceState { stopped.withLock { $0 } ? .stopped : .running }
}

/// How far this node's registry has folded the shared log, in /healthz and /metrics: a node far
/// behind the log's end answers 401 to tokens made elsewhere until it catches up.
struct RegistryFollowerStatus: StatusSource {
    let follower: JetStreamFollower
    let shared: SharedRegistry
    let log: JetStreamSharedLog
    /// Where the registry started: a snapshot's offset, or nil for a fold from the stream's start.
    let start: RegistryStartReport
    var name: String { "registry_follower" }

    func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        var members: [(String, JSONValue)] = [
            ("applied_end", .integer(Int64(shared.appliedEnd))),
            ("appends_in_flight", .integer(Int64(log.appendsInFlight))),
            ("start_snapshot_offset", start.snapshotOffset.map { .integer(Int64($0)) } ?? .null),
            ("records_folded_since_start", .integer(Int64(shared.recordsDelivered))),
        ]
        var degraded = false
        if case .failed(let why) = follower.state {
            members.append(("error", .string(why)))
            degraded = true
        }
        return (degraded, members)
    }

    func metricsText() -> String {
        "# HELP findmy_registry_applied_end The offset after the last record this node's registry folded.\n"
            + "# TYPE findmy_registry_applied_end gauge\nfindmy_registry_applied_end \(shared.appliedEnd)\n"
            + "# HELP findmy_shared_appends_in_flight Appends to the shared log waiting for their acknowledgement.\n"
            + "# TYPE findmy_shared_appends_in_flight gauge\nfindmy_shared_appends_in_flight \(log.appendsInFlight)\n"
    }
}

extension ServeCommand {
    /// The read API and the panel of an ingest node given `--database-url`: served from the
    /// projection the cluster's `findmy projector` processes write there (or a streaming replica of
    /// it), watched by a `ProjectionWatcher` for its checkpoint and for being this stream's
    /// (docs/scale.md, "Reads in a cluster"). The same watcher follows the geofence projection,
    /// which one `findmy projector` at a time folds there, for the transitions' reads.
    static func startClusterReads(
        _ configuration: Configuration, url: String, logID: UUID128, _ service: IngestService,
        _ group: ServiceGroup
    ) throws -> (reads: ReadService, geofences: GeofenceProgress) {
        let database = try DatabaseService(dataDirectory: configuration.dataDirectory, url: url)
        try group.start(database)
        let fenceProjection = ProjectionWatcher.Watched(
            schema: GeofenceSchema.schema, checkpointName: GeofenceTables.projectionName,
            version: GeofenceTables.version, what: "the geofence projection")
        let watcher = ProjectionWatcher(
            conninfo: database.client.conninfo, logID: logID, also: [fenceProjection])
        try group.start(watcher)
        service.addStatusSource(ProjectionWatcherStatus(watcher: watcher))
        let reads = readService(
            configuration, service, conninfo: database.client.conninfo, admission: { watcher.status.refusal },
            projectedEnd: { watcher.status.checkpoint }, bells: watcher.checkpointBells)
        database.addBorrower { reads.pool.close() }
        service.addStatusSource(reads.statusSource)
        StructuredLog.info("cluster_reads_started", ["database": .string(database.description)])
        let (fenceStatus, fenceBells) = watcher.watching(schema: GeofenceSchema.schema)!
        let geofences = GeofenceProgress(
            checkpoint: { fenceStatus().checkpoint }, bells: fenceBells,
            unavailable: { fenceStatus().refusal })
        return (reads, geofences)
    }
}

/// `/healthz` ("projection") and `/metrics` of an ingest node's `ProjectionWatcher`.
struct ProjectionWatcherStatus: StatusSource {
    let watcher: ProjectionWatcher
    var name: String { "projection" }

    func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let status = watcher.status
        var members: [(String, JSONValue)] = [
            ("checkpoint", .integer(Int64(status.checkpoint))), ("polls", .integer(Int64(status.polls))),
        ]
        if let refusal = status.refusal { members.append(("reads_refused", .string(refusal))) }
        if let error = status.lastError { members.append(("error", .string(error))) }
        return (status.refusal != nil || status.lastError != nil, members)
    }

    func metricsText() -> String {
        """
        # HELP findmy_projection_checkpoint The projection's checkpoint as this node last read it from PostgreSQL.
        # TYPE findmy_projection_checkpoint gauge
        findmy_projection_checkpoint \(watcher.status.checkpoint)

        """
    }
}

/// The follower stopped on a record it could not fold.
struct RegistryFollowerFailed: Error, CustomStringConvertible {
    var description: String
}

extension ServeCommand {
    /// An ingest node: the JetStream log, the registry from the newest valid snapshot of the
    /// stream in DATA_DIR/snapshots continued by a follower (caught up before the listeners open),
    /// the snapshotter, and the same routes as one machine's server, minus the projector and the
    /// compactor; the read API, the panel and the geofence notifier with `--database-url`
    /// (`startClusterReads`), else reads answer 503 reads_unavailable.
    static func startIngestNode(
        _ configuration: Configuration, _ nats: IngestNodeConfiguration, _ group: ServiceGroup
    ) throws -> (durableEnd: () -> UInt64, api: HTTPService) {
        let data = configuration.dataDirectory
        try PosixFileIO().makeDirectory(data)
        let shared = JetStreamSharedLog(try nats.open())
        try group.start(shared)
        let started = monotonicMicros()
        let registry = SharedRegistry(log: shared, digest: { SHA256.hash($0) })
        let snapshots = RegistrySnapshotStore(directory: data + "/snapshots")
        let snapshotLog = JetStreamSnapshotLog(log: shared.log)
        let clock = ServerClock.fromEnvironment()
        let service = IngestService(
            shared: registry, limits: configuration.limits, clockMicros: clock, snapshots: snapshots,
            snapshotLog: snapshotLog)
        service.addStatusSource(ServiceGroupStatus(group))
        let identity = service.identity
        let start = identity.store.startReport
        RegistryStartLog.snapshotsPassedOver(start)
        let follower = JetStreamFollower(log: shared.log, from: registry.appliedEnd) { record, _ in
            try registry.deliver(record, into: identity.store)
        }
        follower.onFatal = { group.fail("registry-follower", $0) }
        service.addStatusSource(
            RegistryFollowerStatus(follower: follower, shared: registry, log: shared, start: start))
        let end = try shared.durableEndOffset()
        try group.start(follower)
        // Serving before the registry holds every user and device would answer 401 to tokens
        // the cluster knows.
        while !registry.waitApplied(end, waitMillisMax: 1_000) {
            if case .failed(let why) = follower.state { throw RegistryFollowerFailed(description: why) }
        }
        let folded = service.registrySnapshot
        StructuredLog.info(
            "registry_rebuilt",
            [
                "records": .int(Int64(end)), "users": .int(Int64(folded.users.count)),
                "devices": .int(Int64(folded.devices.count)),
                "from_snapshot": .bool(start.snapshotOffset != nil),
                "snapshot_offset": .int(Int64(start.snapshotOffset ?? 0)),
                "records_replayed": .int(Int64(registry.recordsDelivered)),
                "partitions": .int(Int64(shared.partitionCount)),
                "millis": .int((monotonicMicros() - started) / 1000),
            ])
        // Started before the listeners, so stopped after them: its last snapshot is written once
        // nothing is accepted any more. It reads the stream on its own (SharedRegistrySnapshots.swift).
        let snapshotter = SharedRegistrySnapshotter(
            registry: identity.store, log: snapshotLog, store: snapshots,
            report: RegistryStartLog.snapshotOutcome)
        try group.start(snapshotter)

        var reads: ReadService?
        var geofences: GeofenceProgress?
        var projectedEnd: @Sendable () -> UInt64 = { 0 }
        var notifier: FeatureComposition.Notifier?
        if let url = configuration.databaseURL {
            let started = try startClusterReads(
                configuration, url: url, logID: shared.log.logID(), service, group)
            reads = started.reads
            geofences = started.geofences
            projectedEnd = started.reads.projectedEnd
            // Every node given --database-url runs one; the one whose session holds the notifier's
            // lease sends, the others wait to take over (docs/scale.md, "Geofences in a cluster").
            var notify = configuration.geofenceNotify
            notify.options.leaseClass = PartitionLeases.notifierClass
            notifier = .init(
                conninfo: started.reads.pool.conninfo, configuration: notify,
                registryEnd: { registry.appliedEnd })
        }
        let api = try startFeatures(
            configuration, service, clock: clock, group: group,
            FeatureComposition(
                reads: reads, geofences: geofences, projectedEnd: projectedEnd, notifier: notifier,
                compactor: nil))
        return ({ registry.appliedEnd }, api)
    }
}

/// The stream as the ingest node's registry snapshots read it (SharedRegistrySnapshots.swift).
struct JetStreamSnapshotLog: SnapshotSharedLog {
    let log: JetStreamLog

    func logID() throws -> UUID128 { try log.logID() }

    func storedCounts() throws -> SharedLogCounts {
        let (end, messages) = try log.storedCounts()
        return SharedLogCounts(end: end, messages: messages)
    }

    func readAll(from start: UInt64, upTo end: UInt64, _ visit: (LogRecord) throws -> Bool) throws -> UInt64 {
        // JetStreamLog's read does not count the record its visitor stopped on; the fold applied it.
        var stoppedAfter: UInt64?
        let reached = try log.read(partitions: Set(0..<log.partitionCount), from: start, upTo: end) {
            _, record in
            if try visit(record) { return true }
            stoppedAfter = record.offset + 1
            return false
        }
        return stoppedAfter ?? reached
    }
}
