import CLI
import HTTPClient
import JSON
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench commands`: commands through the whole server. `POST
/// /api/find-my/devices/{id}/commands` to a real `findmy serve`, whose APNs channel points at the
/// fake APNs (ops/tests/fake_push.py, which verifies every JWT, header and payload as in the
/// tests); per command, the time from sending the POST to the fake receiving the push, both read
/// on CLOCK_REALTIME on this machine. In the same run, alternating with it, the channel-level
/// `push` driver at the same rate: the API's cost is then a ratio to a baseline measured under the
/// same machine load (docs/benchmarks.md, "Commands through the API").
enum CommandsBench {
    static let command = Command(
        name: "commands",
        summary:
            "POST .../commands to the fake APNs receiving the push: latency and commands/s, vs the channel"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench commands --dir DIR [--rate 1000] [--seconds 10] [--rounds 3] [--devices 200]
                                     [--connections 32] [--projector off|on] [--baseline on|off]
                                     [--script ops/tests/fake_push.py]

        Starts the fake APNs (python3-h2, python3-cryptography) and `findmy serve` (the findmy beside
        findmy-bench, or $FINDMY_BIN) on DIR/server (a scratch directory: emptied first) with its APNs
        channel pointed at the fake, enrols DEVICES devices with an APNs push token each, then for
        each round POSTs RATE `sound` commands per second for SECONDS seconds, paced evenly over
        CONNECTIONS keep-alive HTTP/1.1 connections (one thread each; a POST leaves at its due time
        whenever a connection is free), spread over the devices in turn. The server runs with
        --command-sound-interval-seconds 0: the per-device rate limit is checked on every POST as
        usual but never refuses, so a few hundred devices carry the rate.

        Per round it prints the POST-to-push latency (p50/p90/p99/max, ms), the POST's answer
        latency, how late POSTs left their due time (a client falling behind shows here), the
        commands/s achieved, the TCP connections the fake accepted during the round (1 in all: every
        push multiplexed on one HTTP/2 connection), the CPU per command of the server and the fake,
        and the 1-minute load average when the round began. With --baseline on (the default) each
        round is followed by `findmy-bench push` at the same rate and seconds (its own fake, no server),
        and the ratio of the two. Then the medians over rounds. --projector on runs the projector and
        its embedded PostgreSQL too (they fold every command event; the default measures the command
        path alone). Build with -c release to measure.
        """

    static let team = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundle = "org.findmy.bench"

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments,
            valued: [
                "dir", "rate", "seconds", "rounds", "devices", "connections", "projector", "baseline",
                "script",
            ], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let rate = try options.integer("rate", default: 1000)
        let seconds = try options.integer("seconds", default: 10)
        let rounds = try options.integer("rounds", default: 3)
        let deviceCount = try options.integer("devices", default: 200)
        let connections = try options.integer("connections", default: 32)
        let script = options.value("script") ?? PushBench.fakeScript()
        guard rate > 0, seconds > 0, rounds > 0, deviceCount > 0, connections > 0 else {
            throw UsageError("--rate, --seconds, --rounds, --devices and --connections must be positive")
        }
        let projector = try onOff(options, "projector", false)
        let baseline = try onOff(options, "baseline", true)

        let serverDirectory = root + "/server"
        let fakeDirectory = root + "/fake"
        for directory in [serverDirectory, fakeDirectory] {
            guard system("rm -rf '\(directory)' && mkdir -p '\(directory)'") == 0 else {
                throw UsageError("cannot make \(directory)")
            }
        }
        let fake = try FakeAPNs(script: script, directory: fakeDirectory)
        defer { fake.stop() }
        try fake.command("quiet")
        let user = try addUser(serverDirectory, name: "bench")
        if projector { allowTraversal(root) }
        let server = try ChildServer(
            dataDirectory: serverDirectory, logPath: root + "/server.log", projector: projector,
            arguments: apnsArguments(fakePort: fake.port, fakeDirectory: fakeDirectory))
        defer { server.stop() }
        let deviceIDs = try enrol(deviceCount, address: server.address, userToken: user.token)
        let driver = APIDriver(
            address: server.address, userToken: user.token, deviceIDs: deviceIDs, connections: connections,
            fake: fake, serverPID: server.pid)
        // Warm-up: the HTTP connections, the server's first TLS connection to the fake, the JWT.
        _ = try driver.drive(count: 200, rate: 200)

        var writer = JSONWriter()
        writer.beginObject()
        writer.key("rate_target")
        writer.int64(Int64(rate))
        writer.key("seconds")
        writer.int64(Int64(seconds))
        writer.key("devices")
        writer.int64(Int64(deviceCount))
        writer.key("connections")
        writer.int64(Int64(connections))
        writer.key("projector")
        writer.bool(projector)
        writer.key("rounds")
        writer.beginArray()
        let results = try measureRounds(
            driver, rounds: rounds, rate: rate, seconds: seconds, baseline: baseline, script: script,
            to: &writer)
        writer.endArray()
        writer.key("medians")
        writer.beginObject()
        writeMedians(results, to: &writer)
        writer.endObject()
        writer.key("server_peak_rss_bytes")
        writer.int64(server.peakResidentBytes())
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return results.allSatisfy({
            $0.api.accepted == $0.api.posts && $0.api.toFakeNanos.count == $0.api.posts
        })
            ? 0 : 1
    }

    /// An on/off option (`--projector`, `--baseline`): `fallback` when absent.
    private static func onOff(_ options: Options, _ flag: String, _ fallback: Bool) throws -> Bool {
        switch options.value(flag) {
        case nil: return fallback
        case "on": return true
        case "off": return false
        case let other?: throw UsageError("--\(flag) is on or off, got '\(other)'")
        }
    }

    /// The server's APNs settings, all pointing at the fake (its key, its CA, its port).
    private static func apnsArguments(fakePort: Int, fakeDirectory: String) -> [String] {
        [
            "--apns-key-file", fakeDirectory + "/AuthKey_\(keyID).p8", "--apns-key-id", keyID,
            "--apns-team-id", team, "--apns-bundle-id", bundle, "--apns-url",
            "https://127.0.0.1:\(fakePort)",
            "--apns-sandbox-url", "https://127.0.0.1:\(fakePort)", "--push-ca-file",
            fakeDirectory + "/ca.pem",
            "--command-sound-interval-seconds", "0",
        ]
    }

    /// `rounds` rounds of `rate` commands a second for `seconds`, each beside the push channel alone
    /// (`baseline`), written as the report's array.
    private static func measureRounds(
        _ driver: APIDriver, rounds: Int, rate: Int, seconds: Int, baseline: Bool, script: String,
        to writer: inout JSONWriter
    ) throws -> [(api: APIFigures, channel: PushBench.Figures?)] {
        var results: [(api: APIFigures, channel: PushBench.Figures?)] = []
        for _ in 0..<rounds {
            let api = try driver.drive(count: rate * seconds, rate: rate)
            let channel = baseline ? try PushBench.measure(rate: rate, seconds: seconds, script: script) : nil
            results.append((api, channel))
            writer.beginObject()
            write(api, channel, to: &writer)
            writer.endObject()
        }
        return results
    }

    /// `count` devices of the bench user, each with an APNs push token: their ids.
    static func enrol(_ count: Int, address: String, userToken: String) throws -> [Int64] {
        let connection = HTTPConnection(address: address)
        var ids: [Int64] = []
        for index in 0..<count {
            let uuid = "00000000-0000-4000-8000-\(String(index + 1).leftPadded(12))"
            let enrolled = try connection.send(
                "POST", "/api/find-my/devices", headers: [("Authorization", "Bearer \(userToken)")],
                body: Array(
                    "{\"device_uuid\": \"\(uuid)\", \"name\": \"bench \(index)\", \"platform\": \"ios\"}".utf8
                ))
            guard enrolled.status == 201 else { throw UsageError("enrolment failed: \(enrolled.bodyText)") }
            let device = try JSONParser.parse(enrolled.body)
            ids.append(try device["device_id"]!.int64Value)
            let token = String(index, radix: 16).leftPadded(64)
            let registered = try connection.send(
                "POST", "/api/find-my/push-tokens",
                headers: [("Authorization", "Bearer \(try device["device_token"]!.stringValue)")],
                body: Array(
                    ("{\"provider\": \"apns\", \"token\": \"\(token)\", \"topic\": \"\(bundle)\", "
                        + "\"environment\": \"production\"}").utf8))
            guard registered.status == 200 || registered.status == 201 else {
                throw UsageError("push token registration failed: \(registered.bodyText)")
            }
        }
        return ids
    }

    /// One round through the API; times sorted.
    struct APIFigures {
        var posts: Int
        var accepted: Int
        /// The first refusal's status and body, if any.
        var firstRefusal: String?
        var rateAchieved: Double
        var toFakeNanos: [Int64]
        var answerMicros: [Int64]
        var lateMicros: [Int64]
        var fakeConnections: Int64
        /// Connections the fake accepted since it started (the warm-up opened the server's).
        var fakeConnectionsTotal: Int64
        var serverCPUMicrosPerCommand: Double
        var fakeCPUMicrosPerCommand: Double
        var loadAverage: Double
    }

    static func write(_ api: APIFigures, _ channel: PushBench.Figures?, to writer: inout JSONWriter) {
        func number(_ text: String) -> JSONValue { (try? JSONParser.parse(Array(text.utf8))) ?? .null }
        func milliseconds(_ values: [Int64], _ p: Double, divisor: Double) -> String {
            PushBench.percentile(values, p, divisor: divisor)
        }
        writer.key("load_1m")
        writer.double(api.loadAverage)
        writer.key("posts")
        writer.int64(Int64(api.posts))
        writer.key("accepted")
        writer.int64(Int64(api.accepted))
        if let refusal = api.firstRefusal {
            writer.key("first_refusal")
            writer.string(refusal)
        }
        writer.key("received_by_fake")
        writer.int64(Int64(api.toFakeNanos.count))
        writer.key("commands_per_s")
        writer.value(number(PushBench.format2(api.rateAchieved)))
        writer.key("fake_connections")
        writer.int64(api.fakeConnections)
        writer.key("fake_connections_total")
        writer.int64(api.fakeConnectionsTotal)
        for (name, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
            writer.key("post_to_push_ms_" + name)
            writer.value(number(milliseconds(api.toFakeNanos, p, divisor: 1e6)))
        }
        for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
            writer.key("answer_ms_" + name)
            writer.value(number(milliseconds(api.answerMicros, p, divisor: 1e3)))
        }
        writer.key("late_ms_p99")
        writer.value(number(milliseconds(api.lateMicros, 0.99, divisor: 1e3)))
        writer.key("server_cpu_us_per_command")
        writer.value(number(PushBench.format2(api.serverCPUMicrosPerCommand)))
        writer.key("fake_cpu_us_per_command")
        writer.value(number(PushBench.format2(api.fakeCPUMicrosPerCommand)))
        guard let channel else { return }
        writer.key("channel")
        writer.beginObject()
        writer.key("pushes_per_s")
        writer.value(number(PushBench.format2(channel.rateAchieved)))
        writer.key("received_by_fake")
        writer.int64(Int64(channel.toFakeNanos.count))
        writer.key("fake_connections")
        writer.int64(channel.fakeConnections)
        for (name, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
            writer.key("deliver_to_push_ms_" + name)
            writer.value(number(milliseconds(channel.toFakeNanos, p, divisor: 1e6)))
        }
        writer.endObject()
        for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
            writer.key("api_over_channel_" + name)
            writer.value(number(PushBench.format2(ratio(api.toFakeNanos, channel.toFakeNanos, p))))
        }
    }

    static func ratio(_ api: [Int64], _ channel: [Int64], _ p: Double) -> Double {
        func value(_ values: [Int64]) -> Double {
            guard !values.isEmpty else { return .nan }
            let rank = Int((Double(values.count) * p).rounded(.up)) - 1
            return Double(values[max(0, min(values.count - 1, rank))])
        }
        return value(api) / value(channel)
    }

    static func writeMedians(
        _ results: [(api: APIFigures, channel: PushBench.Figures?)], to writer: inout JSONWriter
    ) {
        func at(_ values: [Int64], _ p: Double, _ divisor: Double) -> Double {
            guard !values.isEmpty else { return .nan }
            let rank = Int((Double(values.count) * p).rounded(.up)) - 1
            return Double(values[max(0, min(values.count - 1, rank))]) / divisor
        }
        var figures: [(String, [Double])] = [
            ("load_1m", results.map(\.api.loadAverage)),
            ("commands_per_s", results.map(\.api.rateAchieved)),
            ("post_to_push_ms_p50", results.map { at($0.api.toFakeNanos, 0.5, 1e6) }),
            ("post_to_push_ms_p90", results.map { at($0.api.toFakeNanos, 0.9, 1e6) }),
            ("post_to_push_ms_p99", results.map { at($0.api.toFakeNanos, 0.99, 1e6) }),
            ("post_to_push_ms_max", results.map { at($0.api.toFakeNanos, 1.0, 1e6) }),
            ("server_cpu_us_per_command", results.map(\.api.serverCPUMicrosPerCommand)),
        ]
        if results.allSatisfy({ $0.channel != nil }) {
            figures += [
                ("channel_pushes_per_s", results.map { $0.channel!.rateAchieved }),
                ("channel_deliver_to_push_ms_p50", results.map { at($0.channel!.toFakeNanos, 0.5, 1e6) }),
                ("channel_deliver_to_push_ms_p99", results.map { at($0.channel!.toFakeNanos, 0.99, 1e6) }),
                (
                    "api_over_channel_p50",
                    results.map { ratio($0.api.toFakeNanos, $0.channel!.toFakeNanos, 0.5) }
                ),
                (
                    "api_over_channel_p99",
                    results.map { ratio($0.api.toFakeNanos, $0.channel!.toFakeNanos, 0.99) }
                ),
            ]
        }
        for (name, values) in figures {
            writer.key(name)
            let value = median(values.filter { !$0.isNaN }) ?? .nan
            if value.isNaN {
                writer.null()
            } else {
                writer.double((value * 100).rounded() / 100)
            }
        }
    }
}

/// Sends commands through the HTTP API at a rate, one thread and keep-alive connection each, and
/// matches them with the fake's receipt times.
final class APIDriver: @unchecked Sendable {
    let address: String
    let authorization: String
    let deviceIDs: [Int64]
    let connections: Int
    let fake: FakeAPNs
    let serverPID: pid_t
    /// Devices are used in turn across rounds, so that one device's commands stay far apart.
    private var nextDevice = 0

    init(
        address: String, userToken: String, deviceIDs: [Int64], connections: Int, fake: FakeAPNs,
        serverPID: pid_t
    ) {
        self.address = address
        self.authorization = "Bearer \(userToken)"
        self.deviceIDs = deviceIDs
        self.connections = connections
        self.fake = fake
        self.serverPID = serverPID
    }

    struct Sent: Sendable {
        var commandID: String
        var sentNanos: Int64
        var answerMicros: Int64
        var lateMicros: Int64
    }

    /// `count` POSTs, the i-th due at i/rate s after the start; waits for the fake to receive every
    /// accepted command (or for 30 s without progress).
    func drive(count: Int, rate: Int) throws -> CommandsBench.APIFigures {
        let loadAverage = Self.loadAverage()
        let statsBefore = try fakeStats()
        let serverCPUBefore = Self.cpuMicros(serverPID)
        let fakeCPUBefore = Self.cpuMicros(fake.pid)
        let firstDevice = nextDevice
        nextDevice += count
        let slots = Atomic<Int>(0)
        let sent = Mutex<[Sent]>([])
        let refusals = Mutex<(count: Int, first: String?)>((0, nil))
        let start = monotonicMicros() + 20_000
        let threads = (0..<min(connections, count)).map { _ in
            spawnThread { [self] in
                let connection = HTTPConnection(address: address)
                var mine: [Sent] = []
                mine.reserveCapacity(count / connections + 16)
                let headers = [("Authorization", authorization), ("Content-Type", "application/json")]
                let body = Array("{\"kind\": \"sound\"}".utf8)
                while true {
                    let slot = slots.wrappingAdd(1, ordering: .relaxed).oldValue
                    if slot >= count { break }
                    // Pacing the sender, not synchronising with anything: POST `slot` is due at slot/rate s.
                    let due = start + Int64(slot) * 1_000_000 / Int64(rate)
                    let wait = due - monotonicMicros()
                    if wait > 0 { usleep(UInt32(wait)) }
                    let device = deviceIDs[(firstDevice + slot) % deviceIDs.count]
                    var now = timespec()
                    clock_gettime(CLOCK_REALTIME, &now)
                    let sentNanos = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
                    let sentMicros = monotonicMicros()
                    let response = try? connection.send(
                        "POST", "/api/find-my/devices/\(device)/commands", headers: headers, body: body)
                    let answerMicros = monotonicMicros() - sentMicros
                    guard let response, response.status == 202,
                        let id = try? JSONParser.parse(response.body)["command_id"]?.stringValue
                    else {
                        let what = response.map { "\($0.status) \($0.bodyText)" } ?? "no answer"
                        refusals.withLock {
                            $0.count += 1
                            if $0.first == nil { $0.first = what }
                        }
                        continue
                    }
                    mine.append(
                        Sent(
                            commandID: id, sentNanos: sentNanos, answerMicros: answerMicros,
                            lateMicros: max(0, sentMicros - due)))
                }
                let done = mine
                sent.withLock { $0 += done }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        let elapsedMicros = monotonicMicros() - start
        let all = sent.withLock { $0 }

        // The pushes leave after the answers.
        let (received, connectionsNow) = try awaitFake(all, connectionsBefore: statsBefore.connections)
        let serverCPU = Self.cpuMicros(serverPID) - serverCPUBefore
        let fakeCPU = Self.cpuMicros(fake.pid) - fakeCPUBefore
        let toFake = all.compactMap { item in received[item.commandID].map { $0 - item.sentNanos } }.sorted()
        return CommandsBench.APIFigures(
            posts: count, accepted: all.count, firstRefusal: refusals.withLock { $0.first },
            rateAchieved: Double(all.count) / (Double(elapsedMicros) / 1e6), toFakeNanos: toFake,
            answerMicros: all.map(\.answerMicros).sorted(), lateMicros: all.map(\.lateMicros).sorted(),
            fakeConnections: connectionsNow - statsBefore.connections, fakeConnectionsTotal: connectionsNow,
            serverCPUMicrosPerCommand: Double(serverCPU) / Double(max(1, count)),
            fakeCPUMicrosPerCommand: Double(fakeCPU) / Double(max(1, count)), loadAverage: loadAverage)
    }

    /// Polls the fake, with a deadline (30 s without progress), until each accepted command
    /// reached it: when each arrived, and the fake's connection count.
    private func awaitFake(_ all: [Sent], connectionsBefore: Int64) throws -> (
        received: [String: Int64], connections: Int64
    ) {
        var received: [String: Int64] = [:]
        var connectionsNow = connectionsBefore
        var lastProgress = monotonicMicros()
        var found = 0
        while true {
            let stats = try fakeStats()
            received = stats.received
            connectionsNow = stats.connections
            let count = all.reduce(0) { $0 + (received[$1.commandID] != nil ? 1 : 0) }
            if count == all.count { break }
            if count > found {
                found = count
                lastProgress = monotonicMicros()
            }
            if monotonicMicros() - lastProgress > 30_000_000 { break }
            usleep(200_000)
        }
        return (received, connectionsNow)
    }

    func fakeStats() throws -> (connections: Int64, received: [String: Int64]) {
        guard case .object(let stats) = try JSONParser.parse(fake.stats()),
            case .object(let received)? = stats["received"],
            case .integer(let connections)? = stats["connections"]
        else { throw UsageError("the fake printed no stats") }
        var times: [String: Int64] = [:]
        times.reserveCapacity(received.members.count)
        for member in received.members {
            if case .integer(let nanos) = member.value { times[member.key] = nanos }
        }
        return (connections, times)
    }

    /// User and system CPU of a process so far (/proc/PID/stat, utime and stime, in clock ticks);
    /// with `reapedChildren`, also that of the children it has waited for (cutime, cstime).
    static func cpuMicros(_ pid: pid_t, reapedChildren: Bool = false) -> Int64 {
        guard let fields = statFields(pid), fields.count > 14 else { return 0 }
        let columns = reapedChildren ? 11...14 : 11...12
        let ticks = columns.reduce(Int64(0)) { $0 + (Int64(fields[$1]) ?? 0) }
        return ticks * 1_000_000 / Int64(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The fields of /proc/PID/stat after the command name (field 3, the state, first).
    static func statFields(_ pid: pid_t) -> [Substring]? {
        guard let file = fopen("/proc/\(pid)/stat", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 2048)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // The command name may hold spaces: fields count from after its closing parenthesis.
        guard let close = line.lastIndex(of: ")") else { return nil }
        return line[line.index(after: close)...].split(separator: " ")
    }

    /// CPU of a process tree one level deep so far: `parent`, the children it reaped, and its live
    /// children (a PostgreSQL postmaster and its backends).
    static func treeCPUMicros(_ parent: pid_t) -> Int64 {
        var total = cpuMicros(parent, reapedChildren: true)
        guard let directory = opendir("/proc") else { return total }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let pid = pid_t(name), let fields = statFields(pid), fields.count > 1,
                pid_t(fields[1]) == parent
            else { continue }
            total += cpuMicros(pid)
        }
        return total
    }

    /// The 1-minute load average (/proc/loadavg): how shared the machine was.
    static func loadAverage() -> Double {
        guard let file = fopen("/proc/loadavg", "r") else { return -1 }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 128)
        guard fgets(&buffer, 128, file) != nil else { return -1 }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return Double(text.split(separator: " ").first ?? "") ?? -1
    }
}
