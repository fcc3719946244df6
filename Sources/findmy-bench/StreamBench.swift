import CLI
import HTTPClient
import JSON
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench stream`: a command from `POST .../commands` to the `command` event on the
/// device's command stream, over loopback, through a real `findmy serve` (docs/benchmarks.md,
/// "Command stream").
enum StreamBench {
    static let command = Command(
        name: "stream",
        summary: "POST .../commands to the command event on the device's stream: latency p50/p99"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench stream --dir DIR [--commands 500] [--interval-millis 20] [--streams 1]

        Starts `findmy serve` (the findmy beside findmy-bench, or $FINDMY_BIN; --projector off) on
        DIR/server (a scratch directory: emptied first) with --command-sound-interval-seconds 0,
        enrols STREAMS devices and opens each one's command stream on a raw socket (a reader of its
        own: no client library in between). Then COMMANDS times, one after the other INTERVAL ms
        apart: POST a `sound` to the first device and read its stream until the command event with
        that command id; the time from the POST leaving to the event read, on CLOCK_MONOTONIC. The
        other streams stay open and quiet (they cost the server their connections only). Prints the
        p50, p90, p99 and max in ms, the server's resident set and thread count, and the 1-minute
        load average when it began.
        Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["dir", "commands", "interval-millis", "streams"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let count = try options.integer("commands", default: 500)
        let intervalMillis = try options.integer("interval-millis", default: 20)
        let streamCount = try options.integer("streams", default: 1)
        guard count > 0, intervalMillis >= 0, streamCount > 0 else {
            throw UsageError("--commands and --streams must be positive, --interval-millis not negative")
        }
        let serverDirectory = root + "/server"
        guard system("rm -rf '\(serverDirectory)' && mkdir -p '\(serverDirectory)'") == 0 else {
            throw UsageError("cannot make \(serverDirectory)")
        }
        let loadAtStart = APIDriver.loadAverage()
        let user = try addUser(serverDirectory, name: "bench")
        let server = try ChildServer(
            dataDirectory: serverDirectory, logPath: root + "/server.log",
            arguments: [
                "--command-sound-interval-seconds", "0", "--connections-max", "\(streamCount * 2 + 64)",
                // Every stream comes from 127.0.0.1.
                "--connections-per-address-max", "0",
            ])
        defer { server.stop() }
        let devices = try enrol(streamCount, address: server.address, userToken: user.token)
        let streams = try devices.map { try RawEventStream(address: server.address, token: $0.token) }
        let connection = HTTPConnection(address: server.address)
        var latencies: [Int64] = []
        for index in 0..<count {
            let started = monotonicMicros()
            let posted = try connection.send(
                "POST", "/api/find-my/devices/\(devices[0].id)/commands",
                headers: [("Authorization", "Bearer \(user.token)"), ("Content-Type", "application/json")],
                body: Array("{\"kind\": \"sound\"}".utf8))
            guard posted.status == 202,
                let id = try? JSONParser.parse(posted.body)["command_id"]?.stringValue
            else { throw UsageError("command \(index) not accepted: \(posted.status) \(posted.bodyText)") }
            guard streams[0].waitForCommand(id) else {
                throw UsageError("the stream ended before command \(index) came")
            }
            latencies.append(monotonicMicros() - started)
            if intervalMillis > 0 { usleep(useconds_t(intervalMillis * 1000)) }
        }
        latencies.sort()
        func millis(_ fraction: Double) -> String {
            let value = latencies[min(latencies.count - 1, Int(Double(latencies.count) * fraction))]
            return String(Double(value / 10) / 100)
        }
        printLine(
            "{\"commands\": \(count), \"streams\": \(streamCount), \"p50_ms\": \(millis(0.5)), "
                + "\"p90_ms\": \(millis(0.9)), \"p99_ms\": \(millis(0.99)), \"max_ms\": \(millis(1)), "
                + "\"server_rss_bytes\": \(server.residentBytes()), \"server_threads\": \(threads(server.pid)), "
                + "\"load_average_1m\": \(loadAtStart)}")
        return 0
    }

    /// The `Threads:` line of /proc/PID/status; -1 when it cannot be read.
    static func threads(_ pid: pid_t) -> Int {
        guard let file = fopen("/proc/\(pid)/status", "r") else { return -1 }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 256)
        while fgets(&buffer, 256, file) != nil {
            let line = String(
                decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if line.hasPrefix("Threads:") {
                return line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).dropFirst().first
                    .flatMap { Int($0) } ?? -1
            }
        }
        return -1
    }

    static func enrol(_ count: Int, address: String, userToken: String) throws -> [(id: Int64, token: String)]
    {
        let connection = HTTPConnection(address: address)
        defer { connection.close() }
        return try (0..<count).map { index in
            let body =
                "{\"device_uuid\": \"00000000-0000-4000-8000-\(String(index + 1).leftPadded(12))\", \"name\": \"stream \(index)\", \"platform\": \"linux\"}"
            let response = try connection.send(
                "POST", "/api/find-my/devices",
                headers: [("Authorization", "Bearer \(userToken)"), ("Content-Type", "application/json")],
                body: Array(body.utf8))
            let answer = try JSONParser.parse(response.body)
            guard let id = try? answer["device_id"]?.int64Value,
                let token = try? answer["device_token"]?.stringValue
            else { throw UsageError("enrolment failed: \(response.status) \(response.bodyText)") }
            return (id, token)
        }
    }
}

/// A command stream read off a bare socket: the request, then bytes scanned for the `data:` line
/// of a `command` event. Chunk framing is skipped over rather than decoded: a chunk-size line never
/// starts with `data: `, and an event is far smaller than the 64 KiB a chunk may hold.
final class RawEventStream {
    private let fd: Int32
    private var pending: [UInt8] = []

    init(address: String, token: String) throws {
        let parts = address.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1]) else {
            throw UsageError("bad address \(address)")
        }
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var server = sockaddr_in()
        server.sin_family = sa_family_t(AF_INET)
        server.sin_port = port.bigEndian
        inet_pton(AF_INET, String(parts[0]), &server.sin_addr)
        let connected = withUnsafePointer(to: &server) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw UsageError("cannot connect to \(address)") }
        var noDelay: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        let request = Array(
            "GET /api/find-my/device/commands/stream HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer \(token)\r\n\r\n"
                .utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else {
            throw UsageError("cannot send the stream's request")
        }
        guard readLine(until: "event: ready") else { throw UsageError("the stream did not open") }
    }

    deinit { close(fd) }

    /// Reads until a `data:` line naming `commandID` arrived; false when the connection ended.
    func waitForCommand(_ commandID: String) -> Bool {
        readLine(until: "\"command_id\":\"\(commandID)\"")
    }

    /// Reads lines until one contains `marker`.
    private func readLine(until marker: String) -> Bool {
        let mark = Array(marker.utf8)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            while let newline = pending.firstIndex(of: 0x0A) {
                let line = pending[..<newline]
                pending.removeFirst(newline + 1)
                if contains(line, mark) { return true }
            }
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return false }
            pending += buffer[..<count]
        }
    }

    private func contains(_ line: ArraySlice<UInt8>, _ mark: [UInt8]) -> Bool {
        guard line.count >= mark.count else { return false }
        return (line.startIndex...(line.endIndex - mark.count)).contains {
            line[$0..<$0 + mark.count].elementsEqual(mark)
        }
    }
}
