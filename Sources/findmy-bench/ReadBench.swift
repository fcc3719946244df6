import CLI
import Events
import HTTPClient
import JSON
import Postgres
import ReadAPI
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench read --dir DIR`: the read API's latency over HTTP against a release server.
///
/// Seeds a log directly (no HTTP): one user with `devices` devices, each with one recent fix, and
/// device 1 with `historyDays` days of fixes at a 5-minute cadence (30 days: 8,640 fixes). Starts
/// `findmy serve` on it, waits until the projector has folded the whole log into its embedded
/// PostgreSQL, then times `GET /api/find-my/devices` and the history page of device 1 (one
/// keep-alive connection, requests back to back, after a warm-up) and prints p50/p99 as JSON.
///
/// The baseline, measured in the same run: the read API's own statements (`ReadService.
/// devicesStatement`, `locationsStatement`) over a bare `PostgresConnection` to the same cluster,
/// without HTTP, authentication or JSON. Each HTTP figure is also printed as a ratio to it: what the
/// server adds on top of what PostgreSQL must do anyway.
enum ReadBench {
    static let command = Command(
        name: "read", summary: "the read API's latency over HTTP, against its bare SQL (p50, p99)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench read --dir DIR [--devices 1000] [--history-days 30] [--requests 1000]
                                 [--month-fixes 250000] [--month-walks 5]

        --month-fixes: device 2's month (29 days at 10 s by default, inside the 30-day retention), read
        with the largest page from start to end --month-walks times over HTTP and as many over a bare
        connection (fixes/s); 0 leaves the phase out.

        DIR/server is a scratch directory: it is emptied first (log and embedded PostgreSQL). Build with
        -c release to measure. The client runs on the same machine and takes CPU from the server.
        """

    static let cadenceMicros: Int64 = 300_000_000
    static let historyBatchFixes = 288  // one day at 5 minutes

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["dir", "devices", "history-days", "requests", "month-fixes", "month-walks"],
            flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let deviceCount = try options.integer("devices", default: 1_000)
        let historyDays = try options.integer("history-days", default: 30)
        let requests = try options.integer("requests", default: 1_000)
        let monthFixes = try options.integer("month-fixes", default: 250_000)
        let monthWalks = try options.integer("month-walks", default: 5)
        guard deviceCount >= 1, historyDays >= 1, requests >= 10, monthFixes >= 0, monthWalks >= 1 else {
            throw UsageError(
                "--devices and --history-days must be at least 1, --requests at least 10, --month-walks at least 1"
            )
        }
        guard monthFixes == 0 || deviceCount >= 2 else {
            throw UsageError("--month-fixes needs --devices 2 or more")
        }
        try PosixFileIO().makeDirectory(root)
        allowTraversal(root)
        let serverDirectory = root + "/server"
        try removeRecursively(serverDirectory)

        let user = try addUser(serverDirectory, name: "bench")
        let seeded = try seed(
            serverDirectory, userID: user.userID, devices: deviceCount, historyDays: historyDays,
            monthFixes: monthFixes)
        let historyFixes = seeded.historyFixes

        let start = monotonicMicros()
        var server = try ChildServer(
            dataDirectory: serverDirectory, logPath: root + "/server.log", projector: true)
        defer { server.stop() }
        var connection = HTTPConnection(address: server.address)
        try waitForProjection(connection)
        let projectedSeconds = Double(monotonicMicros() - start) / 1_000_000
        try settle(connection, serverDirectory)

        let headers = [("Authorization", "Bearer \(user.token)")]
        let wholeList = { (body: [UInt8]) throws -> Bool in
            try JSONParser.parse(body)["devices"]?.arrayValue.count == deviceCount
        }
        // The first list writes every device; the rest reuse them (DeviceCardCache).
        let list = try measure(
            connection, "/api/find-my/devices", headers, requests: requests, check: wholeList)
        let changing = try measureChangingList(
            connection, headers, deviceUUIDs: seeded.deviceUUIDs, requests: max(10, requests / 5),
            check: wholeList)
        let history = try measure(
            connection, "/api/find-my/devices/1/locations?limit=10000", headers,
            requests: max(10, requests / 5)
        ) { body in
            let document = try JSONParser.parse(body)
            return try document["locations"]?.arrayValue.count == historyFixes
                && document["next_cursor"] == .null
        }
        // Device 2's month and its one recent fix.
        let month =
            monthFixes == 0
            ? nil
            : try ReadMonthBench.measureHTTP(
                connection, headers, expectedFixes: monthFixes + 1, walks: monthWalks,
                processes: ReadMonthBench.Processes(
                    server: server.pid,
                    postmaster: ProjectBench.postmasterPID(pgData: serverDirectory + "/postgres/data")))
        let peakResidentBytes = server.peakResidentBytes()

        // The same list from a server that keeps no devices: every list is read and written whole.
        server.stop()
        server = try ChildServer(
            dataDirectory: serverDirectory, logPath: root + "/server-uncached.log", projector: true,
            arguments: ["--device-cache-mb", "0"])
        connection = HTTPConnection(address: server.address)
        try waitForProjection(connection)
        let uncached = try measure(
            connection, "/api/find-my/devices", headers, requests: requests, check: wholeList)

        let bare = try measureBareSQL(
            serverDirectory, ownerID: user.userID, devices: deviceCount, historyFixes: historyFixes,
            requests: requests, monthWalks: month == nil ? 0 : monthWalks)
        if let month, let bareMonth = bare.month,
            bareMonth.copy.fixes != month.fixes || bareMonth.result.fixes != month.fixes
        {
            throw UsageError(
                "the bare month walks gave \(bareMonth.copy.fixes) and \(bareMonth.result.fixes) fixes, HTTP \(month.fixes)"
            )
        }
        printReport(
            month: month.flatMap { http in bare.month.map { (http, $0.copy, $0.result) } },
            historyResult: bare.historyResult,
            devices: deviceCount, historyFixes: historyFixes, projectedSeconds: projectedSeconds,
            figures: [
                ("devices_list", list, bare.versions, 5.0),
                ("devices_list_changing", changing, bare.versions, 5.0),
                ("devices_list_uncached", uncached, bare.list, 5.0),
                ("history_page", history, bare.history, 12.0),
            ], peakResidentBytes: peakResidentBytes)
        return 0
    }

    /// The read API's statements with the same parameters, as the server runs them, over a bare
    /// connection to the same cluster: the baseline of each HTTP figure. The history is read as the
    /// server reads it, one binary COPY (`copyPage`); through a PGresult too (`historyResult`, the
    /// earlier baseline, which costs the client more than the COPY costs the server).
    private static func measureBareSQL(
        _ serverDirectory: String, ownerID: UInt64, devices: Int, historyFixes: Int, requests: Int,
        monthWalks: Int
    ) throws -> (
        list: Measurement, versions: Measurement, history: Measurement, historyResult: Measurement,
        month: (copy: ReadMonthBench.Walks, result: ReadMonthBench.Walks)?
    ) {
        let sql = try PostgresConnection(try EmbeddedPostgres(dataDirectory: serverDirectory).conninfo)
        defer { sql.close() }
        let bareList = try measureSQL(
            sql, ReadService.devicesStatement(ownerID: ownerID, sharedIDs: []), requests: requests,
            rows: devices)
        let bareVersions = try measureSQL(
            sql, ReadService.deviceVersionsStatement(ownerID: ownerID, sharedIDs: []), requests: requests,
            rows: devices)
        let pageQuery = HistoryQuery(limit: 10_000)
        let bareHistory = try measure(requests: max(10, requests / 5)) {
            let (rows, _) = try copyPage(sql, 1, pageQuery)
            guard rows == historyFixes else {
                throw UsageError("the bare COPY returned \(rows) rows, expected \(historyFixes)")
            }
        }
        let bareHistoryResult = try measureSQL(
            sql, ReadService.locationsStatement(deviceID: 1, pageQuery), requests: max(10, requests / 5),
            rows: historyFixes)

        let month =
            monthWalks == 0
            ? nil
            : (
                copy: try ReadMonthBench.measureBareSQL(sql, walks: monthWalks),
                result: try ReadMonthBench.measureBareSQL(sql, walks: monthWalks, result: true)
            )
        return (bareList, bareVersions, bareHistory, bareHistoryResult, month)
    }

    /// One history page as the server reads it (`ReadService.locationsCopyQuery`, one binary COPY),
    /// every field of every row read, nothing written: its row count (the page and one more when
    /// one follows) and the keyset of the page's last fix when one follows.
    static func copyPage(_ connection: PostgresConnection, _ deviceID: UInt64, _ query: HistoryQuery) throws
        -> (rows: Int, keyset: FixKeyset?)
    {
        var keyset: FixKeyset? = nil
        var rows = 0
        try connection.copyOutBinary(
            query: ReadService.locationsCopyQuery(deviceID: deviceID, query),
            fieldCount: ReadService.locationsCopyFieldCount, settings: ReadService.locationsCopySettings
        ) { row in
            rows += 1
            guard rows <= query.limit else { return }
            let fixKeyset = try ReadService.locationsCopyKeyset(&row)
            if rows == query.limit { keyset = fixKeyset }
        }
        return (rows, rows > query.limit ? keyset : nil)
    }

    /// `requests` timed runs of `body` after a tenth as many untimed ones.
    static func measure(requests: Int, _ body: () throws -> Void) throws -> Measurement {
        for _ in 0..<(requests / 10) { try body() }
        var latencies: [Int64] = []
        latencies.reserveCapacity(requests)
        for _ in 0..<requests {
            let start = monotonicMicros()
            try body()
            latencies.append(monotonicMicros() - start)
        }
        return Measurement(latencies: latencies.sorted(), responseBytes: 0)
    }

    /// Before each list, `changedPerList` devices change (enrolled again: a new token, so a new
    /// version of the row) and the projection takes them in: those are read and written again.
    private static func measureChangingList(
        _ connection: HTTPConnection, _ headers: [(String, String)], deviceUUIDs: [String], requests: Int,
        check: ([UInt8]) throws -> Bool
    ) throws -> Measurement {
        var next = 0
        return try measure(connection, "/api/find-my/devices", headers, requests: requests, check: check) {
            let offset = try enrolAgain(connection, headers, deviceUUIDs, count: changedPerList, next: &next)
            try waitForProjection(connection, past: offset)
        }
    }

    /// Enrols `count` devices again (a new token, so a new version of their row), taking them in
    /// turn from `next`; returns the log offset of the last enrolment.
    private static func enrolAgain(
        _ connection: HTTPConnection, _ headers: [(String, String)], _ deviceUUIDs: [String], count: Int,
        next: inout Int
    ) throws -> Int64 {
        var offset: Int64 = 0
        for _ in 0..<count {
            let index = next % deviceUUIDs.count
            next += 1
            let body = Array(
                #"{"device_uuid":"\#(deviceUUIDs[index])","name":"bench device \#(index + 1)","platform":"ios","model":"iPhone 15"}"#
                    .utf8)
            let answer = try connection.send("POST", "/api/find-my/devices", headers: headers, body: body)
            guard answer.status == 200 || answer.status == 201,
                let written = try? JSONParser.parse(answer.body)["offset"]?.int64Value
            else {
                throw UsageError(
                    "enrolling again answered \(answer.status): \(answer.bodyText.prefix(300))")
            }
            offset = written
        }
        return offset
    }

    /// The report, one JSON line: each figure over HTTP beside its bare SQL.
    private static func printReport(
        month: (ReadMonthBench.Walks, ReadMonthBench.Walks, ReadMonthBench.Walks)?,
        historyResult: Measurement,
        devices: Int, historyFixes: Int,
        projectedSeconds: Double,
        figures: [(String, Measurement, Measurement, Double)], peakResidentBytes: Int64
    ) {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("devices")
        writer.int64(Int64(devices))
        writer.key("history_fixes")
        writer.int64(Int64(historyFixes))
        writer.key("server_start_and_projection_seconds")
        writer.double(IngestBench.rounded(projectedSeconds))
        for (name, result, bare, targetMillis) in figures {
            writeFigure(name, result, bare: bare, targetMillis: targetMillis, to: &writer)
        }
        writer.key("history_page_bare_result_p50_ms")
        writer.double(IngestBench.rounded(Double(historyResult.percentile(50)) / 1000))
        writer.key("history_page_bare_result_p99_ms")
        writer.double(IngestBench.rounded(Double(historyResult.percentile(99)) / 1000))
        if let (http, bare, bareResult) = month {
            ReadMonthBench.write(http, bare: bare, bareResult: bareResult, to: &writer)
        }
        writer.key("changed_devices_per_list")
        writer.int64(Int64(changedPerList))
        writer.key("server_peak_rss_bytes")
        writer.int64(peakResidentBytes)
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
    }

    private static func writeFigure(
        _ name: String, _ result: Measurement, bare: Measurement, targetMillis: Double,
        to writer: inout JSONWriter
    ) {
        writer.key(name)
        writer.beginObject()
        writer.key("requests")
        writer.int64(Int64(result.latencies.count))
        writer.key("response_bytes")
        writer.int64(Int64(result.responseBytes))
        writer.key("first_ms")
        writer.double(IngestBench.rounded(Double(result.firstMicros) / 1000))
        writer.key("p50_ms")
        writer.double(IngestBench.rounded(Double(result.percentile(50)) / 1000))
        writer.key("p99_ms")
        writer.double(IngestBench.rounded(Double(result.percentile(99)) / 1000))
        writer.key("p99_target_ms")
        writer.double(targetMillis)
        writer.key("bare_sql_p50_ms")
        writer.double(IngestBench.rounded(Double(bare.percentile(50)) / 1000))
        writer.key("bare_sql_p99_ms")
        writer.double(IngestBench.rounded(Double(bare.percentile(99)) / 1000))
        writer.key("p50_over_bare_sql")
        writer.double(
            IngestBench.rounded(Double(result.percentile(50)) / Double(max(1, bare.percentile(50)))))
        writer.endObject()
    }

    /// Devices changed before each list of `devices_list_changing`: 1% of the default 1,000.
    static let changedPerList = 10

    /// Appends the devices and their fixes; returns the number of fixes of device 1 and the devices'
    /// UUIDs (device `i + 1` has `deviceUUIDs[i]`).
    static func seed(_ directory: String, userID: UInt64, devices: Int, historyDays: Int, monthFixes: Int = 0)
        throws -> (
            historyFixes: Int, deviceUUIDs: [String]
        )
    {
        let log = try LogWriter(directory: directory + "/log")
        defer { log.close() }
        let now = wallClockMicros()
        var random = SeededGenerator(seed: 4)
        var deviceUUIDs: [String] = []
        for index in 1...devices {
            let uuid = UUID128.random(using: &random)
            deviceUUIDs.append(uuid.description)
            _ = try log.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: UInt64(index), userID: userID, deviceUUID: uuid,
                        name: "bench device \(index)", platform: "ios", model: "iPhone 15")))
        }
        // Device 1: the 30-day history, a day per batch, oldest first, on the exact cadence.
        let historyFixes = historyDays * 86_400_000_000 / Int(cadenceMicros)
        var track = TrackGenerator(seed: 1, startMicros: now)
        let first = now - Int64(historyFixes) * cadenceMicros
        var fixes: [Fix] = []
        for index in 0..<historyFixes {
            var fix = track.next()
            fix.recordedAtMicros = first + Int64(index + 1) * cadenceMicros
            fixes.append(fix)
            if fixes.count == historyBatchFixes || index == historyFixes - 1 {
                _ = try log.append(
                    .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(using: &random), fixes: fixes)),
                    receivedAtMicros: fix.recordedAtMicros + 1_000_000)
                fixes.removeAll(keepingCapacity: true)
            }
        }
        try ReadMonthBench.seed(log, fixes: monthFixes, nowMicros: now, random: &random)
        // Every other device: one fix a few minutes old, so each has a latest position.
        for index in 2...max(2, devices) where index <= devices {
            var other = TrackGenerator(seed: UInt64(index), startMicros: now - 600_000_000)
            _ = try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(index), batchID: UUID128.random(using: &random),
                        fixes: [other.next()])),
                receivedAtMicros: now)
        }
        return (historyFixes, deviceUUIDs)
    }

    /// Until /healthz shows the projector's checkpoint at the log's durable end, or past `offset`.
    static func waitForProjection(_ connection: HTTPConnection, past offset: Int64? = nil) throws {
        let deadline = monotonicMicros() + 600_000_000
        while monotonicMicros() < deadline {
            let health = try JSONParser.parse(try connection.send("GET", "/healthz").body)
            if let end = try? health["durable_end"]?.int64Value,
                let checkpoint = try? health["projector"]?["checkpoint"]?.int64Value,
                checkpoint > (offset ?? end - 1), end > 0
            {
                return
            }
            usleep(offset == nil ? 50_000 : 200)
        }
        throw UsageError("the projector did not catch up within 600 s")
    }

    /// The state of a server that has held this history for a while, before anything is timed:
    /// the geofence projection caught up too (it folds the seeded log after the main one, and
    /// would take a core from the first phases), and the tables vacuumed and analyzed as
    /// autovacuum leaves them some time after a bulk load (otherwise it starts in the middle of
    /// a phase: the month's later walks were up to half as fast as its first in one run).
    static func settle(_ connection: HTTPConnection, _ serverDirectory: String) throws {
        let deadline = monotonicMicros() + 600_000_000
        while monotonicMicros() < deadline {
            let health = try JSONParser.parse(try connection.send("GET", "/healthz").body)
            let end = try health["durable_end"]?.int64Value ?? 0
            guard let fences = try? health["geofences"]?["checkpoint"]?.int64Value, fences < end else {
                break
            }
            usleep(50_000)
        }
        let sql = try PostgresConnection(try EmbeddedPostgres(dataDirectory: serverDirectory).conninfo)
        defer { sql.close() }
        _ = try sql.execute("VACUUM (ANALYZE)")
    }

    /// `rm -rf DIR`: the scratch server directory holds a whole PostgreSQL cluster.
    static func removeRecursively(_ path: String) throws {
        let words: [String] = ["rm", "-rf", "--", path]
        var argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        guard posix_spawnp(&child, "rm", nil, nil, &argv, environ) == 0 else {
            throw UsageError("cannot run rm -rf \(path)")
        }
        var status: Int32 = 0
        waitpid(child, &status, 0)
        guard status == 0 else { throw UsageError("rm -rf \(path) failed; remove it by hand") }
    }

    struct Measurement {
        var latencies: [Int64]
        var responseBytes: Int
        /// The first request, untimed in `latencies`: before it, nothing of the answer was kept.
        var firstMicros: Int64 = 0

        func percentile(_ p: Int) -> Int64 { latencies[min(latencies.count - 1, latencies.count * p / 100)] }
    }

    /// `requests` timed executions of `statement` after a tenth as many untimed ones; every result
    /// must have `rows` rows (the history statement fetches one row more than its page when one
    /// follows, and the bench's page holds the whole history).
    static func measureSQL(
        _ connection: PostgresConnection, _ statement: ReadService.Statement, requests: Int, rows: Int
    ) throws -> Measurement {
        for _ in 0..<(requests / 10) {
            _ = try connection.execute(statement.sql, statement.parameters, format: statement.format)
        }
        var latencies: [Int64] = []
        latencies.reserveCapacity(requests)
        for _ in 0..<requests {
            let start = monotonicMicros()
            let result = try connection.execute(statement.sql, statement.parameters, format: statement.format)
            latencies.append(monotonicMicros() - start)
            guard result.rowCount == rows else {
                throw UsageError("the bare statement returned \(result.rowCount) rows, expected \(rows)")
            }
        }
        return Measurement(latencies: latencies.sorted(), responseBytes: 0)
    }

    /// `requests` timed GETs after a tenth as many untimed ones; the first answer is checked whole.
    /// `prepare` runs, untimed, before each timed GET.
    static func measure(
        _ connection: HTTPConnection, _ target: String, _ headers: [(String, String)], requests: Int,
        check: ([UInt8]) throws -> Bool, prepare: () throws -> Void = {}
    ) throws -> Measurement {
        let firstStart = monotonicMicros()
        let first = try connection.send("GET", target, headers: headers)
        let firstMicros = monotonicMicros() - firstStart
        guard first.status == 200, try check(first.body) else {
            throw UsageError(
                "GET \(target) answered \(first.status) with an unexpected body: \(first.bodyText.prefix(300))"
            )
        }
        for _ in 0..<(requests / 10) { _ = try connection.send("GET", target, headers: headers) }
        var latencies: [Int64] = []
        latencies.reserveCapacity(requests)
        for _ in 0..<requests {
            try prepare()
            let start = monotonicMicros()
            let response = try connection.send("GET", target, headers: headers)
            latencies.append(monotonicMicros() - start)
            guard response.status == 200 else {
                throw UsageError("GET \(target) answered \(response.status)")
            }
        }
        return Measurement(
            latencies: latencies.sorted(), responseBytes: first.body.count, firstMicros: firstMicros)
    }
}
