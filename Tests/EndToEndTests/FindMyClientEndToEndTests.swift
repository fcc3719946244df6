import FindMyClient
import FindMyClientHTTP
import Foundation
import HTTPClient
import JSON
import Synchronization
import Testing

/// FindMyClient in this process against a real `findmy serve`, over the agent's socket transport:
/// a week offline drains once, a resend after a lost answer is the server's duplicate, and commands
/// in report answers run the platform's actions and are answered.
@Suite(.serialized) struct FindMyClientEndToEndTests {
    @Test func tenThousandFixesQueuedWhileTheServerIsDownArriveOnceWhenItIsBack() async throws {
        let data = ScratchDirectory("findmy-client-drain")
        var server = try ServerProcess(data: data.path)
        let address = server.address
        let user = try addUser("anna", data: data.path)
        let device = try Device(data.path, batchFixesMax: 100)
        let credentials = try await device.client.enrol(
            serverURL: "http://\(address)", userToken: user, name: "laptop")
        server.stop()

        let now = ClientClock.nowMicros()
        for chunk in 0..<100 {
            try device.client.record(
                (0..<100).map { index in
                    let n = chunk * 100 + index
                    return ClientFix(
                        latitude: 52 + Double(n) / 100_000, longitude: 13.4, accuracyMeters: 10,
                        source: "gps",
                        recordedAtMicros: now + Int64(n - 10_000) * 1_000_000)
                })
        }
        #expect(device.client.queue.counts == (0, 100))
        let run = Task { try await device.client.run(fixSource: device.source) }
        defer { run.cancel() }
        // The first sends fail (nobody listens); the server comes back on the same address.
        try await eventually("a send to the stopped server failed") {
            device.log.lines.withLock { $0.contains { $0.contains("not sent") } }
        }
        server = try ServerProcess(data: data.path, listen: address)
        try await eventually("the queue drained") { device.client.queue.counts == (0, 0) }
        run.cancel()
        server.stop()

        let batches = try dumpLog(data.path).batches.filter { $0.device == Int64(credentials.deviceID!) }
        #expect(batches.count == 100)
        #expect(Set(batches.map(\.batchID)).count == 100)
        let latitudes = try batches.flatMap { try $0.fixes.map { try $0["latitude"]!.doubleValue } }
        #expect(latitudes.count == 10_000)
        #expect(Set(latitudes).count == 10_000)
    }

    /// Offline, a device records fix after fix: the sender holds its back-off instead of knocking
    /// on the absent server for each one; `networkChanged()` ends the wait and the queue drains,
    /// each fix once. The back-off is an hour here, so only the hold can keep the attempts few.
    @Test func fixesRecordedOfflineDoNotCutTheBackOffAndNetworkChangedSendsAtOnce() async throws {
        let data = ScratchDirectory("findmy-client-offline")
        var server = try ServerProcess(data: data.path)
        let address = server.address
        let user = try addUser("anna", data: data.path)
        let device = try Device(
            data.path, batchFixesMax: 10, backoffSecondsMax: 3600, unreachableRetrySecondsMax: 3600)
        let credentials = try await device.client.enrol(
            serverURL: "http://\(address)", userToken: user, name: "laptop")
        server.stop()
        let run = Task { try await device.client.run(fixSource: device.source) }
        defer { run.cancel() }
        let now = ClientClock.nowMicros()
        func fix(_ n: Int) -> ClientFix {
            ClientFix(
                latitude: 52 + Double(n) / 100_000, longitude: 13.4, accuracyMeters: 10, source: "gps",
                recordedAtMicros: now + Int64(n - 1_000) * 1_000_000)
        }
        let notSent = { device.log.lines.withLock { $0.filter { $0.contains("not sent") }.count } }
        try device.client.record(fix(0))
        try await eventually("a send to the stopped server failed") { notSent() >= 1 }
        for n in 1...300 { try device.client.record(fix(n)) }
        // Without the hold, each fix recorded ends the wait: an attempt per fix.
        #expect(notSent() < 20, "\(notSent()) attempts while 300 fixes were recorded offline")

        server = try ServerProcess(data: data.path, listen: address)
        device.client.networkChanged()
        try await eventually("the queue drained") { device.client.queue.counts == (0, 0) }
        run.cancel()
        server.stop()
        let batches = try dumpLog(data.path).batches.filter { $0.device == Int64(credentials.deviceID!) }
        let latitudes = try batches.flatMap { try $0.fixes.map { try $0["latitude"]!.doubleValue } }
        #expect(latitudes.count == 301)
        #expect(Set(latitudes).count == 301)
    }

