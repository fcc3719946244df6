import CLI
import Events
import JSON
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// Drives a `LoadTarget` with wrk and ops/bench/report.lua instead of Swift threads.
///
/// wrk is an event loop per thread (2 here), so on a 2-core machine it takes far less CPU from
/// the server than one Swift thread and blocking `HTTPConnection` per connection. The target's
/// path, credentials, headers and body reach the Lua script through its environment and files.
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

    func drive(_ address: String, _ target: LoadTarget, seconds: Double) throws -> LoadTarget.Result {
        let files =
            [
                ("AUTHORIZATIONS", target.authorizations.joined(separator: "\n") + "\n"),
                ("HEADERS", target.headers.map { "\($0.name): \($0.value)\n" }.joined()),
            ].map { (name: $0.0, bytes: Array($0.1.utf8)) } + [
                (name: "BODY_PREFIX", bytes: target.bodyPrefix),
                (name: "BODY_SUFFIX", bytes: target.bodySuffix),
            ]
        var environment = [
            "FINDMY_BENCH_PATH=\(target.path)",
            "FINDMY_BENCH_THREADS=\(min(Self.threads, target.connections))",
            "FINDMY_BENCH_UNIQUE=\(target.uniqueForm == .digits ? "digits" : "uuid")",
        ]
        if let from = target.recordedFromMillis {
            environment.append("FINDMY_BENCH_RECORDED_FROM_MS=\(from)")
        }
        for file in files {
            let path = root + "/wrk-" + file.name.lowercased()
            try write(file.bytes, to: path)
            environment.append("FINDMY_BENCH_\(file.name)=\(path)")
        }
        let output = try runCapturing(
            Self.executable,
            [
                "wrk", "-c", String(target.connections), "-t", String(min(Self.threads, target.connections)),
                "-d", "\(Int(seconds.rounded(.up)))s", "--timeout", "10s", "-s", script,
                "http://\(address)\(target.path)",
            ],
            environment: environment)
        guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("{") }) else {
            throw UsageError("wrk printed no summary:\n\(output)")
        }
        let summary = try JSONParser.parse(Array(line.utf8))
        func integer(_ key: String) throws -> Int64 { try summary[key]?.int64Value ?? 0 }
        let requests = try integer("requests")
        let failures = try integer("non_2xx") + integer("socket_errors")
        let elapsed = Double(try integer("duration_us")) / 1_000_000
        var result = LoadTarget.Result()
        result.requests = Int(requests - failures)
        result.failures = Int(failures)
        result.requestsPerSecond = Double(result.requests) / elapsed
        result.fixesPerSecond = Double(result.requests * target.fixesPerRequest) / elapsed
        // wrk's percentiles cover every answered request, 2xx or not; failures are reported apart.
        result.p50Micros = try integer("p50_us")
        result.p99Micros = try integer("p99_us")
        return result
    }

    private func write(_ bytes: [UInt8], to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw UsageError("cannot write \(path)") }
        defer { close(fd) }
        guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw UsageError("cannot write \(path)")
        }
    }
}
