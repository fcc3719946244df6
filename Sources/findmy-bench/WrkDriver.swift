import CLI
import Events
import JSON
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// Drives `POST /api/find-my/report` with wrk and ops/bench/report.lua instead of Swift threads.
///
/// wrk is an event loop per thread (2 here), so on a 2-core machine it takes far less CPU from
/// the server than one Swift thread and blocking `HTTPConnection` per connection. The device
/// tokens and the batch's fixes reach the Lua script through files named in its environment.
struct WrkDriver {
    static let executable = "/usr/bin/wrk"
    static let threads = 2

    let root: String
    let script: String

    init(root: String, script: String?) throws {
        self.root = root
        let candidates =
            script.map { [$0] }
            ?? ["ops/bench/report.lua", executableDirectory() + "/../../../ops/bench/report.lua"]
        guard let found = candidates.first(where: { access($0, R_OK) == 0 }) else {
            throw UsageError(
                "cannot find the wrk script (tried \(candidates.joined(separator: ", "))); run from the "
                    + "repository root or pass --wrk-script PATH")
        }
        self.script = found
    }

    func drive(_ address: String, tokens: [String], fixesPerBatch: Int, seconds: Double) throws
        -> IngestBench.DriveResult
    {
        let tokensPath = root + "/wrk-tokens.txt"
        let fixesPath = root + "/wrk-fixes.json"
        var track = TrackGenerator(seed: 1, startMicros: wallClockMicros() - 600_000_000)
        let fixes = track.next(fixesPerBatch).map(IngestBench.fixJSON).joined(separator: ",")
        try write(tokens.joined(separator: "\n") + "\n", to: tokensPath)
        try write(fixes, to: fixesPath)
        let connections = tokens.count
        let threads = min(Self.threads, connections)
        let output = try runCapturing(
            Self.executable,
            [
                "wrk", "-c", String(connections), "-t", String(threads), "-d",
                "\(Int(seconds.rounded(.up)))s",
                "--timeout", "10s", "-s", script, "http://\(address)/api/find-my/report",
            ],
            environment: [
                "FINDMY_BENCH_TOKENS=\(tokensPath)", "FINDMY_BENCH_FIXES=\(fixesPath)",
                "FINDMY_BENCH_THREADS=\(threads)",
            ])
        guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("{") }) else {
            throw UsageError("wrk printed no summary:\n\(output)")
        }
        let summary = try JSONParser.parse(Array(line.utf8))
        func integer(_ key: String) throws -> Int64 { try summary[key]?.int64Value ?? 0 }
        let requests = try integer("requests")
        let failures = try integer("non_2xx") + integer("socket_errors")
        let elapsed = Double(try integer("duration_us")) / 1_000_000
        var result = IngestBench.DriveResult()
        result.requests = Int(requests - failures)
        result.failures = Int(failures)
        result.requestsPerSecond = Double(result.requests) / elapsed
        result.fixesPerSecond = Double(result.requests * fixesPerBatch) / elapsed
        // wrk's percentiles cover every answered request, 2xx or not; failures are reported apart.
        result.p50Micros = try integer("p50_us")
        result.p99Micros = try integer("p99_us")
        return result
    }

    private func write(_ text: String, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw UsageError("cannot write \(path)") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw UsageError("cannot write \(path)")
        }
    }
}
