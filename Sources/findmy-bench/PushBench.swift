import CLI
import Commands
import Core
import Identity
import JSON
import Push
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench push`: pushes per second through the APNs channel, multiplexed on its one HTTP/2
/// connection, to the fake APNs (ops/tests/fake_push.py, which verifies every JWT, header and
/// payload as in the tests), and the latency from `deliver` to the fake receiving the request
/// (docs/benchmarks.md, "Push").
enum PushBench {
    static let command = Command(
        name: "push", summary: "APNs pushes per second on one HTTP/2 connection, and send-to-receive latency"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench push [--rate 1000] [--seconds 10] [--script ops/tests/fake_push.py]

        Starts the fake APNs (Debian's python3 with python3-h2 and python3-cryptography) on a free port,
        then sends RATE pushes per second for SECONDS seconds through findmy's APNs channel, paced
        evenly, each a sound command to its own device token. Prints one JSON object: pushes sent and
        accepted, the rate achieved, connections opened (1 means every push shared one connection),
        and percentiles of the time from deliver() to the fake's receipt of the request (both read
        CLOCK_REALTIME on this machine) and to the channel's completion. Build with -c release.
        """

    /// A push token source with no tokens: the bench addresses its pushes itself.
    struct NoTokens: PushTokenSource {
        func pushRegistrations(deviceID: UInt64) -> [(
            key: Registry.PushKey, registration: Registry.PushRegistration
        )] {
            []
        }
        func pushRegistration(provider: String, token: String) -> Registry.PushRegistration? { nil }
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["rate", "seconds", "script"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let rate = try options.integer("rate", default: 1000)
        let seconds = try options.integer("seconds", default: 10)
        guard rate > 0, seconds > 0 else { throw UsageError("--rate and --seconds must be positive") }
        let figures = try measure(
            rate: rate, seconds: seconds, script: options.value("script") ?? fakeScript())
        printLine(
            "{\"pushes\":\(figures.pushes),\"accepted\":\(figures.accepted),\"rate_target\":\(rate),"
                + "\"rate_achieved\":\(format2(figures.rateAchieved)),"
                + "\"connections_opened\":\(figures.connectionsOpened),\"fake_connections\":\(figures.fakeConnections),"
                + "\"client_cpu_us_per_push\":\(format2(figures.clientMicrosPerPush)),"
                + "\"fake_cpu_us_per_push\":\(format2(figures.fakeMicrosPerPush)),"
                + "\"received_by_fake\":\(figures.toFakeNanos.count),"
                + "\"to_fake_ms_p50\":\(percentile(figures.toFakeNanos, 0.50, divisor: 1e6)),"
                + "\"to_fake_ms_p99\":\(percentile(figures.toFakeNanos, 0.99, divisor: 1e6)),"
                + "\"to_fake_ms_max\":\(percentile(figures.toFakeNanos, 1.0, divisor: 1e6)),"
                + "\"completion_ms_p50\":\(percentile(figures.completionMicros, 0.50, divisor: 1e3)),"
                + "\"completion_ms_p99\":\(percentile(figures.completionMicros, 0.99, divisor: 1e3))}")
        return figures.accepted == figures.pushes ? 0 : 1
    }

    /// The fake's script beside the build (.build/<triple>/<config>/ is three levels below the
    /// repository).
    static func fakeScript() -> String { executableDirectory() + "/../../../ops/tests/fake_push.py" }

    /// What one channel-level run measured; the times sorted.
    struct Figures {
        var pushes: Int
        var accepted: Int
        var rateAchieved: Double
        var connectionsOpened: Int
        var fakeConnections: Int64
        var clientMicrosPerPush: Double
        var fakeMicrosPerPush: Double
        /// deliver() to the fake's receipt, per push the fake received.
        var toFakeNanos: [Int64]
        var completionMicros: [Int64]
    }

    /// A fake APNs of its own, a warm-up of 100 pushes, then `rate` pushes per second for `seconds`.
    /// CPU per push is this process's and its children's since it started: exact when `push` runs
    /// alone, a mixture when another driver ran before in the same process.
    static func measure(rate: Int, seconds: Int, script: String) throws -> Figures {
        var template = Array("/tmp/findmy-bench-push-XXXXXX".utf8CString)
        let directory = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { _ = system("rm -rf '\(directory)'") }
        let fake = try FakeAPNs(script: script, directory: directory)
        defer { fake.stop() }

        var configuration = APNsConfiguration(
            teamID: "TEAM123456", keyID: "KEY1234567", bundleID: "org.findmy.bench")
        configuration.productionURL = "https://127.0.0.1:\(fake.port)"
        configuration.caFile = directory + "/ca.pem"
        let channel = APNsChannel(
            configuration: configuration, key: try PushSetup.apnsKey(directory + "/AuthKey_KEY1234567.p8"),
            tokens: NoTokens())
        defer { channel.close() }
        try fake.command("quiet")

        // Warm-up: the connection, TLS, the JWT signed and verified once.
        _ = send(channel, count: 100, rate: 0, firstID: 1_000_000)
        let total = rate * seconds
        let started = monotonicMicros()
        let run = send(channel, count: total, rate: rate)
        let elapsedMicros = monotonicMicros() - started
        guard case .object(let stats) = try JSONParser.parse(fake.stats()),
            case .object(let received)? = stats["received"]
        else { throw UsageError("the fake printed no stats") }
        var toFake: [Int64] = []
        for member in received.members {
            guard let sentNanos = run.sentNanos[member.key], case .integer(let receivedNanos) = member.value
            else {
                continue
            }
            toFake.append(receivedNanos - sentNanos)
        }
        toFake.sort()
        var connections: Int64 = -1
        if case .integer(let count)? = stats["connections"] { connections = count }
        // CPU per push of each side: what the rate would be with a core each, on a loaded machine.
        let connectionsOpened = channel.connectionsOpened
        channel.close()
        fake.stop()
        func cpuSeconds(_ who: Int32) -> Double {
            var usage = rusage()
            getrusage(__rusage_who_t(who), &usage)
            return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
                + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        }
        let pushesAll = Double(total + 100)
        return Figures(
            pushes: total, accepted: run.accepted,
            rateAchieved: Double(total) / (Double(elapsedMicros) / 1e6),
            connectionsOpened: connectionsOpened, fakeConnections: connections,
            clientMicrosPerPush: cpuSeconds(RUSAGE_SELF.rawValue) / pushesAll * 1e6,
            fakeMicrosPerPush: cpuSeconds(RUSAGE_CHILDREN.rawValue) / pushesAll * 1e6,
            toFakeNanos: toFake, completionMicros: run.completionMicros.sorted())
    }

    /// The `p` quantile of sorted `values` (nearest rank) divided by `divisor`, as JSON.
    static func percentile(_ values: [Int64], _ p: Double, divisor: Double) -> String {
        guard !values.isEmpty else { return "null" }
        let rank = Int((Double(values.count) * p).rounded(.up)) - 1
        let value = values[max(0, min(values.count - 1, rank))]
        return format2(Double(value) / divisor)
    }

    static func format2(_ value: Double) -> String {
        let hundredths = Int64((value * 100).rounded())
        let fraction = abs(hundredths % 100)
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    struct Run {
        var sentNanos: [String: Int64]
        var completionMicros: [Int64]
        var accepted: Int
    }

    /// Sends `count` sound commands, paced at `rate` per second (0: as fast as possible), and waits
    /// for every completion.
    static func send(_ channel: APNsChannel, count: Int, rate: Int, firstID: Int = 0) -> Run {
        let results = Locked((completions: [Int64](), accepted: 0, done: 0))
        let finished = ConditionLock()
        var sentNanos: [String: Int64] = [:]
        sentNanos.reserveCapacity(count)
        let start = monotonicMicros()
        for index in 0..<count {
            if rate > 0 {
                // Pacing the sender (not synchronising with anything): push `index` leaves at index/rate s.
                let due = start + Int64(index) * 1_000_000 / Int64(rate)
                let wait = due - monotonicMicros()
                if wait > 0 { usleep(UInt32(wait)) }
            }
            let id = commandID(firstID + index)
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            sentNanos[id] = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
            let sentMicros = monotonicMicros()
            let delivery = CommandDelivery(
                commandID: id, kind: .sound, deviceID: UInt64(index), message: nil, phone: nil)
            let address = ChannelAddress(
                provider: "apns", token: "token\(index)", topic: "org.findmy.bench", environment: "production"
            )
            channel.deliver(delivery, to: address) { outcome in
                let elapsed = monotonicMicros() - sentMicros
                finished.withLock {
                    results.withLock {
                        $0.completions.append(elapsed)
                        if case .sent = outcome { $0.accepted += 1 }
                        $0.done += 1
                    }
                    finished.broadcast()
                }
            }
        }
        let deadline = monotonicMicros() + 120_000_000
        finished.withLock {
            while results.withLock({ $0.done }) < count {
                if !finished.wait(0, untilMonotonicMicros: deadline) { break }
            }
        }
        return results.withLock {
            Run(sentNanos: sentNanos, completionMicros: $0.completions, accepted: $0.accepted)
        }
    }

    /// A UUID-shaped id whose last digits are the index.
    static func commandID(_ index: Int) -> String {
        let digits = String(index)
        return "00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - digits.count) + digits
    }
}

/// The fake APNs as a child: `setpriv --pdeathsig KILL` so it dies with us; stdin for commands,
/// stdout for its answers.
final class FakeAPNs {
    let pid: pid_t
    let input: Int32
    let output: UnsafeMutablePointer<FILE>
    var port = 0

    init(script: String, directory: String) throws {
        var toChild: [Int32] = [0, 0]
        var fromChild: [Int32] = [0, 0]
        guard pipe(&toChild) == 0, pipe(&fromChild) == 0 else { throw UsageError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        posix_spawn_file_actions_addclose(&actions, toChild[1])
        posix_spawn_file_actions_addclose(&actions, fromChild[0])
        let arguments = [
            "setpriv", "--pdeathsig", "KILL", "/usr/bin/python3", script, "apns", "--dir", directory,
            "--team",
            "TEAM123456", "--key-id", "KEY1234567", "--bundle", "org.findmy.bench",
        ]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, "/usr/bin/setpriv", &actions, nil, &argv, environ)
        close(toChild[0])
        close(fromChild[1])
        guard status == 0 else {
            throw UsageError("cannot start the fake APNs: \(String(cString: strerror(status)))")
        }
        pid = child
        input = toChild[1]
        output = fdopen(fromChild[0], "r")!
        guard let ready = readLine(), ready.hasPrefix("READY "), let port = Int(ready.dropFirst(6)) else {
            stop()
            throw UsageError(
                "the fake APNs did not start (is python3-h2 installed? ops/install-deps.sh --test)")
        }
        self.port = port
    }

    func readLine() -> String? {
        var buffer = [CChar](repeating: 0, count: 1 << 22)
        guard fgets(&buffer, Int32(buffer.count), output) != nil else { return nil }
        return String(
            decoding: buffer.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func command(_ text: String) throws {
        let line = Array((text + "\n").utf8)
        _ = line.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        while let answer = readLine() {
            if answer == "OK " + text { return }
        }
        throw UsageError("the fake APNs stopped")
    }

    /// The `STATS` JSON the fake prints.
    func stats() throws -> String {
        let line = Array("stats\n".utf8)
        _ = line.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        while let answer = readLine() {
            if answer.hasPrefix("STATS ") { return String(answer.dropFirst(6)) }
        }
        throw UsageError("the fake APNs stopped")
    }

    private var stopped = false

    func stop() {
        if stopped { return }
        stopped = true
        close(input)
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        fclose(output)
    }
}