    @Test func aBatchSentAgainAfterItsAnswerWasLostIsAnsweredAsADuplicateAndStoredOnce() async throws {
        let data = ScratchDirectory("findmy-client-resend")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let user = try addUser("anna", data: data.path)
        let device = try Device(data.path, batchFixesMax: 3, cutFirstReportAnswer: true)
        let credentials = try await device.client.enrol(
            serverURL: "http://\(server.address)", userToken: user, name: "laptop")
        let run = Task { try await device.client.run(fixSource: device.source) }
        defer { run.cancel() }
        try device.client.record(
            (0..<3).map {
                ClientFix(
                    latitude: 52.5, longitude: 13.4, accuracyMeters: 8, source: "gps",
                    recordedAtMicros: ClientClock.nowMicros() - Int64($0) * 1_000_000)
            })
        try await eventually("the batch was removed") { device.client.queue.counts == (0, 0) }

        let reports = device.transport.reports.withLock { $0 }
        #expect(reports.count == 2)
        #expect(reports.first?.cut == true)
        #expect(reports.last?.answer?["duplicate"] == .bool(true))
        #expect(reports.last?.answer?["accepted"] == .integer(3))
        let batches = try dumpLog(data.path).batches.filter { $0.device == Int64(credentials.deviceID!) }
        #expect(batches.count == 1)
        #expect(batches.first?.fixes.count == 3)
    }

    @Test func commandsInReportAnswersRunTheActionsOnceAndSoundAndFoundAreAnswered() async throws {
        let data = ScratchDirectory("findmy-client-commands")
        let server = try ServerProcess(data: data.path)
        var stopped = false
        defer { if !stopped { server.stop() } }
        let user = try addUser("anna", data: data.path)
        // No stream: report answers are the only way commands come.
        let device = try Device(data.path, batchFixesMax: 100, batchAgeSeconds: 0, withoutStream: true)
        let credentials = try await device.client.enrol(
            serverURL: "http://\(server.address)", userToken: user, name: "laptop")
        let deviceID = credentials.deviceID!
        let run = Task { try await device.client.run(fixSource: device.source) }
        defer { run.cancel() }
        // A fix emitted before the run started its source would be dropped (a loaded machine).
        try await eventually("the fix source started") { device.source.handler.withLock { $0 != nil } }
        let connection = HTTPConnectionBox(server.address)

        var commands: [String: String] = [:]
        for (kind, extra) in [
            ("sound", ""), ("lost", ", \"message\": \"call me\", \"phone\": \"+49 30 1\""), ("locate", ""),
        ] {
            let posted = try connection.post(
                "/api/find-my/devices/\(deviceID)/commands", token: user,
                body: "{\"kind\": \"\(kind)\"\(extra)}")
            #expect(posted.status == 202)
            commands[kind] = posted.string("command_id")
        }
        // The next report's answer carries them.
        device.source.emit(
            ClientFix(
                latitude: 52.5, longitude: 13.4, accuracyMeters: 8, source: "gps",
                recordedAtMicros: ClientClock.nowMicros()))
        try await eventually("sound, lost and locate acted on") {
            let calls = device.actions.calls.withLock { $0 }
            return calls.contains("startSound \(commands["sound"]!)")
                && calls.contains("showLost \(commands["lost"]!) call me +49 30 1")
                && device.source.freshFixesAsked.withLock { $0 } == 1
        }
        let found = try connection.post(
            "/api/find-my/devices/\(deviceID)/commands", token: user, body: "{\"kind\": \"found\"}")
        let foundID = try #require(found.string("command_id"))
        device.source.emit(
            ClientFix(
                latitude: 52.6, longitude: 13.4, accuracyMeters: 8, source: "gps",
                recordedAtMicros: ClientClock.nowMicros()))
        try await eventually("found acted on") { device.actions.calls.withLock { $0.contains("clearLost") } }
        try await eventually("the answers sent") { device.client.queue.counts == (0, 0) }
        run.cancel()
        server.stop()
        stopped = true

        // Each acted on once, though every report answer carried the open ones again.
        let calls = device.actions.calls.withLock { $0 }
        #expect(calls.filter { $0.hasPrefix("startSound") }.count == 1)
        #expect(calls.filter { $0.hasPrefix("showLost") }.count == 1)
        #expect(calls.contains("stopSound"))
        let answered = try dumpLog(data.path).records.filter { $0["type"] == .string("command_answered") }
            .compactMap { try? $0["command_id"]?.stringValue }
        #expect(Set(answered) == [commands["sound"]!, commands["locate"]!, foundID])
        let ondemand = try dumpLog(data.path).batches.flatMap(\.fixes).filter {
            $0["source"] == .string("ondemand")
        }
        #expect(ondemand.count == 1)
    }
}

