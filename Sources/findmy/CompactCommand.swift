import CLI
import Compactor
import Events
import HTTP
import HTTPClient
import Identity
import Ingest
import JSON
import Postgres
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The retention compactor inside `findmy serve`: its settings, its admin route and its metrics
/// (docs/retention.md). Its schedule is `Compactor.CompactorService`, one of the server's services.
enum CompactService {
    static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "arrivals-retention-days", "FINDMY_ARRIVALS_RETENTION_DAYS",
            "batch envelopes (what arrived when, without coordinates) are kept this long (default 90)"
        ),
        (
            "compact-interval-seconds", "FINDMY_COMPACT_INTERVAL_SECONDS",
            "the retention compactor runs this often; expired data outlives its window by at most this (default 3600)"
        ),
        (
            "compact-first-run-seconds", "FINDMY_COMPACT_FIRST_RUN_SECONDS",
            "the compactor's first run comes this long after start, or after the interval when that is shorter (default 30)"
        ),
        (
            "delete-rows-per-batch-max", "FINDMY_DELETE_ROWS_PER_BATCH_MAX",
            "rows one DELETE of the compactor removes at most (default 5000)"
        ),
    ]

    struct Configuration: Sendable {
        var options = Compactor.Options()
        var schedule = CompactorService.Schedule()
    }

    /// Reads the settings with `integer(flag, default, min)`, the serve command's parser.
    static func configuration(retentionDays: Int, _ integer: (String, Int, Int) throws -> Int) throws
        -> Configuration
    {
        var configuration = Configuration()
        configuration.options.settings = RetentionSettings(
            retentionDays: retentionDays,
            arrivalsRetentionDays: try integer("arrivals-retention-days", 90, 1))
        configuration.schedule.intervalMicros =
            Int64(try integer("compact-interval-seconds", 3600, 1)) * 1_000_000
        configuration.schedule.firstRunDelayMicros =
            Int64(try integer("compact-first-run-seconds", 30, 1)) * 1_000_000
        configuration.options.deleteRowsPerBatchMax = try integer("delete-rows-per-batch-max", 5000, 1)
        return configuration
    }

    /// The compactor of `findmy serve` and its schedule (not yet started), shown in /healthz and
    /// /metrics, each scheduled run logged.
    static func service(
        _ configuration: Configuration, log: LogWriter, service: IngestService, client: PostgresClient?,
        readerCheckpoint: @escaping @Sendable () -> UInt64?,
        snapshotAfterRewrite: @escaping Compactor.SnapshotWriter
    ) -> CompactorService {
        let compactor = Compactor(
            writer: log, client: client, options: configuration.options, readerCheckpoint: readerCheckpoint,
            snapshotAfterRewrite: snapshotAfterRewrite)
        service.addStatusSource(CompactorStatusSource(compactor: compactor))
        return CompactorService(compactor: compactor, schedule: configuration.schedule) { outcome in
            switch outcome {
            case .success(let report):
                StructuredLog.info(
                    "compacted",
                    [
                        "fixes_removed": .int(Int64(report.log.fixesRemoved)),
                        "places_removed": .int(Int64(report.log.placesRemoved)),
                        "command_events_removed": .int(Int64(report.log.commandEventsRemoved)),
                        "command_rows_deleted": .int(Int64(report.database?.commandRowsDeleted ?? 0)),
                        "presence_events_removed": .int(Int64(report.log.presenceEventsRemoved)),
                        "geofence_rows_deleted": .int(Int64(report.database?.geofenceRowsDeleted ?? 0)),
                        "bytes_freed": .int(Int64(report.log.bytesFreed)),
                        "segments_deleted": .int(Int64(report.log.segmentsDeleted)),
                        "segments_rewritten": .int(Int64(report.log.segmentsRewritten)),
                        "location_rows_deleted": .int(Int64(report.database?.locationRowsDeleted ?? 0)),
                        // 0: no snapshot written (nothing rewritten, or the write failed: its own line says why).
                        "registry_snapshot_offset": .int(Int64(report.registrySnapshotOffset ?? 0)),
                        "stopped_early": .bool(report.stoppedEarly),
                        "millis": .int(report.elapsedMicros / 1000),
                    ])
            case .failure(let error):
                StructuredLog.error("compaction_failed", ["error": .string("\(error)")])
            }
        }
    }

    /// A long poll of `GET /admin/compact/runs/{id}` waits at most this long for the run to end.
    static let runWaitMillisMax = 60_000

    /// The admin routes (docs/retention.md, "Running it by hand"):
    /// - `POST /admin/compact {"as_of": "...", "dry_run": false}`: one run now, its report as JSON
    ///   once it is done (for scripts that wait as long as a run takes);
    /// - `POST /admin/compact/runs` (same body): starts a run, answers `202 {"run_id", "state"}` at once;
    /// - `GET /admin/compact/runs/{id}?wait_ms=N`: where the run is, once it has ended or N ms
    ///   passed: `{"run_id", "state": "waiting|running|done|failed", "phase", "report", "error"}`.
    static func addAdminRoute(to router: inout GuardedRouter, compactor: Compactor) {
        router.add("POST", "/admin/compact") { request, _ in
            let asOf: Int64?
            let dryRun: Bool
            switch runRequest(request) {
            case .success(let parsed): (asOf, dryRun) = parsed
            case .failure(let refusal): return refusal.response
            }
            do {
                return .json(CompactReportJSON.encode(try compactor.run(asOfMicros: asOf, dryRun: dryRun)))
            } catch {
                return .error(status: 500, code: .compactionFailed, message: "\(error)")
            }
        }
        router.add("POST", "/admin/compact/runs") { request, _ in
            let asOf: Int64?
            let dryRun: Bool
            switch runRequest(request) {
            case .success(let parsed): (asOf, dryRun) = parsed
            case .failure(let refusal): return refusal.response
            }
            guard let id = compactor.start(asOfMicros: asOf, dryRun: dryRun) else {
                return .error(
                    status: 503, code: .busy,
                    message: "the server is stopping; run findmy compact once it is up again")
            }
            let state = compactor.runState(id, waitMicros: 0) ?? .waiting
            return .json(CompactRunJSON.encode(id: id, state), status: 202)
        }
        router.add("GET", "/admin/compact/runs/{id}") { request, _ in
            guard let text = request.pathParameters["id"], let id = Int(text), id > 0 else {
                return .error(status: 400, code: .invalidField, message: "the run id is a positive number")
            }
            var waitMillis = 0
            if let wait = request.query("wait_ms") {
                guard let millis = Int(wait), (0...runWaitMillisMax).contains(millis) else {
                    return .error(
                        status: 400, code: .invalidField,
                        message: "wait_ms is a number of milliseconds from 0 to \(runWaitMillisMax)")
                }
                waitMillis = millis
            }
            guard let state = compactor.runState(id, waitMicros: Int64(waitMillis) * 1000) else {
                return .error(
                    status: 404, code: .compactionRunNotFound,
                    message:
                        "this server started no compaction run \(id) (or it was long ago, or before a restart); "
                        + "start one with POST /admin/compact/runs")
            }
            return .json(CompactRunJSON.encode(id: id, state))
        }
    }

    /// The body of a run request: `{"as_of": "...", "dry_run": false}`, both optional.
    static func runRequest(_ request: HTTPRequest) -> Result<(asOf: Int64?, dryRun: Bool), APIError> {
        do {
            guard
                case .object(let object) = try JSONParser.parse(
                    request.body.isEmpty ? Array("{}".utf8) : request.body)
            else {
                return .failure(
                    APIError(status: 400, code: .wrongType, message: "the body must be a JSON object"))
            }
            try object.checkKeys(allowed: ["as_of", "dry_run"])
            let asOf = try object.stringIfPresent("as_of").map { try RFC3339.parseMicros($0) }
            return .success((asOf, try object.boolIfPresent("dry_run") ?? false))
        } catch {
            return .failure(APIError(status: 400, code: .invalidField, message: "\(error)"))
        }
    }
}

