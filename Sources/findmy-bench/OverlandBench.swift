import Events
import HTTPClient
import JSON
import Synchronization
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// The Overland part of `findmy-bench ingest`: 1,000-point batches as Overland posts them
/// (`POST /api/find-my/overland`, GeoJSON features), against the native report endpoint with the
/// same fixes, in the same run, on the same server and devices. Issue 13's target: Overland at
/// least 0.8 of native.
enum OverlandBench {
    static let fixesPerBatch = 1_000
    static let connections = 16

    struct Result {
        var native: IngestBench.DriveResult
        var overland: IngestBench.DriveResult
    }

    /// Native first, then Overland, `seconds` each, one keep-alive connection per device token.
    static func measure(_ address: String, tokens: [String], seconds: Double) throws -> Result {
        let tokens = Array(tokens.prefix(connections))
        let now = wallClockMicros()
        let tracks: [[Fix]] = (0..<tokens.count).map { index in
            var track = TrackGenerator(seed: UInt64(1_000 + index), startMicros: now - 3_600_000_000)
            return track.next(fixesPerBatch)
        }
        let nativeFixes = tracks.map { Array($0.map(IngestBench.fixJSON).joined(separator: ",").utf8) }
        let native = try drive(
            address, tokens: tokens, path: "/api/find-my/report", seconds: seconds, expected: nil
        ) { index, _ in
            Array("{\"batch_id\": \"\(UUID128.random())\", \"fixes\": [".utf8) + nativeFixes[index]
                + Array("]}".utf8)
        }
        let locations = tracks.map {
            Array(("{\"locations\":[" + $0.map(feature).joined(separator: ",")).utf8)
        }
        // Overland has no batch id: each request must differ, or it is a resend (a duplicate). The
        // running trip's distance, which grows between two real batches, makes it so.
        let overland = try drive(
            address, tokens: tokens, path: "/api/find-my/overland", seconds: seconds,
            expected: Array(#"{"result":"ok"}"#.utf8)
        ) { index, counter in
            locations[index]
                + Array(
                    "],\"trip\":{\"mode\":\"walk\",\"start\":\"2026-12-01T07:58:00Z\",\"distance\":\(counter)}}"
                        .utf8)
        }
        return Result(native: native, overland: overland)
    }

    /// A fix as Overland's GLManager.m writes a location.
    static func feature(_ fix: Fix) -> String {
        var writer = JSONWriter(capacity: 512)
        writer.beginObject()
        writer.key("type")
        writer.string("Feature")
        writer.key("geometry")
        writer.beginObject()
        writer.key("type")
        writer.string("Point")
        writer.key("coordinates")
        writer.beginArray()
        writer.double(fix.longitude)
        writer.double(fix.latitude)
        writer.endArray()
        writer.endObject()
        writer.key("properties")
        writer.beginObject()
        writer.key("timestamp")
        writer.string(RFC3339.formatMillis(fix.recordedAtMicros))
        writer.key("altitude")
        writer.double(fix.altitudeMeters ?? 34)
        writer.key("speed")
        writer.double(max(0, fix.speedMetersPerSecond ?? 0))
        writer.key("course")
        writer.double(min(359.9, max(0, fix.headingDegrees ?? 0)))
        writer.key("horizontal_accuracy")
        writer.double(fix.accuracyMeters ?? 10)
        writer.key("vertical_accuracy")
        writer.int64(4)
        writer.key("speed_accuracy")
        writer.double(0.5)
        writer.key("course_accuracy")
        writer.double(12.5)
        writer.key("motion")
        writer.beginArray()
        writer.string("walking")
        writer.endArray()
        writer.key("device_id")
        writer.string("bench")
        writer.key("wifi")
        writer.string("")
        writer.key("battery_state")
        writer.string(fix.isCharging == true ? "charging" : "unplugged")
        writer.key("battery_level")
        writer.double(Double(fix.batteryPercent ?? 80) / 100)
        writer.endObject()
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// One thread and keep-alive connection per token, each posting `body(token index, request
    /// number)` back to back; a request counts when it is answered 200 (with `expected` as its body,
    /// when given).
    static func drive(
        _ address: String, tokens: [String], path: String, seconds: Double, expected: [UInt8]?,
        body: @escaping @Sendable (Int, Int) -> [UInt8]
    ) throws -> IngestBench.DriveResult {
        struct ThreadResult: Sendable {
            var latencies: [Int64] = []
            var failures = 0
        }
        let results = Mutex<[ThreadResult]>([])
        let start = monotonicMicros()
        let end = start + Int64(seconds * 1_000_000)
        let threads = tokens.enumerated().map { index, token in
            spawnThread {
                let connection = HTTPConnection(address: address)
                var result = ThreadResult()
                let headers = [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
                var counter = 0
                while monotonicMicros() < end {
                    counter += 1
                    let request = body(index, counter)
                    let sent = monotonicMicros()
                    guard let response = try? connection.send("POST", path, headers: headers, body: request),
                        response.status == 200, expected == nil || response.body == expected
                    else {
                        result.failures += 1
                        continue
                    }
                    result.latencies.append(monotonicMicros() - sent)
                }
                results.withLock { $0.append(result) }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        let elapsed = Double(monotonicMicros() - start) / 1_000_000
        let all = results.withLock { $0 }
        let latencies = all.flatMap(\.latencies).sorted()
        var outcome = IngestBench.DriveResult()
        outcome.requests = latencies.count
        outcome.failures = all.reduce(0) { $0 + $1.failures }
        outcome.requestsPerSecond = Double(latencies.count) / elapsed
        outcome.fixesPerSecond = Double(latencies.count * fixesPerBatch) / elapsed
        if !latencies.isEmpty {
            outcome.p50Micros = latencies[latencies.count / 2]
            outcome.p99Micros = latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
        }
        return outcome
    }

    /// The `overland` member of the bench's JSON.
    static func write(_ result: Result, to writer: inout JSONWriter) {
        writer.key("overland")
        writer.beginObject()
        writer.key("fixes_per_batch")
        writer.int64(Int64(fixesPerBatch))
        writer.key("connections")
        writer.int64(Int64(connections))
        for (name, run) in [("native", result.native), ("overland", result.overland)] {
            writer.key(name)
            writer.beginObject()
            writer.key("acknowledged_fixes_per_s")
            writer.double(run.fixesPerSecond.rounded())
            writer.key("p50_ms")
            writer.double(IngestBench.rounded(Double(run.p50Micros) / 1000))
            writer.key("p99_ms")
            writer.double(IngestBench.rounded(Double(run.p99Micros) / 1000))
            writer.key("failed_requests")
            writer.int64(Int64(run.failures))
            writer.endObject()
        }
        writer.key("overland_over_native_ratio")
        writer.double(
            IngestBench.rounded(result.overland.fixesPerSecond / max(1, result.native.fixesPerSecond)))
        writer.endObject()
    }
}
