import CLI
import Events
import HTTPClient
import JSON
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench agent`: a real `findmy serve` and a real `findmy-agent`, enrolled, on loopback;
/// how long from `POST .../commands` to the agent's sound and lost, and from the gpsd report that
/// answers a locate to the answer in the owner's command status (docs/benchmarks.md, "The agent").
enum AgentBench {
    static let command = Command(
        name: "agent",
        summary: "POST .../commands to findmy-agent's sound and lost; a locate's gpsd fix to its status"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench agent --dir DIR [--sounds 200] [--lost 3] [--locates 50]
                                  [--tpv-interval-millis 1000] [--poll-millis 5] [--timeout-seconds 30]
                                  [--drain-fixes 10000]

        Starts `findmy serve` (the findmy beside findmy-bench, or $FINDMY_BIN; projector on, sound and
        locate unlimited: --command-sound-interval-seconds 0, --command-locate-interval-seconds 0) on
        DIR/server, a gpsd of the driver's own on a loopback port (gpsd's JSON protocol: VERSION,
        then DEVICES and WATCH after the client's ?WATCH, then a 3-D TPV every TPV-INTERVAL ms), and
        `findmy-agent` (beside findmy-bench, or $FINDMY_AGENT_BIN) enrolled with a user token into
        DIR/agent, run with --gpsd on that port and
            --sound-command /bin/sh -c 'echo > "$0"; exec sleep 3600' DIR/mark.fifo
        (the alarm writes a byte to a FIFO the driver reads, then waits to be killed). DIR/server and
        DIR/agent are emptied first; the agent's log is kept in DIR/agent.log. Then, after one sound
        and one locate not counted:

        sound: SOUNDS times, one after the other: POST a `sound`; the time from the POST leaving to
          the driver reading the mark (the agent took the command off its stream and started its
          player, and the player ran). Then the sound's answer is awaited in the status, the alarm
          stopped with SIGUSR1 (what `findmy-agent stop-sound` sends) and its end awaited in the log.
          Two baselines of the same run, each measured once per round, alternating: `stream_baseline`,
          a `sound` to a second device whose stream the driver reads on a raw socket (what
          `findmy-bench stream` measures: the server's part); `mark_exec_baseline`, the sound command
          started as the agent starts it (setpriv --pdeathsig KILL, a process group of its own) from
          the spawn to its mark (the player's own start, which any real player has too).
        lost: LOST times (the server allows one `lost` per device every 10 s, so each takes 10 s): POST
          a `lost` with a message and a phone number; the time to the agent's log line "THIS DEVICE
          IS LOST" read off its standard error (a FIFO). notify-send runs after that line only where
          a desktop session bus is there; it is not measured. Each is ended by a `found`, answered.
        locate: LOCATES times: POST a `locate`; the agent answers with the first gpsd report after it
          (docs/agent.md); the status (`GET .../commands/{id}`) is polled every POLL ms until it is
          `answered` with a fix. `tpv_to_status`: from the report that answered (found by its
          receiver time) leaving the driver's gpsd to the status read answered; `post_to_status`:
          from the POST, which adds the wait for the receiver's next report (each POST is made a
          random part of TPV-INTERVAL after the previous answer, so the wait is half of it on average).
          Both include up to POLL ms of polling and one GET.
        drain (skipped with --drain-fixes 0): the server stopped; the driver's gpsd writes DRAIN
          reports at once (receiver times one a minute: a week offline is 10,080) and then none;
          once `findmy-agent status` shows them in sealed batches, the server starts again on the
          same address. From its first line (it listens) to the agent's log saying the first batch
          was stored, and the last (`back_to_first_batch_ms`, `back_to_drained_ms`; the drain
          itself: `first_to_last_batch_ms`): the agent's back-off while the server was away is
          part of it. DRAIN is a multiple of 100 (the
          agent's batch); duplicates (a batch the server had already) are counted.

        Each figure is on CLOCK_MONOTONIC, the driver's own readings. Prints one JSON object: p50,
        p90, p99 and max in ms of each, the agent's and server's resident set at the end, and the
        1-minute load average when it began and ended. A wait longer than TIMEOUT s fails the run
        (the drain's waits allow 600 s: the agent's back-off grows while the server is away).
        Build with -c release to measure.
        """

    struct Settings: Equatable {
        var root: String
        var sounds = 200
        var lost = 3
        var locates = 50
        var tpvIntervalMillis = 1_000
        var pollMillis = 5
        var timeoutSeconds = 30
        var drainFixes = 10_000
    }

    /// The settings, or nil when `--help` was asked for.
    static func settings(_ arguments: [String]) throws -> Settings? {
        let names = [
            "dir", "sounds", "lost", "locates", "tpv-interval-millis", "poll-millis", "timeout-seconds",
            "drain-fixes",
        ]
        let options = try Options(arguments, valued: Set(names), flags: [])
        if options.flag("help") { return nil }
        var settings = Settings(root: try options.required("dir"))
        settings.sounds = try options.integer("sounds", default: settings.sounds)
        settings.lost = try options.integer("lost", default: settings.lost)
        settings.locates = try options.integer("locates", default: settings.locates)
        settings.tpvIntervalMillis = try options.integer(
            "tpv-interval-millis", default: settings.tpvIntervalMillis)
        settings.pollMillis = try options.integer("poll-millis", default: settings.pollMillis)
        settings.timeoutSeconds = try options.integer("timeout-seconds", default: settings.timeoutSeconds)
        settings.drainFixes = try options.integer("drain-fixes", default: settings.drainFixes)
        guard settings.drainFixes >= 0, settings.drainFixes % AgentRig.batchFixes == 0 else {
            throw UsageError("--drain-fixes must be a multiple of \(AgentRig.batchFixes) (0: no drain)")
        }
        guard settings.sounds >= 0, settings.lost >= 0, settings.locates >= 0 else {
            throw UsageError("--sounds, --lost and --locates must not be negative")
        }
        guard settings.tpvIntervalMillis >= 10, settings.pollMillis >= 1, settings.timeoutSeconds >= 1 else {
            throw UsageError(
                "--tpv-interval-millis must be at least 10, --poll-millis and --timeout-seconds at least 1")
        }
        return settings
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        guard let settings = try settings(arguments) else {
            print(help)
            return 0
        }
        let loadAtStart = APIDriver.loadAverage()
        let rig = try AgentRig(settings)
        defer { rig.stop() }
        try rig.warmUp()
        var sound: [Int64] = []
        var streamBaseline: [Int64] = []
        var execBaseline: [Int64] = []
        for round in 0..<settings.sounds {
            // Alternating which goes first, so that neither always follows the same work.
            if round % 2 == 0 { streamBaseline.append(try rig.streamBaselineOnce()) }
            sound.append(try rig.soundOnce())
            execBaseline.append(try rig.marks.execMicros(deadline: rig.deadline()))
            if round % 2 == 1 { streamBaseline.append(try rig.streamBaselineOnce()) }
        }
        var lost: [Int64] = []
        for round in 0..<settings.lost { lost.append(try rig.lostOnce(round)) }
        var tpvToStatus: [Int64] = []
        var postToStatus: [Int64] = []
        for _ in 0..<settings.locates {
            let located = try rig.locateOnce()
            tpvToStatus.append(located.fromReport)
            postToStatus.append(located.fromPost)
        }
        let drain = settings.drainFixes > 0 ? try rig.drain(settings.drainFixes) : nil
        printLine(
            "{\"sound\": {\(latencyJSON(sound))}, \"stream_baseline\": {\(latencyJSON(streamBaseline))}, "
                + "\"mark_exec_baseline\": {\(latencyJSON(execBaseline))}, "
                + "\"lost\": {\(latencyJSON(lost)), \"each_ms\": [\(lost.map { String(Double($0 / 10) / 100) }.joined(separator: ", "))]}, "
                + "\"locate\": {\"tpv_interval_ms\": \(settings.tpvIntervalMillis), \"poll_ms\": \(settings.pollMillis), "
                + "\"tpv_to_status\": {\(latencyJSON(tpvToStatus))}, \"post_to_status\": {\(latencyJSON(postToStatus))}}, "
                + "\"drain\": \(drain.map { "{\($0.json)}" } ?? "null"), "
                + "\"agent_rss_bytes\": \(processStatusBytes(rig.agentPID, "VmRSS:")), "
                + "\"agent_peak_rss_bytes\": \(processStatusBytes(rig.agentPID, "VmHWM:")), "
                + "\"server_rss_bytes\": \(rig.server.residentBytes()), "
                + "\"load_average_1m\": \(loadAtStart), \"load_average_1m_end\": \(APIDriver.loadAverage())}")
        return 0
    }
}

/// The parts of one run: the server, the driver's gpsd, the enrolled agent, the FIFOs it is
/// watched through, and a second device whose stream the driver reads itself.
final class AgentRig {
    static let serverArguments = [
        "--command-sound-interval-seconds", "0", "--command-locate-interval-seconds", "0",
    ]

    let settings: AgentBench.Settings
    var server: ChildServer
    let gpsd: FakeGPSD
    let log: LineWatcher
    let marks: MarkFIFO
    let agentPID: pid_t
    let deviceID: Int64
    let baselineDeviceID: Int64
    private let baselineStream: RawEventStream
    private let connection: HTTPConnection
    private let headers: [(name: String, value: String)]

    init(_ settings: AgentBench.Settings) throws {
        self.settings = settings
        let root = settings.root
        try PosixFileIO().makeDirectory(root)
        allowTraversal(root)
        try ReadBench.removeRecursively(root + "/server")
        try ReadBench.removeRecursively(root + "/agent")
        let user = try addUser(root + "/server", name: "bench")
        headers = [("Authorization", "Bearer \(user.token)"), ("Content-Type", "application/json")]
        server = try ChildServer(
            dataDirectory: root + "/server", logPath: root + "/server.log", projector: true,
            arguments: Self.serverArguments)
        connection = HTTPConnection(address: server.address)
        gpsd = try FakeGPSD(intervalMicros: Int64(settings.tpvIntervalMillis) * 1_000)
        gpsd.start()
        let agent = try agentExecutable()
        let enrolled = try runCapturing(
            agent,
            [
                "findmy-agent", "enrol", "--server", "http://\(server.address)", "--user-token", user.token,
                "--name", "bench agent", "--state-dir", root + "/agent",
            ])
        // "enrolled: device N at URL"
        guard let id = enrolled.split(separator: " ").dropFirst(2).first.flatMap({ Int64($0) }) else {
            throw UsageError("findmy-agent enrol said: \(enrolled)")
        }
        deviceID = id
        let baseline = try StreamBench.enrol(1, address: server.address, userToken: user.token)[0]
        baselineDeviceID = baseline.id
        baselineStream = try RawEventStream(address: server.address, token: baseline.token)
        log = try LineWatcher(fifo: root + "/agent-log.fifo", copyPath: root + "/agent.log")
        marks = try MarkFIFO(path: root + "/mark.fifo")
        let child = try spawn(
            agent,
            [
                "findmy-agent", "run", "--state-dir", root + "/agent", "--gpsd", "127.0.0.1:\(gpsd.port)",
                "--sound-seconds", "3600", "--sound-command",
            ] + marks.soundCommand, standardErrorPath: log.path)
        close(child.output)
        agentPID = child.pid
    }

    func stop() {
        kill(agentPID, SIGTERM)
        var status: Int32 = 0
        waitpid(agentPID, &status, 0)
        gpsd.stop()
        server.stop()
        log.stop()
    }

    func deadline() -> Int64 { monotonicMicros() + Int64(settings.timeoutSeconds) * 1_000_000 }

    /// The agent's stream open and a report taken, then one sound and one locate not counted.
    func warmUp() throws {
        guard log.wait(from: 0, deadline: deadline(), { $0.contains("command stream connected") }) != nil
        else {
            throw UsageError("the agent's command stream did not connect; see \(settings.root)/agent.log")
        }
        _ = try soundOnce()
        _ = try locateOnce()
    }

    /// POST `body` as a command to `device`, again after the server's Retry-After when it answers
    /// 429 (lost and found: one per 10 s); the command's id, the POST's log offset and when the
    /// POST that was accepted left.
    func post(_ device: Int64, _ body: String) throws -> (id: String, offset: Int64, started: Int64) {
        while true {
            let started = monotonicMicros()
            let response = try connection.send(
                "POST", "/api/find-my/devices/\(device)/commands", headers: headers, body: Array(body.utf8))
            if response.status == 429, let wait = response.header("Retry-After").flatMap({ Double($0) }) {
                usleep(useconds_t(wait * 1_000_000 + 50_000))
                continue
            }
            let answer = try? JSONParser.parse(response.body)
            guard response.status == 202, let id = try? answer?["command_id"]?.stringValue,
                let offset = try? answer?["offset"]?.int64Value
            else { throw UsageError("command \(body) not accepted: \(response.status) \(response.bodyText)") }
            return (id, offset, started)
        }
    }

    /// Polls the command's status until it is answered: when the answering GET came back, and the
    /// answer's fix's receiver time.
    func waitForAnswer(_ id: String, offset: Int64) throws -> (micros: Int64, recordedAtMicros: Int64?) {
        let path = "/api/find-my/devices/\(deviceID)/commands/\(id)?after_offset=\(offset)"
        let end = deadline()
        while true {
            let response = try connection.send("GET", path, headers: headers)
            let seen = monotonicMicros()
            guard response.status == 200 || response.status == 404 else {
                throw UsageError("GET \(path): \(response.status) \(response.bodyText)")
            }
            if response.status == 200, let command = try? JSONParser.parse(response.body),
                let state = try? command["state"]?.stringValue
            {
                if state == "answered" {
                    let recordedAt = (try? command["answer"]?["fix"]?["recorded_at"]?.stringValue)
                        .flatMap { try? RFC3339.parseMicros($0) }
                    return (seen, recordedAt)
                }
                if state == "expired" { throw UsageError("command \(id) expired: \(response.bodyText)") }
            }
            guard seen < end else {
                throw UsageError("command \(id) not answered within \(settings.timeoutSeconds) s")
            }
            usleep(useconds_t(settings.pollMillis * 1_000))
        }
    }

    /// One sound to the second device, read off its stream: POST to the event.
    func streamBaselineOnce() throws -> Int64 {
        let posted = try post(baselineDeviceID, #"{"kind": "sound"}"#)
        guard baselineStream.waitForCommand(posted.id) else {
            throw UsageError("the baseline device's stream ended")
        }
        return monotonicMicros() - posted.started
    }

    /// One sound to the agent: POST to the mark; then its answer, and the alarm stopped.
    func soundOnce() throws -> Int64 {
        guard !marks.hasMark else { throw UsageError("a mark came that no sound asked for") }
        let logFrom = log.count
        let posted = try post(deviceID, #"{"kind": "sound"}"#)
        guard let marked = marks.wait(deadline: deadline()) else {
            throw UsageError(
                "the agent's sound command did not run within \(settings.timeoutSeconds) s of sound \(posted.id); "
                    + "see \(settings.root)/agent.log")
        }
        _ = try waitForAnswer(posted.id, offset: posted.offset)
        kill(agentPID, SIGUSR1)
        let stopped = log.wait(from: logFrom, deadline: deadline()) {
            $0.contains("sound: stopped for command \(posted.id)")
        }
        guard stopped != nil else { throw UsageError("the agent did not stop the alarm of \(posted.id)") }
        return marked - posted.started
    }

    /// One lost: POST to the agent's log line; then a found, answered.
    func lostOnce(_ round: Int) throws -> Int64 {
        let logFrom = log.count
        let posted = try post(
            deviceID, #"{"kind": "lost", "message": "bench round \#(round)", "phone": "+49 30 1234"}"#)
        let shown = log.wait(from: logFrom, deadline: deadline()) {
            $0.contains("THIS DEVICE IS LOST") && $0.contains(posted.id)
        }
        guard let shown else {
            throw UsageError("the agent did not log lost \(posted.id); see \(settings.root)/agent.log")
        }
        let found = try post(deviceID, #"{"kind": "found"}"#)
        _ = try waitForAnswer(found.id, offset: found.offset)
        return shown.micros - posted.started
    }

    /// One locate: from the gpsd report that answered it, and from the POST, to the status. The
    /// POST waits a random part of the receiver's interval first: right after the previous answer
    /// it would fall at the same point of the receiver's cycle every time.
    func locateOnce() throws -> (fromReport: Int64, fromPost: Int64) {
        usleep(useconds_t(Int64.random(in: 0..<Int64(settings.tpvIntervalMillis)) * 1_000))
        let posted = try post(deviceID, #"{"kind": "locate"}"#)
        let answered = try waitForAnswer(posted.id, offset: posted.offset)
        guard let recordedAt = answered.recordedAtMicros,
            let written = gpsd.writtenAt(receiverMicros: recordedAt, waitingUntil: deadline())
        else { throw UsageError("locate \(posted.id) was answered by no report of this run's gpsd") }
        guard written > posted.started else {
            throw UsageError("locate \(posted.id) was answered by a report written before it was asked")
        }
        return (answered.micros - written, answered.micros - posted.started)
    }
}
