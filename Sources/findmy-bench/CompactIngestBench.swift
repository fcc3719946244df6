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

/// `findmy-bench compact-ingest --dir DIR`: single-fix report latency over HTTP while the retention
/// compactor rewrites a large log and refolds the registry, against the same load without it, in one
/// run (docs/benchmarks.md, "Compaction at 100 M fixes while reports arrive"). The windows without a
/// compaction also tell the registry snapshotter's periodic writes apart.
enum CompactIngestBench {
    static let command = Command(
        name: "compact-ingest",
        summary: "report latency while the compactor rewrites a large log, against none, alternately"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench compact-ingest --dir DIR --fixes-total N [--fixes-per-record 100]
                                           [--devices 1000] [--connections 64] [--window-seconds 2]
                                           [--idle-windows 10] [--rounds 2] [--in-flight 64]
                                           [--reuse] [--erase-from 1]

        Makes a user with `findmy user add` in DIR/server (emptied first), writes a log of N fixes in
        records of FIXES-PER-RECORD fixes from DEVICES devices of that user straight to DIR/server/log,
        then starts `findmy serve` on it (no projector, no scheduled compaction) and enrols
        CONNECTIONS more devices over HTTP. Then ROUNDS times: IDLE-WINDOWS windows of WINDOW-SECONDS
        of single-fix reports at CONNECTIONS connections (wrk and ops/bench/report.lua when /usr/bin/wrk
        exists, else Swift threads); then the history of device ROUND is erased over the API (its
        batches are in every segment, so the compaction rewrites every one) and `findmy compact`
        runs against the server while the same windows follow each other until it returns. Then
        IDLE-WINDOWS more windows without. --reuse keeps a log an earlier run left in DIR/server (the
        user's token is rotated with `findmy user token`); --erase-from K erases device K in the first
        round, K+1 in the second (a device erased by an earlier run leaves nothing to compact). The
        compaction is asked for on the server's admin socket as `findmy compact` does, without its
        30 s answer timeout. One JSON object per window (phase idle or compacting; for
        compacting whether the registry refold had begun; whether the snapshotter wrote a snapshot
        during it), one per compaction (its report, seconds, the server's peak memory) and a summary:
        the median of the windows' p99 per kind and their ratio to idle. Build with -c release.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: [
                "dir", "fixes-total", "fixes-per-record", "devices", "connections", "window-seconds",
                "idle-windows", "rounds", "in-flight", "wrk-script", "erase-from",
            ],
            flags: ["reuse"])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let fixesTotal = try options.integer("fixes-total", default: 10_000_000)
        let fixesPerRecord = try options.integer("fixes-per-record", default: 100)
        let devices = try options.integer("devices", default: 1000)
        let connections = try options.integer("connections", default: 64)
        let windowSeconds = Double(try options.integer("window-seconds", default: 2))
        let idleWindows = try options.integer("idle-windows", default: 10)
        let rounds = try options.integer("rounds", default: 2)
        let inFlightMax = try options.integer("in-flight", default: 64)
        let eraseFrom = try options.integer("erase-from", default: 1)
        guard fixesTotal > 0, fixesPerRecord > 0, eraseFrom > 0, devices >= eraseFrom + rounds - 1,
            connections > 0, idleWindows > 0, rounds > 0, windowSeconds > 0
        else {
            throw UsageError(
                "every count must be positive, and --devices at least --erase-from + --rounds - 1")
        }
        let wrk =
            access(WrkDriver.executable, X_OK) == 0
            ? try WrkDriver(root: root, script: options.value("wrk-script")) : nil
        try PosixFileIO().makeDirectory(root)
        let serverDirectory = root + "/server"
        let reusing =
            options.flag("reuse")
            && (try? PosixFileIO().list(serverDirectory + "/log"))?.contains(where: { $0.hasSuffix(".seg") })
                == true
        let user = try prepareHistory(
            serverDirectory, reusing: reusing, fixesTotal: fixesTotal, fixesPerRecord: fixesPerRecord,
            devices: devices, inFlightMax: inFlightMax)

        let serverLog = root + "/server.log"
        let started = monotonicMicros()
        let server = try ChildServer(
            dataDirectory: serverDirectory, logPath: serverLog,
            arguments: ["--compact-first-run-seconds", "86400", "--compact-interval-seconds", "86400"])
        defer { server.stop() }
        printLine("{\"server_ready_millis\":\((monotonicMicros() - started) / 1000)}")
        let setup = HTTPConnection(address: server.address)
        let tokens = try enrolIngestDevices(connections, setup, userToken: user.token)
        var track = TrackGenerator(seed: 7, startMicros: wallClockMicros() - 600_000_000)
        let target = IngestBench.nativeTarget(tokens, track.next(1))
        let snapshots = serverDirectory + "/snapshots"

        var runner = WindowRunner(
            server: server, wrk: wrk, target: target, seconds: windowSeconds, snapshots: snapshots,
            serverLog: serverLog)
        for round in 1...rounds {
            for _ in 0..<idleWindows { try runner.measure(round: round, phase: "idle", compaction: nil) }
            let erase = try setup.send(
                "POST", "/api/find-my/devices/\(eraseFrom + round - 1)/erase",
                headers: [("Authorization", "Bearer \(user.token)")], body: Array("{}".utf8))
            guard erase.status == 200 else { throw UsageError("erasure failed: \(erase.bodyText)") }
            let compaction = CompactionRun(
                adminSocket: serverDirectory + "/admin.sock",
                refoldLinesBefore: lineCount(serverLog, containing: "registry_snapshot_refolding"))
            while !compaction.isDone {
                try runner.measure(round: round, phase: "compacting", compaction: compaction)
            }
            let (report, seconds) = try compaction.finish()
            printLine(
                "{\"round\":\(round),\"compaction_seconds\":\(seconds),"
                    + "\"server_peak_rss_bytes\":\(server.peakResidentBytes()),\"report\":\(report)}")
        }
        for _ in 0..<idleWindows { try runner.measure(round: rounds + 1, phase: "idle", compaction: nil) }
        printLine(summary(runner.windows))
        return 0
    }

