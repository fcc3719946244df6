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

/// The "whole month" phase of `findmy-bench read`: a device's month of fixes at a fix every
/// `monthCadenceMicros` (250,000 fixes: 29 days at 10 s, inside the default 30-day retention with
/// room for a long run, so the compactor removes none while it runs), read by walking `/locations` with the
/// largest page (`limit=10000`, `next_cursor` to the end), as a client downloading the month would.
/// Reported as fixes per second of a whole walk, beside the same walk over a bare connection: the
/// read API's own statement, page after page, each page's keyset taken from its last row.
enum ReadMonthBench {
    /// The device whose month is read: the second of the seeded devices.
    static let deviceID: UInt64 = 2
    static let monthCadenceMicros: Int64 = 10_000_000
    static let pageFixes = 10_000
    static let batchFixes = 1_000

    /// Appends `fixes` fixes of device 2 ending a little before now, oldest first, 1,000 a batch.
    static func seed(_ log: LogWriter, fixes: Int, nowMicros: Int64, random: inout SeededGenerator) throws {
        guard fixes > 0 else { return }
        var track = TrackGenerator(seed: 2, startMicros: nowMicros)
        // Ends an hour before now, so that device 2's one recent fix stays its latest.
        let first = nowMicros - 3_600_000_000 - Int64(fixes) * monthCadenceMicros
        var batch: [Fix] = []
        for index in 0..<fixes {
            var fix = track.next()
            fix.recordedAtMicros = first + Int64(index) * monthCadenceMicros
            batch.append(fix)
            if batch.count == batchFixes || index == fixes - 1 {
                _ = try log.append(
                    .fixBatch(
                        FixBatch(deviceID: deviceID, batchID: UUID128.random(using: &random), fixes: batch)),
                    receivedAtMicros: fix.recordedAtMicros + 1_000_000)
                batch.removeAll(keepingCapacity: true)
            }
        }
    }

    struct Walks {
        /// Fixes of one walk (the month and device 2's recent fix).
        var fixes: Int
        var pages: Int
        /// Each walk's seconds, sorted.
        var seconds: [Double]
        /// CPU seconds a walk of the timed walks (their mean), of the bench itself (the client),
        /// of `findmy serve` and of PostgreSQL (postmaster and backends); nil where not measured.
        var clientCPUSeconds: Double? = nil
        var serverCPUSeconds: Double? = nil
        var postgresCPUSeconds: Double? = nil

        var medianFixesPerSecond: Double { Double(fixes) / (median(seconds) ?? 1) }
    }

    /// The processes whose CPU a walk over HTTP is measured with: the server and its PostgreSQL.
    struct Processes {
        var server: pid_t
        var postmaster: pid_t?
    }

    /// `walks` timed walks over HTTP after one untimed walk whose pages are parsed and counted.
    /// The CPU of the client, the server and PostgreSQL over the timed walks is kept too: on two
    /// cores the client competes with both for the walk's time.
    static func measureHTTP(
        _ connection: HTTPConnection, _ headers: [(String, String)], expectedFixes: Int, walks: Int,
        processes: Processes
    ) throws -> Walks {
        let checked = try walk(connection, headers, count: true)
        guard checked.fixes == expectedFixes else {
            throw UsageError("the month walk gave \(checked.fixes) fixes, expected \(expectedFixes)")
        }
        var seconds: [Double] = []
        let cpuBefore = cpuMicros(processes)
        for _ in 0..<walks {
            let start = monotonicMicros()
            let pages = try walk(connection, headers, count: false).pages
            seconds.append(Double(monotonicMicros() - start) / 1_000_000)
            guard pages == checked.pages else {
                throw UsageError("a month walk took \(pages) pages, then \(checked.pages)")
            }
        }
        let cpuAfter = cpuMicros(processes)
        func perWalk(_ before: Int64?, _ after: Int64?) -> Double? {
            guard let before, let after else { return nil }
            return Double(after - before) / 1_000_000 / Double(walks)
        }
        var result = Walks(fixes: checked.fixes, pages: checked.pages, seconds: seconds.sorted())
        result.clientCPUSeconds = perWalk(cpuBefore.client, cpuAfter.client)
        result.serverCPUSeconds = perWalk(cpuBefore.server, cpuAfter.server)
        result.postgresCPUSeconds = perWalk(cpuBefore.postgres, cpuAfter.postgres)
        return result
    }

    private static func cpuMicros(_ processes: Processes) -> (
        client: Int64?, server: Int64?, postgres: Int64?
    ) {
        (
            APIDriver.cpuMicros(getpid()), APIDriver.cpuMicros(processes.server),
            processes.postmaster.map { APIDriver.treeCPUMicros($0) }
        )
    }

