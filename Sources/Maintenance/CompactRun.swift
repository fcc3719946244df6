import CLI
import Compactor
import Core
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

/// `findmy compact` once parsed: one compaction run now (or as of a given time), through the
/// server's admin socket or alone.
package enum CompactRun {
    /// Starts the run `request` asks for (as-of, dry run) and follows it to its end, then prints
    /// its report; without a server, with `settings` and the database at `databaseURL`.
    package static func run(
        data: String, request: [UInt8], settings: RetentionSettings, databaseURL: String?, json: Bool
    ) throws -> Int32 {
        var compactorOptions = Compactor.Options()
        compactorOptions.settings = settings
        let report = try AdminCall.session(data: data) { log in
            let database = try Database.open(dataDirectory: data, url: databaseURL)
            // As inside the server: the registry from the newest snapshot, and a new snapshot of
            // the compacted log before the run reports done (docs/snapshots.md).
            let snapshots = RegistrySnapshotStore(directory: data + "/snapshots")
            let service = try IngestService(log: log, snapshots: snapshots)
            let snapshotter = RegistrySnapshotter(registry: service.identity.store, store: snapshots)
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
            try follow(call, body: request)
        }
        if json {
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
