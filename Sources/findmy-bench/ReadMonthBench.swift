import CLI
import Events
import HTTPClient
import JSON
import Postgres
import ReadAPI
import Threads
import Workload

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

        var medianFixesPerSecond: Double { Double(fixes) / (median(seconds) ?? 1) }
    }

    /// `walks` timed walks over HTTP after one untimed walk whose pages are parsed and counted.
    static func measureHTTP(
        _ connection: HTTPConnection, _ headers: [(String, String)], expectedFixes: Int, walks: Int
    ) throws -> Walks {
        let checked = try walk(connection, headers, count: true)
        guard checked.fixes == expectedFixes else {
            throw UsageError("the month walk gave \(checked.fixes) fixes, expected \(expectedFixes)")
        }
        var seconds: [Double] = []
        for _ in 0..<walks {
            let start = monotonicMicros()
            let pages = try walk(connection, headers, count: false).pages
            seconds.append(Double(monotonicMicros() - start) / 1_000_000)
            guard pages == checked.pages else {
                throw UsageError("a month walk took \(pages) pages, then \(checked.pages)")
            }
        }
        return Walks(fixes: checked.fixes, pages: checked.pages, seconds: seconds.sorted())
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

    /// The same walks over a bare connection: `ReadService.locationsStatement`, page after page.
    static func measureBareSQL(_ connection: PostgresConnection, walks: Int) throws -> Walks {
        var seconds: [Double] = []
        var last = (fixes: 0, pages: 0)
        for _ in 0...walks {
            let start = monotonicMicros()
            var query = HistoryQuery(limit: pageFixes)
            last = (0, 0)
            while true {
                let statement = ReadService.locationsStatement(deviceID: deviceID, query)
                let result = try connection.execute(
                    statement.sql, statement.parameters, format: statement.format)
                let rows = min(result.rowCount, pageFixes)
                last.fixes += rows
                last.pages += 1
                guard result.rowCount > pageFixes else { break }
                query.locationsCursor = LocationsCursor(
                    deviceID: deviceID, keyset: try ReadService.historyKeyset(result, rows - 1))
            }
            seconds.append(Double(monotonicMicros() - start) / 1_000_000)
        }
        // The first walk is the warm-up.
        return Walks(fixes: last.fixes, pages: last.pages, seconds: Array(seconds.dropFirst()).sorted())
    }

    static func write(_ http: Walks, bare: Walks, to writer: inout JSONWriter) {
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
        writer.endObject()
    }
}
