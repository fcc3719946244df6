import Foundation
import GPSDSupport
import HTTPClient
import JSON
import Testing

/// The `findmy-agent` executable: `FINDMY_AGENT_BIN`, else the one beside `findmyExecutable()`,
/// where every build puts it.
func agentExecutable() -> String {
    if let path = ProcessInfo.processInfo.environment["FINDMY_AGENT_BIN"], !path.isEmpty { return path }
    return URL(fileURLWithPath: findmyExecutable()).deletingLastPathComponent()
        .appendingPathComponent("findmy-agent").path
}

/// A real `findmy serve`, a user, and `findmy-agent` enrolled with that user's token, with its
/// state directory in the scratch directory; the agent runs as a process of its own.
final class AgentHarness: @unchecked Sendable {
    let data = ScratchDirectory("findmy-agent-e2e")
    var server: ServerProcess
    let address: String
    let userToken: String
    let deviceID: Int64
    var agent: FindmyProcess?

    var stateDirectory: String { data.path + "/agent" }
    var playsPath: String { data.path + "/plays" }

    init(serverArguments: [String] = []) throws {
        server = try ServerProcess(data: data.path, extraArguments: serverArguments)
        address = server.address
        userToken = try addUser("olga", data: data.path)
        let enrolled = try FindmyProcess.run(
            [
                "enrol", "--server", "http://\(address)", "--user-token", userToken, "--name", "pi",
                "--state-dir", data.path + "/agent",
            ], executable: agentExecutable())
        guard enrolled.status == 0,
            let id = enrolled.output.split(separator: " ").dropFirst(2).first.flatMap({ Int64($0) })
        else { throw TestFailure("findmy-agent enrol: \(enrolled.output) \(enrolled.error)") }
        deviceID = id
    }

    deinit {
        agent?.kill()
        agent?.wait()
        server.stop()
    }

    /// Starts `findmy-agent run` with fixes from gpsd at `gpsdPort`, batches of `batchFixes` sent
    /// a second after their first fix, and a sound command that records each play's process id.
    func startAgent(gpsdPort: UInt16, batchFixes: Int = 5) throws {
        agent = try FindmyProcess(
            [
                "run", "--state-dir", stateDirectory, "--gpsd", "127.0.0.1:\(gpsdPort)", "--batch-fixes",
                String(batchFixes), "--batch-age-seconds", "1", "--sound-command", "/bin/sh", "-c",
                "echo $$ >> '\(playsPath)'; exec sleep 600",
            ], executable: agentExecutable())
    }

    var agentLog: String { agent?.standardError ?? "" }

    /// How many lines of the agent's log contain `text`.
    func agentLogCount(_ text: String) -> Int {
        agentLog.split(separator: "\n").filter { $0.contains(text) }.count
    }

    /// `waitUntil` that, when it times out, also records the tails of the agent's log, gpsfake's
    /// (and whether it still runs) and the server's: a wait that failed once in CI said nothing
    /// of which of the three had stopped.
    func wait(
        _ what: String, gpsd fake: GPSFake?, intervalMillis: Int = 5,
        sourceLocation: SourceLocation = #_sourceLocation, _ condition: () throws -> Bool
    ) throws {
        do {
            try waitUntil(what, intervalMillis: intervalMillis, sourceLocation: sourceLocation, condition)
        } catch let timedOut as WaitTimedOut {
            let gpsfake = fake.map {
                "gpsfake (\($0.isRunning ? "running" : "ended")):\n\($0.log.suffix(3_000))"
            }
            Issue.record(
                """
                agent log:
                \(agentLog.suffix(6_000))
                \(gpsfake ?? "no gpsfake")
                server log:
                \(server.process.standardError.suffix(3_000))
                """, sourceLocation: sourceLocation)
            throw timedOut
        }
    }

    /// The device token the agent keeps in its credentials.json.
    func deviceToken() throws -> String {
        let text = try Data(contentsOf: URL(fileURLWithPath: stateDirectory + "/credentials.json"))
        let object = try JSONSerialization.jsonObject(with: text) as? [String: Any]
        return try #require(object?["deviceToken"] as? String)
    }