    /// The history the server starts from: the one a previous run left (`--reuse`, its user's token
    /// rotated), or a new log of `fixesTotal` fixes. Returns the user and a token of theirs.
    private static func prepareHistory(
        _ serverDirectory: String, reusing: Bool, fixesTotal: Int, fixesPerRecord: Int, devices: Int,
        inFlightMax: Int
    ) throws -> (userID: UInt64, token: String) {
        let started = monotonicMicros()
        if reusing {
            return try rotatedToken(serverDirectory, name: "bench")
        } else {
            LogBench.removeTree(serverDirectory + "/snapshots")
            IngestBench.removeData(serverDirectory)
            let user = try addUser(serverDirectory, name: "bench")
            try writeHistory(
                serverDirectory + "/log", owner: user.userID, fixesTotal: fixesTotal,
                fixesPerRecord: fixesPerRecord, devices: devices, inFlightMax: inFlightMax)
            printLine(
                "{\"wrote_fixes\":\(fixesTotal),\"fixes_per_record\":\(fixesPerRecord),"
                    + "\"seconds\":\((monotonicMicros() - started) / 1_000_000)}")
            return user
        }
    }

    /// Enrols `count` devices over the API; returns their tokens.
    private static func enrolIngestDevices(_ count: Int, _ setup: HTTPConnection, userToken: String) throws
        -> [String]
    {
        var tokens: [String] = []
        let uuidRun = String(UInt64.random(in: 0...0xFFFF_FFFF), radix: 16).leftPadded(8)
        for index in 0..<count {
            let body =
                "{\"device_uuid\": \"\(uuidRun)-0000-4000-9000-\(String(index + 1).leftPadded(12))\", \"name\": \"ingest \(index)\", \"platform\": \"linux\"}"
            let response = try setup.send(
                "POST", "/api/find-my/devices", headers: [("Authorization", "Bearer \(userToken)")],
                body: Array(body.utf8))
            guard response.status == 201 else { throw UsageError("enrolment failed: \(response.bodyText)") }
            tokens.append(try JSONParser.parse(response.body)["device_token"]!.stringValue)
        }
        return tokens
    }