struct CompactorStatusSource: StatusSource {
    let compactor: Compactor
    var name: String { "compactor" }

    func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let totals = compactor.totals
        var members: [(String, JSONValue)] = [("runs", .integer(Int64(totals.runs)))]
        if let last = totals.lastRunMicros {
            members.append(("last_run", .string(RFC3339.formatMillis(last))))
        }
        if let error = totals.lastError { members.append(("error", .string(error))) }
        return (totals.lastError != nil, members)
    }

    func metricsText() -> String {
        let totals = compactor.totals
        let lines: [(String, String, String, Int)] = [
            ("runs_total", "counter", "Compaction runs completed by this process.", totals.runs),
            (
                "failures_total", "counter", "Compaction runs that failed (retried at the next interval).",
                totals.failures
            ),
            ("fixes_removed_total", "counter", "Fixes removed from log segments.", totals.fixesRemoved),
            (
                "places_removed_total", "counter",
                "Region transitions and waypoints removed from log segments.", totals.placesRemoved
            ),
            (
                "log_bytes_freed_total", "counter", "Bytes of log segments freed by rewrites and deletions.",
                totals.bytesFreed
            ),
            ("segments_deleted_total", "counter", "Log segments deleted whole.", totals.segmentsDeleted),
            (
                "segments_rewritten_total", "counter", "Log segments rewritten without dead records.",
                totals.segmentsRewritten
            ),
            (
                "location_rows_deleted_total", "counter", "Rows removed from device_locations.",
                totals.locationRowsDeleted
            ),
            (
                "partitions_dropped_total", "counter", "Monthly device_locations partitions dropped.",
                totals.partitionsDropped
            ),
            (
                "batch_rows_deleted_total", "counter", "Rows removed from device_batches.",
                totals.batchRowsDeleted
            ),
            (
                "relations_rewritten_total", "counter",
                "Tables rewritten (VACUUM FULL) after erasures so deleted rows leave their files.",
                totals.relationsRewritten
            ),
            (
                "command_events_removed_total", "counter",
                "Command events (requested, sent, failed, answered, expired) removed from log segments.",
                totals.commandEventsRemoved
            ),
            (
                "command_rows_deleted_total", "counter",
                "Rows removed from commands (with their command_deliveries).", totals.commandRowsDeleted
            ),
            (
                "presence_events_removed_total", "counter",
                "Presence changes (headscale online/offline) removed from log segments.",
                totals.presenceEventsRemoved
            ),
            (
                "geofence_rows_deleted_total", "counter",
                "Rows removed from the geofence projection's tables (its fixes and transitions).",
                totals.geofenceRowsDeleted
            ),
        ]
        var text = ""
        for (name, type, help, value) in lines {
            text +=
                "# HELP findmy_compactor_\(name) \(help)\n# TYPE findmy_compactor_\(name) \(type)\nfindmy_compactor_\(name) \(value)\n"
        }
        return text
    }
}