extension FindMyClientEndToEndTests {
    /// No fix is reported before the commands: what runs, runs because the stream brought it.
    @Test func aCommandPostedReachesTheActionsThroughTheStreamAndAResumeActsOnNothingTwice() async throws {
        let data = ScratchDirectory("findmy-client-stream")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let user = try addUser("anna", data: data.path)
        let device = try Device(data.path, batchFixesMax: 100)
        let deviceID = try await device.client.enrol(
            serverURL: "http://\(server.address)", userToken: user, name: "laptop"
        ).deviceID!
        let connection = HTTPConnectionBox(server.address)
        var run = Task { try await device.client.run(fixSource: device.source) }
        try await eventually("the stream connected") {
            device.log.lines.withLock { $0.contains("command stream connected") }
        }
        let sound = try #require(
            try connection.post(
                "/api/find-my/devices/\(deviceID)/commands", token: user, body: "{\"kind\": \"sound\"}"
            ).string("command_id"))
        try await eventually("the sound started") {
            device.actions.calls.withLock { $0.contains("startSound \(sound)") }
        }
        // Answered with a fix (none was queued: a fresh one), which the sender sends.
        try await eventually("the sound answered") { device.client.queue.counts == (0, 0) }

        // Away: a lost asked for meanwhile comes on the resumed stream; the sound, still in
        // `ready`'s reach of the log, does not ring again.
        run.cancel()
        _ = await run.result
        let lost = try #require(
            try connection.post(
                "/api/find-my/devices/\(deviceID)/commands", token: user,
                body: "{\"kind\": \"lost\", \"message\": \"call me\", \"phone\": \"1\"}"
            ).string("command_id"))
        run = Task { try await device.client.run(fixSource: device.source) }
        defer { run.cancel() }
        try await eventually("the lost shown") {
            device.actions.calls.withLock { $0.contains("showLost \(lost) call me 1") }
        }
        #expect(device.actions.calls.withLock { $0.filter { $0.hasPrefix("startSound") }.count } == 1)
        #expect(device.transport.reports.withLock { $0.count } == 1)
    }
}