    /// Drives the server for one window at a time and keeps each window's figures.
    struct WindowRunner {
        let server: ChildServer
        let wrk: WrkDriver?
        let target: LoadTarget
        let seconds: Double
        let snapshots: String
        let serverLog: String
        var windows: [Window] = []

        mutating func measure(round: Int, phase: String, compaction: CompactionRun?) throws {
            let before = CompactIngestBench.snapshotNames(snapshots)
            let refolding = compaction.map { _ in
                CompactIngestBench.lineCount(serverLog, containing: "registry_snapshot_refolding")
            }
            let result =
                try wrk?.drive(server.address, target, seconds: seconds)
                ?? target.drive(server.address, seconds: seconds)
            let written = !CompactIngestBench.snapshotNames(snapshots).subtracting(before).isEmpty
            let measured = Window(
                round: round, phase: phase,
                refold: refolding.map { $0 > (compaction?.refoldLinesBefore ?? 0) } ?? false,
                snapshotWritten: written, result: result)
            windows.append(measured)
            printLine(measured.json)
        }
    }

    struct Window {
        var round: Int
        var phase: String
        var refold: Bool
        var snapshotWritten: Bool
        var result: LoadTarget.Result

        var kind: String {
            phase == "idle"
                ? (snapshotWritten ? "idle_with_snapshot_write" : "idle")
                : (refold ? "compacting_refold" : "compacting_rewrite")
        }

        var json: String {
            "{\"round\":\(round),\"phase\":\"\(phase)\",\"kind\":\"\(kind)\","
                + "\"requests_per_s\":\(result.requestsPerSecond.rounded()),"
                + "\"p50_ms\":\(IngestBench.rounded(Double(result.p50Micros) / 1000)),"
                + "\"p99_ms\":\(IngestBench.rounded(Double(result.p99Micros) / 1000)),"
                + "\"failed\":\(result.failures)}"
        }
    }

    /// Median p99 and rate per kind of window, and each kind's p99 over idle's.
    static func summary(_ windows: [Window]) -> String {
        let idle =
            (median(windows.filter { $0.kind == "idle" }.map { Double($0.result.p99Micros) / 1000 }) ?? 0)
        var parts: [String] = []
        for kind in [
            "idle", "idle_with_snapshot_write", "compacting", "compacting_rewrite", "compacting_refold",
        ] {
            let chosen = windows.filter { kind == "compacting" ? $0.phase == "compacting" : $0.kind == kind }
            guard !chosen.isEmpty else { continue }
            let p99 = (median(chosen.map { Double($0.result.p99Micros) / 1000 }) ?? 0)
            let rate = (median(chosen.map(\.result.requestsPerSecond)) ?? 0)
            parts.append(
                "\"\(kind)\":{\"windows\":\(chosen.count),\"median_p99_ms\":\(IngestBench.rounded(p99)),"
                    + "\"median_requests_per_s\":\(rate.rounded()),"
                    + "\"p99_over_idle\":\(idle > 0 ? IngestBench.rounded(p99 / idle) : 0)}")
        }
        return "{\"summary\":{" + parts.joined(separator: ",") + "}}"
    }

    /// `findmy compact --json` against the running server, on a thread of its own.
    final class CompactionRun: Sendable {
        final class Outcome: Sendable {
            let result = Mutex<Result<String, UsageError>?>(nil)
        }
        let refoldLinesBefore: Int
        private let outcome = Outcome()
        private let started = monotonicMicros()
        private let thread: pthread_t

