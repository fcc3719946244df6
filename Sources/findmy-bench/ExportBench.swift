import CLI
import Events
import HTTPClient
import JSON
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench export --dir DIR`: a device's history downloaded as GeoJSON over HTTP.
///
/// Seeds a log directly (no HTTP): one user, one device with `fixes` fixes spread over the last 20
/// days (within the default 30-day retention, which the compactor would otherwise apply midway),
/// 1,000 a batch. Starts `findmy serve --projector on` on it, waits until the projector has folded the whole
/// log into its embedded PostgreSQL, then GETs `/api/find-my/devices/1/export?format=geojson`
/// `requests` times over one keep-alive connection (libcurl, the body counted and dropped as it
/// arrives), and prints the median rate in fixes a second and the server's resident memory: before
/// the exports, after them, and its peak (VmHWM) before and after, as JSON.
enum ExportBench {
    static let command = Command(
        name: "export", summary: "a device's whole history as GeoJSON over HTTP (fixes/s, server memory)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench export --dir DIR [--fixes 1000000] [--requests 5]

        DIR/server is a scratch directory: it is emptied first (log and embedded PostgreSQL). Build with
        -c release to measure. The client runs on the same machine and takes CPU from the server.
        """

    static let batchFixes = 1_000
    /// The seeded history's span: well inside the default retention of 30 days.
    static let historyMicros: Int64 = 20 * 86_400_000_000

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["dir", "fixes", "requests"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let fixes = try options.integer("fixes", default: 1_000_000)
        let requests = try options.integer("requests", default: 5)
        guard fixes >= 1, requests >= 1 else { throw UsageError("--fixes and --requests must be at least 1") }
        try PosixFileIO().makeDirectory(root)
        allowTraversal(root)
        let serverDirectory = root + "/server"
        try ReadBench.removeRecursively(serverDirectory)

        let user = try addUser(serverDirectory, name: "bench")
        try seed(serverDirectory, userID: user.userID, fixes: fixes)
        let start = monotonicMicros()
        let server = try ChildServer(
            dataDirectory: serverDirectory, logPath: root + "/server.log", projector: true)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address, timeoutSeconds: 120)
        try ReadBench.waitForProjection(connection)
        let drainSeconds = Double(monotonicMicros() - start) / 1_000_000

        let before = (resident: server.residentBytes(), peak: server.peakResidentBytes())
        let postgres = ProjectBench.postmasterPID(pgData: serverDirectory + "/postgres/data")
        let loadBefore = APIDriver.loadAverage()
        let cpuBefore = (
            server: APIDriver.cpuMicros(server.pid),
            postgres: postgres.map { APIDriver.treeCPUMicros($0) } ?? 0,
            client: APIDriver.cpuMicros(getpid())
        )
        var seconds: [Double] = []
        var bytes = 0
        for _ in 0..<requests {
            let download = try exportOnce(connection, token: user.token)
            guard download.features == fixes else {
                throw UsageError("the export held \(download.features) features, expected \(fixes)")
            }
            seconds.append(download.seconds)
            bytes = download.bytes
        }
        let cpuPerExport = (
            server: Double(APIDriver.cpuMicros(server.pid) - cpuBefore.server) / Double(requests) / 1e6,
            postgres: Double((postgres.map { APIDriver.treeCPUMicros($0) } ?? 0) - cpuBefore.postgres)
                / Double(requests) / 1e6,
            client: Double(APIDriver.cpuMicros(getpid()) - cpuBefore.client) / Double(requests) / 1e6
        )
        let loadAfter = APIDriver.loadAverage()
        seconds.sort()
        let median = seconds[seconds.count / 2]

        var writer = JSONWriter()
        writer.beginObject()
        writer.key("fixes")
        writer.int64(Int64(fixes))
        writer.key("server_start_and_projection_seconds")
        writer.double(IngestBench.rounded(drainSeconds))
        writer.key("requests")
        writer.int64(Int64(requests))
        writer.key("response_bytes")
        writer.int64(Int64(bytes))
        writer.key("median_seconds")
        writer.double(IngestBench.rounded(median))
        writer.key("median_fixes_per_second")
        writer.int64(Int64(Double(fixes) / median))
        writer.key("target_fixes_per_second")
        writer.int64(500_000)
        writer.key("seconds")
        writer.beginArray()
        for value in seconds { writer.double(IngestBench.rounded(value)) }
        writer.endArray()
        // Where the time goes: CPU seconds an export took of findmy serve (all its threads), of
        // its embedded PostgreSQL (postmaster and backends) and of this client.
        writer.key("findmy_cpu_seconds_per_export")
        writer.double(IngestBench.rounded(cpuPerExport.server))
        writer.key("postgres_cpu_seconds_per_export")
        writer.double(IngestBench.rounded(cpuPerExport.postgres))
        writer.key("client_cpu_seconds_per_export")
        writer.double(IngestBench.rounded(cpuPerExport.client))
        writer.key("load_before")
        writer.double(loadBefore)
        writer.key("load_after")
        writer.double(loadAfter)
        writer.key("server_rss_bytes_before_exports")
        writer.int64(before.resident)
        writer.key("server_rss_bytes_after_exports")
        writer.int64(server.residentBytes())
        writer.key("server_peak_rss_bytes_before_exports")
        writer.int64(before.peak)
        writer.key("server_peak_rss_bytes")
        writer.int64(server.peakResidentBytes())
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    /// One GET of the whole history; the body is counted as it arrives and dropped. GeoJSON's export
    /// puts the collection's opening on a line of its own and then one feature a line (the last
    /// with the closing), so its features are its line ends less one; the lines are found with
    /// memchr, so that the client takes as little as it can of the CPU the server shares.
    static func exportOnce(_ connection: HTTPConnection, token: String) throws -> (
        seconds: Double, bytes: Int, features: Int
    ) {
        var bytes = 0
        var lineEnds = 0
        let request = HTTPClientRequest(
            method: "GET", target: "/api/find-my/devices/1/export?format=geojson",
            headers: [("Authorization", "Bearer \(token)")])
        let start = monotonicMicros()
        let response = try connection.send(request) { piece in
            bytes += piece.count
            guard var at = piece.baseAddress else { return }
            let end = at + piece.count
            while at < end, let found = memchr(at, 0x0A, end - at) {
                lineEnds += 1
                at = UnsafeRawPointer(found) + 1
            }
        }
        let seconds = Double(monotonicMicros() - start) / 1_000_000
        guard response.status == 200 else { throw UsageError("the export answered \(response.status)") }
        return (seconds, bytes, lineEnds - 1)
    }

    /// One device of `fixes` fixes evenly over the 20 days before now, in batches of `batchFixes`.
    static func seed(_ directory: String, userID: UInt64, fixes: Int) throws {
        let log = try LogWriter(directory: directory + "/log")
        defer { log.close() }
        var random = SeededGenerator(seed: 7)
        _ = try log.append(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: userID, deviceUUID: UUID128.random(using: &random), name: "phone",
                    platform: "ios", model: "iPhone 15")))
        let now = wallClockMicros()
        var track = TrackGenerator(seed: 1, startMicros: now)
        let spacingMicros = max(1, historyMicros / Int64(fixes))
        let first = now - Int64(fixes) * spacingMicros
        var batch: [Fix] = []
        batch.reserveCapacity(batchFixes)
        for index in 0..<fixes {
            var fix = track.next()
            fix.recordedAtMicros = first + Int64(index) * spacingMicros
            batch.append(fix)
            if batch.count == batchFixes || index == fixes - 1 {
                _ = try log.append(
                    .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(using: &random), fixes: batch)),
                    receivedAtMicros: fix.recordedAtMicros + 1_000_000)
                batch.removeAll(keepingCapacity: true)
            }
        }
    }
}