    /// The process ids the sound command wrote, one a play.
    var plays: [pid_t] {
        ((try? String(contentsOfFile: playsPath, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            pid_t($0)
        }
    }

    /// The device's stored fixes in log order, each with its batch's `received_at`.
    func storedFixes() throws -> [StoredFix] {
        var fixes: [StoredFix] = []
        for record in try dumpLog(data.path).records
        where record["type"] == .string("fix_batch") && record["device"] == .integer(deviceID) {
            let receivedAt = try RFC3339.parseMicros(try record["received_at"]!.stringValue)
            for fix in try record["fixes"]?.arrayValue ?? [] {
                fixes.append(
                    StoredFix(
                        batchID: try record["batch_id"]!.stringValue, receivedAtMicros: receivedAt,
                        recordedAt: try fix["recorded_at"]!.stringValue,
                        latitude: try fix["latitude"]!.doubleValue,
                        longitude: try fix["longitude"]!.doubleValue,
                        source: try fix["source"]!.stringValue))
            }
        }
        return fixes
    }

    /// What `findmy-agent status` says about the queue.
    func queueStatus() throws -> String {
        let status = try FindmyProcess.run(
            ["status", "--state-dir", stateDirectory], executable: agentExecutable())
        return status.output.split(separator: "\n").first { $0.hasPrefix("queued:") }.map(String.init) ?? ""
    }
}

struct StoredFix: Equatable {
    var batchID: String
    var receivedAtMicros: Int64
    var recordedAt: String
    var latitude: Double
    var longitude: Double
    var source: String
}

/// The fixture's track moved to start at `startSeconds` (whole seconds since 1970), written into
/// `directory`: gpsd reports fixes at the receiver's times, and the server refuses fixes older
/// than its retention window.
func movedTrack(startSeconds: Int64, into directory: String) throws -> (
    path: String, epochs: [NMEATrack.Epoch]
) {
    let track = try NMEATrack(path: NMEATrack.fixturePath).movedTo(startMicros: startSeconds * 1_000_000)
    let path = directory + "/track-\(startSeconds).nmea"
    try track.write(to: path)
    return (path, track.epochs)
}

/// Bytes a server socket on `port` has received and its process not yet read (Recv-Q), from
/// /proc/net/tcp: a request written and not answered is in flight.
func unreadBytes(toPort port: Int) -> Int {
    let table = (try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8)) ?? ""
    var total = 0
    for line in table.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ")
        guard fields.count > 4, let local = fields[1].split(separator: ":").last,
            Int(local, radix: 16) == port, let queue = fields[4].split(separator: ":").last,
            let unread = Int(queue, radix: 16)
        else { continue }
        total += unread
    }
    return total
}

