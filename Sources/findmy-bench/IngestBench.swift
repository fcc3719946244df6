import CLI
import Events
import HTTPClient
import JSON
import Synchronization
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench ingest --dir DIR [--seconds S]`: starts `findmy serve` as a child process on
/// loopback, drives it with keep-alive HTTP clients (one thread and connection each), and prints
/// one JSON object: per batch size and connection count the acknowledged fixes/s, p50/p99
/// latency and fsyncs per request, the log's own append rate for the same shape without HTTP
/// (measured in the same run), their ratio; each app's protocol against native with the same
/// fixes (`apps`, AppBench); and the server's peak resident memory.
enum IngestBench {
    static let command = Command(
        name: "ingest",
        summary: "reports over HTTP against findmy serve, and the log alone (fixes/s, latency)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench ingest --dir DIR [--seconds S] [--connections 1,16,64] [--fixes 1,100]
                                   [--client wrk|swift] [--wrk-script PATH] [--phases native,overland,owntracks,whole] [--rounds R]
                                   [--tracks same|distinct] [--whole-history FIXES] [--projector off|on]

        Starts `findmy serve` (the findmy beside findmy-bench, or $FINDMY_BIN) on DIR/server (a scratch
        directory: it is emptied first) at 127.0.0.1:0, enrols one device per connection, and reports for
        S seconds (default 3) per configuration. Then appends the same shapes straight to a log in
        DIR/baseline, for the HTTP-over-log ratio (phase `native`). Then each app's protocol against the
        native endpoint with the same fixes, one after the other: 1,000-fix batches at 16 connections as
        Overland sends them (phase `overland`), and single OwnTracks HTTP `location` messages at 64
        connections (phase `owntracks`); each with its ratio to native. --phases picks the phases
        (default those three); --rounds R (default 1) alternates native and the app R times, S seconds
        each, for a ratio that a changing machine load affects less. DIR/server runs with
        `--projector off` (ingest alone); --projector on runs it with its projectors and embedded
        PostgreSQL instead, so that native and each app are measured against the whole service.

        Phase `whole` (not in the default; wrk only): the whole service against ingest alone. A second
        server, DIR/whole, runs with its projectors and embedded PostgreSQL; each of R rounds sends
        single-fix reports at 64 connections for S seconds to the first server (--projector off), then
        to the whole service, every request a fix of its own. It prints the reports/s of each and their
        ratio; after each whole-service load the projector's lag (the log's durable end less its
        checkpoint, in records and in seconds) and the time until the main and the geofence projector
        held every record; and CPU seconds per million fixes of each findmy and of PostgreSQL (the
        postmaster and its processes, counted until the catch-up), PostgreSQL's WAL bytes per fix and
        its write transactions. Before the rounds the whole service's log holds --whole-history fixes of
        another device over 20 days (default 1,000,000), folded before the first round: tables of a
        server that has been running, and a projector that has folded that much (docs/benchmarks.md).
        Build with
        -c release to measure. The client runs on the same machine and takes CPU from the server, so the
        figures are a floor.

        --client wrk (the default when /usr/bin/wrk exists) drives the server with wrk, 2 threads,
        and ops/bench/report.lua (found from the working directory or next to the build, or
        --wrk-script): far cheaper per request than --client swift, one Swift thread and
        HTTPConnection per connection (which also checks each answer's body). Every phase uses the
        same client, so an app and native are always driven alike.

        --tracks distinct (with --client swift) gives each connection its own device's track (a
        different fix in every request), as phones send them; the default sends the same fixes from
        every connection. Bytes per fix on disk depend on it (docs/benchmarks.md).
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: [
                "dir", "seconds", "connections", "fixes", "client", "wrk-script", "phases", "rounds",
                "tracks", "whole-history", "projector",
            ],
            flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let seconds = Double(try options.integer("seconds", default: 3))
        let connectionCounts = try list(options.value("connections") ?? "1,16,64")
        let batchSizes = try list(options.value("fixes") ?? "1,100")
        let client = try clientName(options)
        let phases = try phaseNames(options)
        // --tracks distinct: each connection (device) reports its own track, as phones do (the
        // bytes per fix on disk depend on it); the default sends the same fixes from everyone.
        let distinctTracks = options.value("tracks") == "distinct"
        let projector = options.value("projector") ?? "off"
        guard projector == "off" || projector == "on" else {
            throw UsageError("--projector is off or on, got '\(projector)'")
        }
        guard !distinctTracks || client == "swift" else {
            throw UsageError("--tracks distinct needs --client swift (wrk sends one body)")
        }
        let wrk = client == "wrk" ? try WrkDriver(root: root, script: options.value("wrk-script")) : nil
        guard !phases.contains("whole") || wrk != nil else {
            throw UsageError(
                "--phases whole needs wrk (\(WrkDriver.executable)): each request's own fix is the wrk script's"
            )
        }
        try PosixFileIO().makeDirectory(root)
        let serverDirectory = root + "/server"
        if projector == "on" {
            try WholeServiceBench.freshServerDirectory(serverDirectory, in: root)
        } else {
            removeData(serverDirectory)
        }

        let user = try addUser(serverDirectory, name: "bench")
        let server = try ChildServer(
            dataDirectory: serverDirectory, logPath: root + "/server.log", projector: projector == "on")
        defer { server.stop() }
        let drive = { (target: LoadTarget) throws -> LoadTarget.Result in
            try wrk?.drive(server.address, target, seconds: seconds)
                ?? target.drive(server.address, seconds: seconds)
        }
        let setup = HTTPConnection(address: server.address)
        let deviceTokens = try enrolDevices(
            max(connectionCounts.max() ?? 1, AppBench.shapes.map(\.connections).max()!),
            address: server.address,
            userToken: user.token)

        var writer = JSONWriter()
        writer.beginObject()
        writer.key("client")
        writer.string(client)
        writer.key("seconds_per_run")
        writer.double(seconds)
        writer.key("runs")
        writer.beginArray()
        for fixes in phases.contains("native") ? batchSizes : [] {
            for connections in connectionCounts {
                try nativeRun(
                    fixes: fixes, connections: connections, tokens: deviceTokens,
                    distinctTracks: distinctTracks,
                    root: root, seconds: seconds, server: server, setup: setup, drive: drive, to: &writer)
            }
        }
        writer.endArray()
        let rounds = try options.integer("rounds", default: 1)
        // Each app's protocol against native, with the same fixes in the same run.
        AppBench.write(
            try AppBench.measure(
                apps: phases, user: "bench", tokens: deviceTokens, rounds: rounds,
                duplicates: { try server.metric("findmy_duplicate_batches_total", setup) },
                drive: drive), to: &writer)
        if phases.contains("whole"), let wrk {
            var whole = try WholeServiceBench(
                root: root, historyFixes: try options.integer("whole-history", default: 1_000_000))
            defer { whole.stop() }
            WholeServiceBench.write(
                try whole.measure(
                    alone: server, aloneTokens: Array(deviceTokens.prefix(WholeServiceBench.connections)),
                    rounds: rounds, seconds: seconds, wrk: wrk), to: &writer)
        }
        writer.key("server_peak_rss_bytes")
        writer.int64(server.peakResidentBytes())
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    private static func clientName(_ options: Options) throws -> String {
        let client = options.value("client") ?? (access(WrkDriver.executable, X_OK) == 0 ? "wrk" : "swift")
        guard client == "wrk" || client == "swift" else {
            throw UsageError("--client is wrk or swift, got '\(client)'")
        }
        if options.value("client") == nil && client == "swift" {
            // Its threads take far more of the server's CPU than wrk: figures not comparable with wrk's.
            let line =
                "findmy-bench ingest: no \(WrkDriver.executable) (apt-get install wrk): the Swift client drives the server\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
        }
        return client
    }

    private static func phaseNames(_ options: Options) throws -> Set<String> {
        let phases = Set(
            (options.value("phases") ?? "native,overland,owntracks").split(separator: ",").map(String.init))
        guard !phases.isEmpty, phases.isSubset(of: ["native", "whole"] + AppBench.shapes.map(\.app)) else {
            throw UsageError(
                "--phases is a list of native, overland, owntracks and whole, got '\(options.value("phases") ?? "")'"
            )
        }
        return phases
    }

    /// One native run: `connections` devices posting batches of `fixes` fixes, then the log alone
    /// at the same load for the ratio.
    private static func nativeRun(
        fixes: Int, connections: Int, tokens: [String], distinctTracks: Bool, root: String, seconds: Double,
        server: ChildServer, setup: HTTPConnection, drive: (LoadTarget) throws -> LoadTarget.Result,
        to writer: inout JSONWriter
    ) throws {
        let fsyncsBefore = try server.metric("findmy_log_fsyncs_total", setup)
        var track = TrackGenerator(seed: 1, startMicros: wallClockMicros() - 600_000_000)
        var target = nativeTarget(Array(tokens.prefix(connections)), track.next(fixes))
        if distinctTracks {
            target.connectionSuffixes = distinctTrackBodies(connections: connections, fixes: fixes)
        }
        let http = try drive(target)
        let fsyncs = try server.metric("findmy_log_fsyncs_total", setup) - fsyncsBefore
        let baseline = try LogBench.appendRate(
            root + "/baseline", fixesPerBatch: fixes, appenders: connections, seconds: seconds)
        LogBench.removeTree(root + "/baseline")
        writer.beginObject()
        writer.key("fixes_per_batch")
        writer.int64(Int64(fixes))
        writer.key("connections")
        writer.int64(Int64(connections))
        writer.key("requests_per_s")
        writer.double(http.requestsPerSecond.rounded())
        writer.key("acknowledged_fixes_per_s")
        writer.double(http.fixesPerSecond.rounded())
        writer.key("p50_ms")
        writer.double(rounded(Double(http.p50Micros) / 1000))
        writer.key("p99_ms")
        writer.double(rounded(Double(http.p99Micros) / 1000))
        writer.key("fsyncs_per_request")
        writer.double(rounded(fsyncs / Double(max(1, http.requests))))
        writer.key("failed_requests")
        writer.int64(Int64(http.failures))
        writer.key("log_only_fixes_per_s")
        writer.double(baseline.fixesPerSecond.rounded())
        writer.key("http_over_log_ratio")
        writer.double(rounded(http.fixesPerSecond / baseline.fixesPerSecond))
        writer.endObject()
    }

    /// Each connection's own track (a different fix in every request), as the tails of request bodies.
    private static func distinctTrackBodies(connections: Int, fixes: Int) -> [[[UInt8]]] {
        (0..<connections).map { device in
            // Ending near now, so that no fix is in the future of its arrival.
            var own = TrackGenerator(
                seed: UInt64(device) &* 7_919, startMicros: wallClockMicros() - 40 * 3_600_000_000
            )
            return (0..<max(50, 2_000 / fixes)).map { _ in
                Array(
                    ("\", \"fixes\": [" + own.next(fixes).map(fixJSON).joined(separator: ",")
                        + "]}").utf8)
            }
        }
    }

    static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }

    static func list(_ text: String) throws -> [Int] {
        try text.split(separator: ",").map {
            guard let number = Int($0), number > 0 else {
                throw UsageError("expected a list like 1,16,64, got '\(text)'")
            }
            return number
        }
    }

    static func removeData(_ directory: String) {
        LogBench.removeTree(directory + "/log/quarantine")
        LogBench.removeTree(directory + "/log")
        unlink(directory + "/admin.sock")
    }

    /// Native reports of `fixes` from one device per token: a fresh `batch_id` per request.
    static func nativeTarget(_ tokens: [String], _ fixes: [Fix]) -> LoadTarget {
        LoadTarget(
            path: "/api/find-my/report", authorizations: tokens.map { "Bearer \($0)" },
            headers: [("Content-Type", "application/json")], bodyPrefix: Array("{\"batch_id\": \"".utf8),
            bodySuffix: Array(("\", \"fixes\": [" + fixes.map(fixJSON).joined(separator: ",") + "]}").utf8),
            fixesPerRequest: fixes.count, expectedBody: nil)
    }

    /// A fix as a phone would send it, every optional field present.
    static func fixJSON(_ fix: Fix) -> String {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("latitude")
        writer.double(fix.latitude)
        writer.key("longitude")
        writer.double(fix.longitude)
        writer.key("accuracy_m")
        writer.double(fix.accuracyMeters ?? 10)
        writer.key("altitude_m")
        writer.double(fix.altitudeMeters ?? 34)
        writer.key("speed_mps")
        writer.double(max(0, fix.speedMetersPerSecond ?? 0))
        writer.key("heading_deg")
        writer.double(min(359.9, max(0, fix.headingDegrees ?? 0)))
        writer.key("battery_pct")
        writer.int64(Int64(fix.batteryPercent ?? 80))
        writer.key("is_charging")
        writer.bool(fix.isCharging ?? false)
        writer.key("source")
        writer.string(fix.source)
        writer.key("recorded_at")
        writer.string(RFC3339.formatMillis(fix.recordedAtMicros))
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
