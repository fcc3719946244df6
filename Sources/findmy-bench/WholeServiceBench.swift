import CLI
import Events
import HTTPClient
import JSON
import Postgres
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench ingest --phases whole`: the whole service against ingest alone, single-fix
/// reports at 64 connections (wrk). Two servers on the same machine: the driver's `--projector off`
/// server, and one more with its projectors on (the default embedded PostgreSQL). Each round loads
/// ingest alone, then the whole service, `seconds` each; after the whole service's load it reads
/// the projector's lag (the log's durable end less its checkpoint) and times the catch-up, then
/// charges the CPU both servers and PostgreSQL spent on the round's fixes. Every request carries a
/// different fix (`LoadTarget.recordedFromMillis`): the same fix again would be folded as a
/// duplicate, not as a phone's next report.
struct WholeServiceBench {
    static let connections = 64

    /// One side of a round.
    struct Side {
        var load = LoadTarget.Result()
        /// Records appended during the load (single-fix reports: fixes).
        var fixes = 0
        var findmyCPUMicros: Int64 = 0
        var postgresCPUMicros: Int64 = 0
    }

    struct Round {
        var alone = Side()
        var whole = Side()
        /// The log's durable end less the main projector's checkpoint when the load stopped.
        var lagRecords: Int64 = 0
        /// `lag_seconds` of /healthz then: the age of the oldest record not folded.
        var lagSeconds = 0.0
        /// From the load's end until the main projector, then the geofence one, held every record.
        var catchUpSeconds = 0.0
        var geofenceCatchUpSeconds = 0.0
        /// PostgreSQL's WAL written and transaction ids assigned (write transactions: both
        /// projectors' and the geofence notifier's) during the whole service's load and catch-up.
        var walBytes: Int64 = 0
        var transactions: Int64 = 0
        var loadAverage = 0.0

        var ratio: Double {
            alone.load.fixesPerSecond > 0 ? whole.load.fixesPerSecond / alone.load.fixesPerSecond : 0
        }
    }

    let root: String
    let whole: ChildServer
    let wholeTokens: [String]
    let health: HTTPConnection
    let sql: PostgresConnection
    let postmaster: pid_t
    /// Each load's fixes start here (Unix ms) and the next load's after its last: every fix of the
    /// run differs from every other, across rounds and servers.
    var recordedFromMillis = wallClockMicros() / 1000 - 24 * 3_600_000

    /// Starts the whole service's server in `root`/whole (emptied first), its log seeded with
    /// `historyFixes` fixes of another device over 20 days (a server that has been running: tables
    /// of that size, a projector that folded them), once they are folded; then enrols its devices.
    init(root: String, historyFixes: Int) throws {
        self.root = root
        let directory = root + "/whole"
        try Self.freshServerDirectory(directory, in: root)
        let user = try addUser(directory, name: "bench")
        if historyFixes > 0 { try ExportBench.seed(directory, userID: user.userID, fixes: historyFixes) }
        whole = try ChildServer(
            dataDirectory: directory, logPath: root + "/whole-server.log", projector: true)
        health = HTTPConnection(address: whole.address, timeoutSeconds: 120)
        try ReadBench.waitForProjection(health)
        wholeTokens = try enrolDevices(Self.connections, address: whole.address, userToken: user.token)
        try ReadBench.waitForProjection(health)
        sql = try PostgresConnection(try EmbeddedPostgres(dataDirectory: directory).conninfo)
        guard let pid = ProjectBench.postmasterPID(pgData: directory + "/postgres/data") else {
            throw UsageError(
                "cannot find the whole service's PostgreSQL (\(directory)/postgres/data/postmaster.pid)")
        }
        postmaster = pid
    }

    /// `directory` (in `root`) emptied for a server with its embedded PostgreSQL: a cluster of an
    /// earlier run stopped first, and `root` passable by PostgreSQL's OS user.
    static func freshServerDirectory(_ directory: String, in root: String) throws {
        if let cluster = try? EmbeddedPostgres(dataDirectory: directory) { try? cluster.stop() }
        try ReadBench.removeRecursively(directory)
        try PosixFileIO().makeDirectory(directory)
        allowTraversal(root)
    }

    func stop() {
        sql.close()
        health.close()
        whole.stop()
    }

    /// `rounds` rounds, each ingest alone on `alone` (its devices `aloneTokens`), then the whole service.
    mutating func measure(
        alone: ChildServer, aloneTokens: [String], rounds: Int, seconds: Double, wrk: WrkDriver
    ) throws -> [Round] {
        try (0..<rounds).map { _ in
            var round = Round()
            let cpuBefore = APIDriver.cpuMicros(alone.pid)
            round.alone.load = try wrk.drive(alone.address, target(aloneTokens), seconds: seconds)
            round.alone.findmyCPUMicros = APIDriver.cpuMicros(alone.pid) - cpuBefore
            round.alone.fixes = round.alone.load.requests
            recordedFromMillis += Int64(round.alone.load.requests) + 1_000
            try measureWhole(&round, seconds: seconds, wrk: wrk)
            recordedFromMillis += Int64(round.whole.load.requests) + 1_000
            round.loadAverage = APIDriver.loadAverage()
            return round
        }
    }

    private func measureWhole(_ round: inout Round, seconds: Double, wrk: WrkDriver) throws {
        let before = try status()
        let database = try databaseCounters()
        let cpuBefore = (
            findmy: APIDriver.cpuMicros(whole.pid), postgres: APIDriver.treeCPUMicros(postmaster)
        )
        round.whole.load = try wrk.drive(whole.address, target(wholeTokens), seconds: seconds)
        let stopped = monotonicMicros()
        let end = try status()
        round.lagRecords = end.durableEnd - end.checkpoint
        round.lagSeconds = end.lagSeconds
        // The time from the load's end until each projector held every record appended by then.
        var caughtUp = end
        var mainSeconds: Double? = end.checkpoint >= end.durableEnd ? 0 : nil
        var fenceSeconds: Double? = end.geofences >= end.durableEnd ? 0 : nil
        while mainSeconds == nil || fenceSeconds == nil {
            guard monotonicMicros() - stopped < 600_000_000 else {
                throw UsageError("the whole service's projectors did not catch up within 600 s")
            }
            usleep(2_000)
            caughtUp = try status()
            let seconds = Double(monotonicMicros() - stopped) / 1_000_000
            if mainSeconds == nil && caughtUp.checkpoint >= end.durableEnd { mainSeconds = seconds }
            if fenceSeconds == nil && caughtUp.geofences >= end.durableEnd { fenceSeconds = seconds }
        }
        round.catchUpSeconds = mainSeconds ?? 0
        round.geofenceCatchUpSeconds = fenceSeconds ?? 0
        round.whole.fixes = Int(end.durableEnd - before.durableEnd)
        round.whole.findmyCPUMicros = APIDriver.cpuMicros(whole.pid) - cpuBefore.findmy
        round.whole.postgresCPUMicros = APIDriver.treeCPUMicros(postmaster) - cpuBefore.postgres
        let after = try databaseCounters()
        round.walBytes = after.walBytes - database.walBytes
        round.transactions = after.nextTransaction - database.nextTransaction
    }

    /// Single-fix native reports from `tokens`' devices, each request a fix of its own.
    private func target(_ tokens: [String]) -> LoadTarget {
        var track = TrackGenerator(seed: 1, startMicros: wallClockMicros() - 600_000_000)
        let fix = IngestBench.fixJSON(track.next(1)[0])
        // The fix's own time gives way to the marker the wrk script fills in.
        guard let time = fix.firstRange(of: "\"recorded_at\":\"") else {
            preconditionFailure("fixJSON has recorded_at")
        }
        let marked = fix[..<time.upperBound] + LoadTarget.recordedAtMarker + "\"}"
        var target = LoadTarget(
            path: "/api/find-my/report", authorizations: tokens.map { "Bearer \($0)" },
            headers: [("Content-Type", "application/json")], bodyPrefix: Array("{\"batch_id\": \"".utf8),
            bodySuffix: Array(("\", \"fixes\": [" + marked + "]}").utf8), fixesPerRequest: 1,
            expectedBody: nil)
        target.recordedFromMillis = recordedFromMillis
        return target
    }

    private struct Status {
        var durableEnd: Int64
        var checkpoint: Int64
        var geofences: Int64
        var lagSeconds: Double
    }

    private func status() throws -> Status {
        let document = try JSONParser.parse(try health.send("GET", "/healthz").body)
        guard let end = try document["durable_end"]?.int64Value,
            let checkpoint = try document["projector"]?["checkpoint"]?.int64Value
        else { throw UsageError("the whole service's /healthz has no durable_end or projector checkpoint") }
        return Status(
            durableEnd: end, checkpoint: checkpoint,
            geofences: try document["geofences"]?["checkpoint"]?.int64Value ?? end,
            lagSeconds: try document["projector"]?["lag_seconds"]?.doubleValue ?? 0)
    }

    /// WAL written so far (its insert position in bytes) and the next transaction id: neither is
    /// delayed as PostgreSQL's cumulative statistics are, and reading them assigns no id.
    private func databaseCounters() throws -> (walBytes: Int64, nextTransaction: Int64) {
        let result = try sql.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint, pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
        )
        return (try result.int64(0, 0) ?? 0, try result.int64(0, 1) ?? 0)
    }
}

extension WholeServiceBench {
    /// The `whole` member of the ingest bench's JSON: each round, then the rates over all rounds
    /// and the CPU per million fixes over all rounds.
    static func write(_ rounds: [Round], to writer: inout JSONWriter) {
        func perMillion(_ micros: [Int64], _ fixes: [Int]) -> Double {
            let total = fixes.reduce(0, +)
            return total == 0 ? 0 : IngestBench.rounded(Double(micros.reduce(0, +)) / Double(total))
        }
        writer.key("whole")
        writer.beginObject()
        writer.key("connections")
        writer.int64(Int64(connections))
        let alone = LoadTarget.Result.combined(rounds.map(\.alone.load))
        let whole = LoadTarget.Result.combined(rounds.map(\.whole.load))
        writer.key("alone_reports_per_s")
        writer.double(alone.fixesPerSecond.rounded())
        writer.key("whole_reports_per_s")
        writer.double(whole.fixesPerSecond.rounded())
        writer.key("whole_over_alone_ratio")
        writer.double(IngestBench.rounded(whole.fixesPerSecond / max(1, alone.fixesPerSecond)))
        writer.key("median_round_ratio")
        writer.double(IngestBench.rounded(median(rounds.map(\.ratio)) ?? 0))
        // CPU seconds per million fixes (µs per fix): over every round.
        writer.key("alone_findmy_cpu_s_per_million_fixes")
        writer.double(perMillion(rounds.map(\.alone.findmyCPUMicros), rounds.map(\.alone.fixes)))
        writer.key("whole_findmy_cpu_s_per_million_fixes")
        writer.double(perMillion(rounds.map(\.whole.findmyCPUMicros), rounds.map(\.whole.fixes)))
        writer.key("whole_postgres_cpu_s_per_million_fixes")
        writer.double(perMillion(rounds.map(\.whole.postgresCPUMicros), rounds.map(\.whole.fixes)))
        writer.key("rounds")
        writer.beginArray()
        for round in rounds { write(round, to: &writer) }
        writer.endArray()
        writer.endObject()
    }

    private static func write(_ round: Round, to writer: inout JSONWriter) {
        let fixes = Double(max(1, round.whole.fixes))
        writer.beginObject()
        for (key, value) in [
            ("alone_reports_per_s", round.alone.load.fixesPerSecond.rounded()),
            ("whole_reports_per_s", round.whole.load.fixesPerSecond.rounded()),
            ("ratio", IngestBench.rounded(round.ratio)),
            ("alone_p99_ms", IngestBench.rounded(Double(round.alone.load.p99Micros) / 1000)),
            ("whole_p99_ms", IngestBench.rounded(Double(round.whole.load.p99Micros) / 1000)),
            ("lag_records_at_end", Double(round.lagRecords)),
            ("lag_seconds_at_end", IngestBench.rounded(round.lagSeconds)),
            ("catch_up_seconds", IngestBench.rounded(round.catchUpSeconds)),
            ("geofence_catch_up_seconds", IngestBench.rounded(round.geofenceCatchUpSeconds)),
            (
                "alone_findmy_cpu_s_per_million_fixes",
                IngestBench.rounded(Double(round.alone.findmyCPUMicros) / Double(max(1, round.alone.fixes)))
            ),
            (
                "whole_findmy_cpu_s_per_million_fixes",
                IngestBench.rounded(Double(round.whole.findmyCPUMicros) / fixes)
            ),
            (
                "whole_postgres_cpu_s_per_million_fixes",
                IngestBench.rounded(Double(round.whole.postgresCPUMicros) / fixes)
            ),
            ("wal_bytes_per_fix", IngestBench.rounded(Double(round.walBytes) / fixes)),
            // Every write transaction: both projectors', and the geofence notifier's polls (about 20 a second).
            ("postgres_write_transactions", Double(round.transactions)),
            ("failed_requests", Double(round.alone.load.failures + round.whole.load.failures)),
            ("load_average", round.loadAverage),
        ] {
            writer.key(key)
            writer.double(value)
        }
        writer.endObject()
    }
}