/// `findmy-agent` as a process, gpsd fed by gpsfake from Fixtures/agent/track.nmea (moved to
/// recent times), and a real `findmy serve`: the fixes arrive with both clocks, a server away for a
/// while or stopped with a report in flight loses nothing and stores nothing twice, and the
/// commands run on the device through the command stream.
@Suite(.serialized) struct AgentEndToEndTests {
    @Test func gpsdFixesArriveWithTheReceiversClockAndTheServersEachOnce() throws {
        let harness = try AgentHarness()
        let start = Int64(Date().timeIntervalSince1970) - 600
        let track = try movedTrack(startSeconds: start, into: harness.data.path)
        let fake = try GPSFake(track: track.path, once: true, sentenceSeconds: 0.05)
        defer { fake.stop() }
        try harness.startAgent(gpsdPort: fake.port)
        let last = RFC3339.formatMicros(track.epochs.last!.timeMicros)
        try harness.wait("the track's last fix stored", gpsd: fake, intervalMillis: 500) {
            try harness.storedFixes().contains { $0.recordedAt == last }
        }
        let stored = try harness.storedFixes()
        let firstIndex = try #require(
            track.epochs.firstIndex { RFC3339.formatMicros($0.timeMicros) == stored.first?.recordedAt })
        // From the first fix the agent took, every epoch of the track, each once, in order.
        #expect(
            stored.map(\.recordedAt)
                == track.epochs[firstIndex...].map { RFC3339.formatMicros($0.timeMicros) })
        for (fix, epoch) in zip(stored, track.epochs[firstIndex...]) {
            #expect(abs(fix.latitude - epoch.latitude) < 1e-8 && abs(fix.longitude - epoch.longitude) < 1e-8)
            #expect(fix.source == "gps")
        }
        // Both clocks: the receiver's (ten minutes ago) on each fix, the server's (now) on its batch.
        let nowMicros = Int64(Date().timeIntervalSince1970 * 1_000_000)
        for fix in stored {
            #expect(fix.receivedAtMicros > (start + 590) * 1_000_000 && fix.receivedAtMicros <= nowMicros)
        }
    }

    /// How the server goes away while the agent has fixes to send.
    enum Interruption {
        /// Stopped (SIGTERM) for a while, then started again on the same address.
        case down
        /// Frozen (SIGSTOP) with a report written to it and unanswered, the agent killed with
        /// SIGKILL meanwhile, then the server thawed (SIGCONT) and the agent started again.
        case killedWithABatchInFlight
    }

    @Test func theServerDownForAWhileThenUpTheQueueDrainsNothingTwice() throws {
        try interrupted(by: .down)
    }

    @Test func theAgentKilledWithABatchInFlightThenRestartedNothingLostNothingTwice() throws {
        try interrupted(by: .killedWithABatchInFlight)
    }

    func interrupted(by interruption: Interruption) throws {
        let harness = try AgentHarness()
        let start = Int64(Date().timeIntervalSince1970) - 600
        let track = try movedTrack(startSeconds: start, into: harness.data.path)
        // One epoch every 0.2 s: the track lasts 12 s, long enough to interrupt it half-way.
        let fake = try GPSFake(track: track.path, once: true, sentenceSeconds: 0.1)
        defer { fake.stop() }
        try harness.startAgent(gpsdPort: fake.port, batchFixes: 5)
        try harness.wait("a first batch stored", gpsd: fake) { harness.agentLogCount(" stored: ") >= 1 }
        let serverPID = harness.server.process.process.processIdentifier
        switch interruption {
        case .down:
            harness.server.stop()
            // Two failed sends: batches pile up in the queue, and the agent backs off.
            try harness.wait("sends failing while the server is down", gpsd: fake) {
                harness.agentLogCount("not sent") >= 2
            }
            harness.server = try ServerProcess(data: harness.data.path, listen: harness.address)
            try harness.wait("the track's end: gpsd gone", gpsd: fake) {
                harness.agentLogCount("connection lost") >= 1
            }
        case .killedWithABatchInFlight:
            kill(serverPID, SIGSTOP)
            try harness.wait("the track's end: gpsd gone", gpsd: fake) {
                harness.agentLogCount("connection lost") >= 1
            }
            let port = Int(harness.address.split(separator: ":").last!)!
            try harness.wait("a report written to the frozen server", gpsd: fake) {
                unreadBytes(toPort: port) > 0
            }
            harness.agent?.kill(SIGKILL)
            harness.agent?.wait()
            kill(serverPID, SIGCONT)
            try harness.startAgent(gpsdPort: fake.port, batchFixes: 5)
        }
        try harness.wait("the queue drained", gpsd: fake, intervalMillis: 200) {
            try harness.queueStatus().hasPrefix("queued: 0 fixes, 0 batches")
        }
        let stored = try harness.storedFixes()
        let firstIndex = try #require(
            track.epochs.firstIndex { RFC3339.formatMicros($0.timeMicros) == stored.first?.recordedAt })
        // Every fix the agent took, from its first to the track's end, stored once: nothing lost in
        // the queue, nothing stored twice by a batch sent again.
        #expect(
            stored.map(\.recordedAt).sorted()
                == track.epochs[firstIndex...].map { RFC3339.formatMicros($0.timeMicros) },
            "agent log: \(harness.agentLog)")
    }

    @Test func soundLostFoundAndLocateRunOnTheDeviceAndTheStreamResumesWithoutLosingACommand() throws {
        let harness = try AgentHarness(serverArguments: ["--projector", "on"])
        let connection = HTTPConnection(address: harness.address)
        let device = harness.deviceID
        let owner = harness.userToken
        let first = try movedTrack(
            startSeconds: Int64(Date().timeIntervalSince1970) - 120, into: harness.data.path)
        var fake = try GPSFake(track: first.path, once: false, sentenceSeconds: 0.05)
        defer { fake.stop() }
        try harness.startAgent(gpsdPort: fake.port)
        try harness.wait("the agent's command stream", gpsd: fake) {
            harness.agentLogCount("command stream connected") >= 1
        }
        try harness.wait("a first fix stored", gpsd: fake) { harness.agentLogCount(" stored: ") >= 1 }

        func post(_ body: String) throws -> String {
            let answer = try commandRequest(
                connection, "POST", "/api/find-my/devices/\(device)/commands", token: owner, body: body
            ).answer
            #expect(answer.status == 202, "\(body): \(answer.body)")
            return try #require(answer.string("command_id"))
        }
        func state(_ id: String, _ expected: String) throws -> Answer {
            let answer = try waitForCommand(connection, device: device, command: id, token: owner) {
                $0.string("state") == expected
            }
            #expect(answer.string("state") == expected, "\(id): \(answer.body)")
            return answer
        }

        // sound: the sound command runs, and the command is answered at once.
        let sound = try post(#"{"kind": "sound"}"#)
        try harness.wait("the sound command playing", gpsd: fake) { !harness.plays.isEmpty }
        _ = try state(sound, "answered")

        // The stream cut: a stream of the device's own (one per device) ends the agent's; a lost
        // recorded while the agent is away reaches it when it connects again. gpsd stops and the
        // queue drains first, so that no report is sent whose answer would carry the lost instead.
        fake.stop()
        try harness.wait("the queue drained", gpsd: fake, intervalMillis: 200) {
            try harness.queueStatus().hasPrefix("queued: 0 fixes, 0 batches")
        }
        let stream = try EventStreamClient(
            address: harness.address, target: "/api/find-my/device/commands/stream",
            requestHeaders: [("Authorization", "Bearer \(try harness.deviceToken())")])
        #expect(stream.status == 200)
        var opening = stream.next()
        while let message = opening, message.event == nil { opening = stream.next() }
        #expect(opening?.event == "ready")
        let message = "Found this Pi? Please call, reward"
        let lost = try post(#"{"kind": "lost", "message": "\#(message)", "phone": "+49 30 1234567"}"#)
        var seenByTheOtherStream = false
        while let event = stream.next() {
            if event.event == "command", event.data?.contains(lost) == true {
                seenByTheOtherStream = true
                break
            }
        }
        #expect(seenByTheOtherStream, "the lost went to the stream that had ended the agent's")
        stream.client.close()
        try harness.wait("the lost message in the agent's log", gpsd: fake) {
            harness.agentLog.contains(message) && harness.agentLog.contains("+49 30 1234567")
        }
        #expect(harness.agentLogCount("command stream connected") >= 2, "\(harness.agentLog)")
        // Lost is never answered: the device stays lost until found.
        _ = try state(lost, "sent")

        // found: the lost message cleared, the alarm stopped, lost ended by it.
        let found = try post(#"{"kind": "found"}"#)
        try harness.wait("the lost message cleared", gpsd: fake) {
            harness.agentLogCount("lost: cleared") >= 1
        }
        let player = harness.plays[0]
        try harness.wait("the sound player stopped", gpsd: fake) { kill(player, 0) != 0 || isZombie(player) }
        _ = try state(found, "answered")
        let ended = try state(lost, "expired")
        #expect(ended.body["end_reason"] != nil)
        #expect(harness.agentLogCount("THIS DEVICE IS LOST") == 1, "acted on once: \(harness.agentLog)")

        // locate: answered by a fix gpsd gives after the command came, none of the old track's.
        let second = try movedTrack(
            startSeconds: Int64(Date().timeIntervalSince1970), into: harness.data.path)
        let locate = try post(#"{"kind": "locate"}"#)
        fake = try GPSFake(track: second.path, once: false, sentenceSeconds: 0.05, port: fake.port)
        let answered = try state(locate, "answered")
        let recordedAt = try #require(try? answered.body["answer"]?["fix"]?["recorded_at"]?.stringValue)
        let micros = try RFC3339.parseMicros(recordedAt)
        #expect(second.epochs.contains { $0.timeMicros == micros }, "answer fix at \(recordedAt)")
    }
}

/// Whether `pid` is a zombie (ended, not yet reaped by a parent that is not this process).
func isZombie(_ pid: pid_t) -> Bool {
    let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
    guard let close = stat.lastIndex(of: ")") else { return true }
    return stat[stat.index(close, offsetBy: 2)] == "Z"
}