extension FindMyClientEndToEndTests {
    @Test func pausedTheServerStoresNothingAndPushTokensGoAtEnrolmentAndOnRotation() async throws {
        let data = ScratchDirectory("findmy-client-pause")
        let server = try ServerProcess(data: data.path)
        var stopped = false
        defer { if !stopped { server.stop() } }
        let user = try addUser("anna", data: data.path)
        let device = try Device(data.path, batchFixesMax: 100, batchAgeSeconds: 0)
        // Registered before the device is enrolled: kept, and sent once it is.
        try await device.client.registerPushToken(PushToken(provider: "fcm", token: "first-token"))
        let credentials = try await device.client.enrol(
            serverURL: "http://\(server.address)", userToken: user, name: "laptop")
        try await device.client.registerPushToken(PushToken(provider: "fcm", token: "rotated-token"))
        let run = Task { try await device.client.run(fixSource: device.source) }
        defer { run.cancel() }

        try await device.client.setPaused(true)
        #expect(device.client.isPaused)
        device.source.emit(
            ClientFix(
                latitude: 52.1, longitude: 13.4, accuracyMeters: 8, source: "gps",
                recordedAtMicros: ClientClock.nowMicros()))
        #expect(device.client.queue.counts == (0, 0), "a fix while paused is not taken")
        let connection = HTTPConnectionBox(server.address)
        let refused = try connection.post(
            "/api/find-my/report", token: credentials.deviceToken!,
            body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
        #expect(refused.status == 409 && refused.errorCode == "reporting_paused")

        try await device.client.setPaused(false)
        device.source.emit(
            ClientFix(
                latitude: 52.2, longitude: 13.4, accuracyMeters: 8, source: "gps",
                recordedAtMicros: ClientClock.nowMicros()))
        try await eventually("the fix after the pause sent") {
            device.log.lines.withLock { $0.contains { $0.contains("stored: 1 of 1") } }
        }
        run.cancel()
        server.stop()
        stopped = true

        let log = try dumpLog(data.path)
        let latitudes = try log.batches.flatMap { try $0.fixes.map { try $0["latitude"]!.doubleValue } }
        #expect(latitudes == [52.2])
        let pushes = log.records.filter { $0["type"] == .string("push_token_registered") }
        #expect(pushes.count == 2)
    }
}

/// Polls `condition` until it holds or a generous deadline passes (which only bounds a failing test).
func eventually(_ what: String, timeoutSeconds: Double = 120, _ condition: () throws -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(timeoutSeconds)
    while try !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("waited \(Int(timeoutSeconds)) s for: \(what)")
            throw TestFailure("timed out waiting for \(what)")
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// A device of the test: the client with the test's platform parts and log.
final class Device: Sendable {
    let client: FindMyClient
    let source = ScriptedFixSource()
    let actions = RecordingActions()
    let transport: FaultyTransport
    let log = LogLines()

    init(
        _ data: String, batchFixesMax: Int, batchAgeSeconds: Double = 0.2, cutFirstReportAnswer: Bool = false,
        withoutStream: Bool = false, backoffSecondsMax: Double = 0.5, unreachableRetrySecondsMax: Double = 4
    ) throws {
        transport = FaultyTransport(cutFirstReportAnswer: cutFirstReportAnswer, withoutStream: withoutStream)
        let log = self.log
        var configuration = ClientConfiguration(
            stateDirectory: data + "/device-\(UUID().uuidString.prefix(8))", platform: "linux",
            log: { line in log.lines.withLock { $0.append(line) } })
        configuration.batchFixesMax = batchFixesMax
        configuration.batchAgeSeconds = batchAgeSeconds
        // The server is stopped for a moment only: retry soon (unless a test says otherwise).
        configuration.backoffSecondsMax = backoffSecondsMax
        configuration.unreachableRetrySecondsMax = unreachableRetrySecondsMax
        client = try FindMyClient(
            configuration: configuration, transport: transport, credentials: MemoryCredentialStore(),
            actions: actions)
    }
}

final class LogLines: Sendable {
    let lines = Mutex<[String]>([])
}

/// Fixes when the test says; a fresh fix for a locate at once.
final class ScriptedFixSource: FixSource {
    let handler = Mutex<(@Sendable (ClientFix) -> Void)?>(nil)
    let freshFixesAsked = Mutex(0)

    func start(onFix: @escaping @Sendable (ClientFix) -> Void) throws { handler.withLock { $0 = onFix } }
    func stop() { handler.withLock { $0 = nil } }
    func emit(_ fix: ClientFix) { handler.withLock { $0 }?(fix) }

    func freshFix(timeoutSeconds: Double) async -> ClientFix? {
        freshFixesAsked.withLock { $0 += 1 }
        return ClientFix(
            latitude: 52.7, longitude: 13.4, accuracyMeters: 5, source: "gps",
            recordedAtMicros: ClientClock.nowMicros())
    }
}

/// The platform's actions as a list of what was asked, in order.
final class RecordingActions: DeviceActions {
    let calls = Mutex<[String]>([])
    func startSound(commandID: String, limitSeconds: Double) {
        calls.withLock { $0.append("startSound \(commandID)") }
    }
    func stopSound() { calls.withLock { $0.append("stopSound") } }
    func showLost(commandID: String, message: String, phone: String) {
        calls.withLock { $0.append("showLost \(commandID) \(message) \(phone)") }
    }
    func clearLost() { calls.withLock { $0.append("clearLost") } }
}

final class MemoryCredentialStore: CredentialStore {
    let stored = Mutex<DeviceCredentials?>(nil)
    func load() throws -> DeviceCredentials? { stored.withLock { $0 } }
    func save(_ credentials: DeviceCredentials) throws { stored.withLock { $0 = credentials } }
}

/// The agent's socket transport, with faults on demand: the answer of the first report lost after
/// the server stored it (a connection cut on the way back), or the stream answered 404 as by a
/// server without it; every report's answer kept.
final class FaultyTransport: ClientTransport {
    let inner = SocketClientTransport(timeoutSeconds: 30, streamIdleSeconds: 90)
    let cutFirstReportAnswer: Bool
    let withoutStream: Bool
    let reports = Mutex<[(cut: Bool, answer: JSONValue?)]>([])

    init(cutFirstReportAnswer: Bool, withoutStream: Bool) {
        self.cutFirstReportAnswer = cutFirstReportAnswer
        self.withoutStream = withoutStream
    }

    func send(_ request: ClientRequest) async throws -> ClientResponse {
        let response = try await inner.send(request)
        guard request.url.hasSuffix("/api/find-my/report") else { return response }
        let cut = cutFirstReportAnswer && reports.withLock { $0.isEmpty }
        reports.withLock { $0.append((cut, try? JSONParser.parse(response.body))) }
        if cut { throw TestFailure("the connection was cut before the answer arrived") }
        return response
    }

    func stream(
        _ request: ClientRequest, onHead: @escaping @Sendable (ClientResponse) -> Void,
        onBytes: @escaping @Sendable ([UInt8]) -> Void
    ) async throws {
        guard !withoutStream else {
            onHead(ClientResponse(status: 404, headers: []))
            return
        }
        try await inner.stream(request, onHead: onHead, onBytes: onBytes)
    }
}

/// A blocking connection for the owner's requests, usable from an async test.
final class HTTPConnectionBox: @unchecked Sendable {
    let connection: HTTPConnection
    let lock = Mutex(())
    init(_ address: String) { connection = HTTPConnection(address: address) }
    func post(_ path: String, token: String, body: String) throws -> Answer {
        try lock.withLock { _ in try EndToEndTests.post(connection, path, token: token, body: body) }
    }
}