/// A started run's state as `GET /admin/compact/runs/{id}` answers it.
enum CompactRunJSON {
    static func encode(id: Int, _ state: CompactionRunState) -> [UInt8] {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("run_id")
        writer.int64(Int64(id))
        writer.key("state")
        switch state {
        case .waiting:
            writer.string("waiting")
        case .running(let phase):
            writer.string("running")
            if let phase {
                writer.key("phase")
                encode(phase, &writer)
            }
        case .done(let report):
            writer.string("done")
            writer.key("report")
            CompactReportJSON.encode(report, &writer)
        case .failed(let message):
            writer.string("failed")
            writer.key("error")
            writer.string(message)
        }
        writer.endObject()
        return writer.bytes
    }

    static func encode(_ phase: CompactionPhase, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("step")
        switch phase {
        case .waiting:
            writer.string("waiting")
        case .readingPolicy(let offset, let end):
            writer.string("reading_policy")
            writer.key("offset")
            writer.int64(Int64(offset))
            writer.key("end")
            writer.int64(Int64(end))
        case .rewritingLog(let done, let total):
            writer.string("rewriting_log")
            writer.key("segments_done")
            writer.int64(Int64(done))
            writer.key("segments_total")
            writer.int64(Int64(total))
        case .snapshotting:
            writer.string("registry_snapshot")
        case .database:
            writer.string("database")
        }
        writer.endObject()
    }
}

enum CompactReportJSON {
    static func encode(_ report: CompactionReport) -> [UInt8] {
        var writer = JSONWriter(capacity: 512)
        encode(report, &writer)
        return writer.bytes
    }