        /// What `findmy compact` sends, without its 30 s answer timeout (a run at 100 M fixes
        /// takes minutes).
        init(adminSocket: String, refoldLinesBefore: Int) {
            self.refoldLinesBefore = refoldLinesBefore
            let outcome = self.outcome
            thread = spawnThread {
                let result: Result<String, UsageError>
                do {
                    let connection = HTTPConnection(
                        address: "unix:" + adminSocket, reconnect: false, timeoutSeconds: 86_400)
                    let answer = try connection.send("POST", "/admin/compact", body: Array("{}".utf8))
                    result =
                        answer.status == 200
                        ? .success(answer.bodyText) : .failure(UsageError("compaction: \(answer.bodyText)"))
                } catch {
                    result = .failure(UsageError("compaction: \(error)"))
                }
                outcome.result.withLock { $0 = result }
            }
        }

        var isDone: Bool { outcome.result.withLock { $0 != nil } }

        /// The run's JSON report and its seconds, once done.
        func finish() throws -> (String, Double) {
            pthread_join(thread, nil)
            let seconds = Double(monotonicMicros() - started) / 1_000_000
            return (try outcome.result.withLock { $0! }.get(), (seconds * 10).rounded() / 10)
        }
    }

    /// A new token for an existing user, made offline as `findmy user token NAME --rotate` does.
    static func rotatedToken(_ dataDirectory: String, name: String) throws -> (userID: UInt64, token: String)
    {
        let output = try runCapturing(
            try findmyExecutable(),
            ["findmy", "user", "token", name, "--rotate", "--json", "--data-dir", dataDirectory])
        guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("{") }) else {
            throw UsageError("findmy user token printed no JSON: \(output)")
        }
        let rotated = try JSONParser.parse(Array(line.utf8))
        return (UInt64(try rotated["user_id"]!.int64Value), try rotated["token"]!.stringValue)
    }

    static func snapshotNames(_ directory: String) -> Set<String> {
        Set(((try? PosixFileIO().list(directory)) ?? []).filter { $0.hasSuffix(".snap") })
    }

    static func lineCount(_ path: String, containing needle: String) -> Int {
        guard let file = fopen(path, "r") else { return 0 }
        defer { fclose(file) }
        var count = 0
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0 {
            if let line, strstr(line, needle) != nil { count += 1 }
        }
        return count
    }

    /// Devices 1...`devices` of user `owner` (the ids a server gives next come after them), then
    /// fix batches round-robin over them, at most `inFlightMax` appends queued (group commit).
    static func writeHistory(
        _ log: String, owner: UInt64, fixesTotal: Int, fixesPerRecord: Int, devices: Int, inFlightMax: Int
    ) throws {
        let writer = try LogWriter(directory: log)
        defer { writer.close() }
        for device in 1...devices {
            let id = UInt64(device)
            _ = try writer.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: id, userID: owner, deviceUUID: UUID128.random(), name: "phone \(device)",
                        platform: "ios", model: "iPhone")))
            _ = try writer.append(
                .deviceTokenIssued(DeviceTokenIssued(deviceID: id, tokenHash: StartupBench.bytes(id << 20))))
        }
        let inFlight = Atomic<Int>(0)
        let failed = Atomic<Bool>(false)
        var tracks = (0..<devices).map { TrackGenerator(seed: UInt64($0), startMicros: wallClockMicros()) }
        for index in 0..<(fixesTotal / fixesPerRecord) {
            while inFlight.load(ordering: .acquiring) >= inFlightMax { sched_yield() }
            let device = index % devices
            let batch = FixBatch(
                deviceID: UInt64(device + 1), batchID: UUID128.random(),
                fixes: tracks[device].next(fixesPerRecord))
            inFlight.add(1, ordering: .relaxed)
            writer.append(EventCodec.encode(.fixBatch(batch), receivedAtMicros: wallClockMicros())) {
                result in
                if case .failure = result { failed.store(true, ordering: .relaxed) }
                inFlight.subtract(1, ordering: .releasing)
            }
        }
        while inFlight.load(ordering: .acquiring) > 0 { sched_yield() }
        precondition(!failed.load(ordering: .relaxed), "an append failed")
    }
}
