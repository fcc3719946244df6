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
            ?? ["ops/bench/report.lua", Self.executableDirectory() + "/../../ops/bench/report.lua"]
        guard let found = candidates.first(where: { access($0, R_OK) == 0 }) else {
            throw UsageError(
                "cannot find the wrk script (tried \(candidates.joined(separator: ", "))); run from the "
                    + "repository root or pass --wrk-script PATH")
        }
        self.script = found
    }

    static func executableDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return "." }
        let path = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    }

    func drive(_ address: String, tokens: [String], fixesPerBatch: Int, seconds: Double) throws
        -> BenchCommand.DriveResult
    {
        let tokensPath = root + "/wrk-tokens.txt"
        let fixesPath = root + "/wrk-fixes.json"
        var track = TrackGenerator(seed: 1, startMicros: wallClockMicros() - 600_000_000)
        let fixes = track.next(fixesPerBatch).map(BenchCommand.fixJSON).joined(separator: ",")
        try write(tokens.joined(separator: "\n") + "\n", to: tokensPath)
        try write(fixes, to: fixesPath)
        let connections = tokens.count
        let threads = min(Self.threads, connections)
        let output = try run(
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
        var result = BenchCommand.DriveResult()
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

    /// Runs wrk with `environment` added to ours and returns its standard output.
    private func run(_ arguments: [String], environment: [String]) throws -> String {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw UsageError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var inherited: [String] = []
        var entry = environ
        while let pointer = entry.pointee {
            inherited.append(String(cString: pointer))
            entry += 1
        }
        var envp: [UnsafeMutablePointer<CChar>?] = (inherited + environment).map { strdup($0) } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, Self.executable, &actions, nil, &argv, &envp)
        close(pipeFDs[1])
        guard status == 0 else {
            close(pipeFDs[0])
            throw UsageError("cannot start wrk: \(String(cString: strerror(status)))")
        }
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(pipeFDs[0], &buffer, buffer.count)
            if count <= 0 { break }
            output += buffer.prefix(count)
        }
        close(pipeFDs[0])
        var exitStatus: Int32 = 0
        waitpid(child, &exitStatus, 0)
        guard exitStatus == 0 else {
            throw UsageError("wrk failed (status \(exitStatus)):\n\(String(decoding: output, as: UTF8.self))")
        }
        return String(decoding: output, as: UTF8.self)
    }
}