    static func encode(_ report: CompactionReport, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("as_of")
        writer.string(RFC3339.formatMicros(report.asOfMicros))
        writer.key("dry_run")
        writer.bool(report.dryRun)
        writer.key("log")
        writer.beginObject()
        let log = report.log
        for (key, value) in [
            ("segments_scanned", log.segmentsScanned), ("segments_rewritten", log.segmentsRewritten),
            ("segments_deleted", log.segmentsDeleted), ("fixes_removed", log.fixesRemoved),
            ("places_removed", log.placesRemoved), ("command_events_removed", log.commandEventsRemoved),
            ("presence_events_removed", log.presenceEventsRemoved),
            ("records_shrunk", log.recordsShrunk), ("envelopes_made", log.envelopesMade),
            ("records_dropped", log.recordsDropped), ("bytes_before", log.bytesBefore),
            ("bytes_after", log.bytesAfter), ("bytes_freed", log.bytesFreed),
        ] {
            writer.key(key)
            writer.int64(Int64(value))
        }
        writer.key("active_segment_rolled")
        writer.bool(log.activeSegmentRolled)
        writer.endObject()
        writer.key("database")
        if let database = report.database {
            writer.beginObject()
            writer.key("location_rows_deleted")
            writer.int64(Int64(database.locationRowsDeleted))
            writer.key("partitions_dropped")
            writer.beginArray()
            for name in database.partitionsDropped { writer.string(name) }
            writer.endArray()
            writer.key("batch_rows_deleted")
            writer.int64(Int64(database.batchRowsDeleted))
            writer.key("command_rows_deleted")
            writer.int64(Int64(database.commandRowsDeleted))
            writer.key("geofence_rows_deleted")
            writer.int64(Int64(database.geofenceRowsDeleted))
            writer.key("latest_recomputed")
            writer.int64(Int64(database.latestRecomputed))
            writer.key("relations_rewritten")
            writer.beginArray()
            for name in database.relationsRewritten { writer.string(name) }
            writer.endArray()
            writer.key("checkpoint")
            writer.bool(database.checkpoint)
            if let reason = database.checkpointSkipped {
                writer.key("checkpoint_skipped")
                writer.string(reason)
            }
            if let skipped = database.skipped {
                writer.key("skipped")
                writer.string(skipped)
            }
            writer.endObject()
        } else {
            writer.null()
        }
        writer.key("registry_snapshot_offset")
        if let offset = report.registrySnapshotOffset { writer.int64(Int64(offset)) } else { writer.null() }
        writer.key("stopped_early")
        writer.bool(report.stoppedEarly)
        writer.key("elapsed_ms")
        writer.int64(report.elapsedMicros / 1000)
        writer.endObject()
    }
}