    /// Every page of device 2's history; counts its fixes only when `count` (parsing a page is the
    /// client's work, not the server's).
    private static func walk(_ connection: HTTPConnection, _ headers: [(String, String)], count: Bool) throws
        -> (fixes: Int, pages: Int)
    {
        var cursor: String? = nil
        var fixes = 0
        var pages = 0
        repeat {
            var target = "/api/find-my/devices/\(deviceID)/locations?limit=\(pageFixes)"
            if let cursor { target += "&cursor=\(cursor)" }
            let response = try connection.send("GET", target, headers: headers)
            guard response.status == 200 else {
                throw UsageError(
                    "GET \(target) answered \(response.status): \(response.bodyText.prefix(300))")
            }
            pages += 1
            if count { fixes += try JSONParser.parse(response.body)["locations"]?.arrayValue.count ?? 0 }
            cursor = try nextCursor(response.body)
        } while cursor != nil && pages < 10_000
        return (fixes, pages)
    }

    /// The `next_cursor` at the end of a page (`..."next_cursor":"X"}` or `...:null}`), found
    /// without parsing the page.
    static func nextCursor(_ body: [UInt8]) throws -> String? {
        let key = Array("\"next_cursor\":".utf8)
        var at = body.count - key.count
        while at >= max(0, body.count - 256) {
            if body[at] == key[0] && Array(body[at..<(at + key.count)]) == key {
                let value = body[(at + key.count)...].dropLast()
                guard value.first == UInt8(ascii: "\"") else { return nil }
                return String(decoding: value.dropFirst().dropLast(), as: UTF8.self)
            }
            at -= 1
        }
        throw UsageError(
            "a page ends without next_cursor: \(String(decoding: body.suffix(100), as: UTF8.self))")
    }

    /// The same walks over a bare connection, the database's floor for the same rows: the read
    /// API's own COPY (`ReadService.locationsCopyQuery`), page after page, every field of every row
    /// read as the server reads it (without writing JSON), each page's keyset taken from its last
    /// row. A PGresult (`result: true`, `locationsStatement`) costs the client more than the
    /// server's COPY does: kept beside it as the earlier baseline.
    static func measureBareSQL(_ connection: PostgresConnection, walks: Int, result: Bool = false) throws
        -> Walks
    {
        var seconds: [Double] = []
        var last = (fixes: 0, pages: 0)
        for _ in 0...walks {
            let start = monotonicMicros()
            var query = HistoryQuery(limit: pageFixes)
            last = (0, 0)
            while true {
                let (rows, keyset) =
                    result
                    ? try resultPage(connection, query) : try ReadBench.copyPage(connection, deviceID, query)
                let kept = min(rows, pageFixes)
                last.fixes += kept
                last.pages += 1
                guard rows > pageFixes, let keyset else { break }
                query.locationsCursor = LocationsCursor(deviceID: deviceID, keyset: keyset)
            }
            seconds.append(Double(monotonicMicros() - start) / 1_000_000)
        }
        // The first walk is the warm-up.
        return Walks(fixes: last.fixes, pages: last.pages, seconds: Array(seconds.dropFirst()).sorted())
    }

    /// One page through a PGresult: its row count (the page and one more when one follows) and the
    /// keyset of the page's last fix.
    private static func resultPage(_ connection: PostgresConnection, _ query: HistoryQuery) throws -> (
        Int, FixKeyset?
    ) {
        let statement = ReadService.locationsStatement(deviceID: deviceID, query)
        let result = try connection.execute(statement.sql, statement.parameters, format: statement.format)
        let rows = min(result.rowCount, pageFixes)
        guard result.rowCount > pageFixes else { return (result.rowCount, nil) }
        return (result.rowCount, try ReadService.historyKeyset(result, rows - 1))
    }

    static func write(_ http: Walks, bare: Walks, bareResult: Walks, to writer: inout JSONWriter) {
        writer.key("history_month")
        writer.beginObject()
        writer.key("fixes")
        writer.int64(Int64(http.fixes))
        writer.key("pages")
        writer.int64(Int64(http.pages))
        writer.key("walks")
        writer.int64(Int64(http.seconds.count))
        writer.key("median_fixes_per_s")
        writer.int64(Int64(http.medianFixesPerSecond))
        writer.key("fixes_per_s_each")
        writer.beginArray()
        for seconds in http.seconds { writer.int64(Int64(Double(http.fixes) / seconds)) }
        writer.endArray()
        writer.key("target_fixes_per_s")
        writer.int64(1_000_000)
        writer.key("bare_sql_median_fixes_per_s")
        writer.int64(Int64(bare.medianFixesPerSecond))
        writer.key("over_bare_sql")
        writer.double(IngestBench.rounded(http.medianFixesPerSecond / max(1, bare.medianFixesPerSecond)))
        writer.key("bare_result_median_fixes_per_s")
        writer.int64(Int64(bareResult.medianFixesPerSecond))
        // What a walk over HTTP cost each process: the client's share competes with the others.
        for (key, seconds) in [
            ("client_cpu_s_per_walk", http.clientCPUSeconds),
            ("server_cpu_s_per_walk", http.serverCPUSeconds),
            ("postgres_cpu_s_per_walk", http.postgresCPUSeconds),
        ] {
            writer.key(key)
            if let seconds { writer.double(IngestBench.rounded(seconds)) } else { writer.null() }
        }
        writer.key("walk_s_median")
        writer.double(IngestBench.rounded(median(http.seconds) ?? 0))
        writer.endObject()
    }
}