/// `findmy compact`: one compaction run now (or as of a given time), through the server or alone.
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
        var compactorOptions = Compactor.Options()
        compactorOptions.settings = RetentionSettings(
            retentionDays: try options.integer("retention-days", default: 30),
            arrivalsRetentionDays: try options.integer("arrivals-retention-days", default: 90))
        let url = options.value(Database.setting.flag, environment: Database.setting.environment)
        let body = writer.bytes
        let report = try AdminCall.session(data: data) { log in
            let database = try Database.open(dataDirectory: data, url: url)
            // As inside the server: the registry from the newest snapshot, and a new snapshot of
            // the compacted log before the run reports done (docs/snapshots.md).
            let snapshots = RegistrySnapshotStore(directory: data + "/snapshots")
            let service = try IngestService(log: log, snapshots: snapshots)
            let snapshotter = RegistrySnapshotter(identity: service.identity, store: snapshots)
            let compactor = Compactor(
                writer: log, client: database.client, options: compactorOptions,
                snapshotAfterRewrite: { snapshotter.snapshotAfterCompaction(stop: $0) })
            var router = GuardedRouter(service: service, listener: .adminSocket)
            CompactService.addAdminRoute(to: &router, compactor: compactor)
            do {
                // The run started below may still be going if this process is stopping: its stop
                // signal ends it at its next safe point, and it is joined before the database closes.
                return (
                    try router.build(),
                    {
                        compactor.stopSignal.request()
                        compactor.joinStartedRuns()
                        database.close()
                    }
                )
            } catch {
                database.close()
                throw error
            }
        } _: { call in
            try follow(call, body: body)
        }
        if options.flag("json") {
            printLine(String(decoding: JSONWriter.encode(report), as: UTF8.self))
        } else {
            printReport(report)
        }
        if (try? report["stopped_early"]?.boolValue) == true {
            throw CompactStoppedEarly()
        }
        return 0
    }

    /// The server stopped (or this process was asked to) during the run.
    struct CompactStoppedEarly: Error, CustomStringConvertible {
        var description: String {
            "the run was stopped before it finished (the server is stopping); what it did is kept and "
                + "consistent, the rest is the next run's: run findmy compact again"
        }
    }

    /// The run failed in the server (or in this process); its error as the run reported it.
    struct CompactFailed: Error, CustomStringConvertible {
        var message: String
        var description: String { "the compaction failed: " + message }
    }

    /// One call following a run waits at most this long for it to end.
    static let pollMillisMax = 2_000
    /// A progress line that says the same as the last one is printed again after this long.
    static let progressRepeatMicros: Int64 = 5_000_000

    /// Starts a run and follows it to its end with long polls, each shorter than one admin call may
    /// take: at 100 M fixes a run takes minutes, and one call waiting for all of it gave up after
    /// 30 s while the run went on. Prints a progress line on standard error when the run moves to
    /// another step, and every few seconds within one (the step, and the seconds since it was
    /// started); returns the report.
    static func follow(_ call: AdminCall.Call, body: [UInt8]) throws -> JSONValue {
        let started = try AdminCall.check(try call("POST", "/admin/compact/runs", body))
        let id = try started["run_id"]?.int64Value ?? 0
        // Short enough that a server's stop, which lets the admin calls in flight finish first, is
        // not held up by one (the run itself ends at once then).
        let waitMillis = min(pollMillisMax, max(100, AdminCall.timeoutSeconds * 1000 / 3))
        let startedMicros = monotonicMicros()
        var lastProgress = ""
        var lastLineMicros: Int64 = 0
        var state = started
        while true {
            let now = monotonicMicros()
            if let progress = progressLine(state),
                progress != lastProgress || now - lastLineMicros >= progressRepeatMicros
            {
                writeStandardError(
                    "findmy compact: run \(id): \(progress) (\((now - startedMicros) / 1_000_000) s)")
                lastProgress = progress
                lastLineMicros = now
            }
            switch try state["state"]?.stringValue {
            case "done":
                return state["report"] ?? .null
            case "failed":
                throw CompactFailed(message: (try? state["error"]?.stringValue) ?? "no reason given")
            default:
                do {
                    state = try AdminCall.check(
                        try call("GET", "/admin/compact/runs/\(id)?wait_ms=\(waitMillis)", []))
                } catch AdminCall.ServerGone.gone {
                    throw UsageError(
                        "the server stopped while compaction run \(id) was going on; what it finished is kept "
                            + "and consistent, the rest is the next run's: run findmy compact again")
                }
            }
        }
    }

    /// What a run's state says to the operator, coarse enough that a long step prints a few lines.
    static func progressLine(_ state: JSONValue) -> String? {
        switch try? state["state"]?.stringValue {
        case "waiting": return "waiting for the compaction in progress to end"
        case "running":
            let phase = state["phase"]
            func number(_ key: String) -> Int64 { (try? phase?[key]?.int64Value) ?? 0 }
            switch try? phase?["step"]?.stringValue {
            case "reading_policy":
                let end = max(1, number("end"))
                return "reading the retention policy from the log's record headers: "
                    + "\(number("offset") * 10 / end * 10)% of \(end) records"
            case "rewriting_log":
                let total = max(1, number("segments_total"))
                return "rewriting the log: segment \(min(total, number("segments_done") + 1)) of \(total)"
            case "registry_snapshot":
                return "writing the registry snapshot of the compacted log"
            case "database":
                return "deleting rows from PostgreSQL"
            default:
                return "running"
            }
        default: return nil
        }
    }

    static func printReport(_ document: JSONValue) {
        let log = document["log"]
        func number(_ value: JSONValue?) -> Int64 { (try? value?.int64Value) ?? 0 }
        let verb = (try? document["dry_run"]?.boolValue) == true ? "would remove" : "removed"
        printLine(
            "log: \(verb) \(number(log?["fixes_removed"])) fixes, \(number(log?["places_removed"])) places, "
                + "\(number(log?["command_events_removed"])) command events, "
                + "\(number(log?["presence_events_removed"])) presence events; "
                + "\(number(log?["segments_rewritten"])) segments rewritten, "
                + "\(number(log?["segments_deleted"])) deleted, \(number(log?["bytes_freed"])) bytes freed")
        if let offset = try? document["registry_snapshot_offset"]?.int64Value {
            printLine("registry: snapshot of the compacted log written at offset \(offset)")
        }
        if let database = document["database"], let skipped = try? database["skipped"]?.stringValue {
            // Nothing was built there yet (or it belongs to another log): nothing to delete.
            printLine(
                skipped.hasPrefix("no projection")
                    ? "database: no projection to compact yet (no projector has built one from this log); "
                        + "nothing to delete in PostgreSQL"
                    : "database: skipped: " + skipped)
        } else if let database = document["database"], database != .null {
            printLine(
                "database: \(verb) \(number(database["location_rows_deleted"])) location rows, "
                    + "\(number(database["batch_rows_deleted"])) batch rows, "
                    + "\(number(database["command_rows_deleted"])) command rows, "
                    + "\(number(database["geofence_rows_deleted"])) geofence rows; "
                    + "\(((try? database["partitions_dropped"]?.arrayValue) ?? []).count) partitions dropped, "
                    + "\(number(database["latest_recomputed"])) latest positions recomputed")
            let rewritten = ((try? database["relations_rewritten"]?.arrayValue) ?? []).compactMap {
                try? $0.stringValue
            }
            if !rewritten.isEmpty {
                let checkpoint =
                    (try? database["checkpoint"]?.boolValue) == true
                    ? "; WAL switched and checkpointed" : ""
                printLine(
                    "database: after erasures, \(verb == "removed" ? "rewrote" : "would rewrite") "
                        + rewritten.joined(separator: ", ") + checkpoint)
            }
        }
    }
}

/// `findmy retention set --device ID | --user NAME --days N | --clear`: an admin's override.
enum RetentionCommand {
    static let command = Command(
        name: "retention", summary: "set or clear a device's or a user's retention window"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy retention set (--device ID | --user NAME) (--days N | --clear) --data-dir DIR

        Sets how many days the fixes of one device, or of every device of one user, are kept (a device's
        own window wins over its user's), or clears the override. The change is an event in the log; the
        next compaction applies it (docs/retention.md). Through the server's admin socket when it runs.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["data-dir", "device", "user", "days"], flags: ["clear", "json"])
        if options.flag("help") || options.positional.isEmpty {
            print(help)
            return options.flag("help") ? 0 : 2
        }
        guard options.positional == ["set"] else { throw UsageError("the only subcommand is 'set'") }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        var writer = JSONWriter(capacity: 96)
        writer.beginObject()
        switch (options.value("device"), options.value("user")) {
        case (let device?, nil):
            guard let id = Int64(device) else { throw UsageError("--device takes a device id (a number)") }
            writer.key("device")
            writer.int64(id)
        case (nil, let user?):
            writer.key("user")
            writer.string(user)
        default:
            throw UsageError("give exactly one of --device ID and --user NAME")
        }
        writer.key("days")
        switch (options.value("days"), options.flag("clear")) {
        case (let days?, false):
            guard let number = Int64(days) else { throw UsageError("--days takes a whole number") }
            writer.int64(number)
        case (nil, true): writer.null()
        default: throw UsageError("give exactly one of --days N and --clear")
        }
        writer.endObject()
        let answer = try AdminCall.send(data: data, "POST", "/admin/retention", body: writer.bytes) { log in
            let service = try IngestService(log: log)
            var router = GuardedRouter(service: service, listener: .adminSocket)
            service.addAdminRoutes(to: &router)
            return (try router.build(), {})
        }
        let document = try AdminCall.check(answer)
        if options.flag("json") {
            printLine(String(decoding: answer.body, as: UTF8.self))
        } else {
            let days =
                (try? document["days"]?.int64Value).map { "\($0) days" } ?? "cleared (back to the default)"
            printLine("retention \(days), offset \((try? document["offset"]?.int64Value) ?? 0)")
        }
        return 0
    }
}
