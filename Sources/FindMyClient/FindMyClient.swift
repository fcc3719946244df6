import Synchronization

// The device side of findmy (docs/client-library.md): enrolment, the durable queue and its sender,
// the pause switch, push tokens, and commands from report answers and the command stream, acted on
// through the platform's protocols (Platform.swift) and answered as docs/commands.md says.

public struct ClientConfiguration: Sendable {
    /// Holds `queue/` and `client-state.json`.
    public var stateDirectory: String
    /// The enrolment's `platform` (`linux`, `ios`, ...) and `model`.
    public var platform: String
    public var model: String
    public var batchFixesMax = 100
    public var batchAgeSeconds = 60.0
    /// How long a sound plays at most.
    public var soundLimitSeconds = 120.0
    /// How long a `locate` waits for a fresh fix.
    public var locateTimeoutSeconds = 30.0
    /// Retries of a failed send wait at most this long (before jitter).
    public var backoffSecondsMax = 300.0
    /// While the server cannot be reached at all (no connection, no answer), retries wait at most
    /// this long, jitter included: a device back online sends its queue within seconds, and a
    /// connection attempt to an absent server costs next to nothing. An app on a battery raises it
    /// and calls `networkChanged()` when the system says the network is back.
    public var unreachableRetrySecondsMax = 4.0
    /// One line per event (a sent batch, a rejected fix, a command); no trailing newline.
    public var log: @Sendable (String) -> Void

    public init(
        stateDirectory: String, platform: String, model: String = "",
        log: @escaping @Sendable (String) -> Void
    ) {
        self.stateDirectory = stateDirectory
        self.platform = platform
        self.model = model
        self.log = log
    }
}

public final class FindMyClient: Sendable {
    public let configuration: ClientConfiguration
    public let queue: FixQueue
    let transport: any ClientTransport
    let store: any CredentialStore
    /// nil for a client that only enrols or reports (a command line's enrolment): commands are then
    /// answered as usual but nothing rings or shows.
    let actions: (any DeviceActions)?
    let battery: (any BatterySource)?
    let credentials: Mutex<DeviceCredentials?>
    let state: Mutex<ClientState>
    /// Held while the state is changed and written, so that writes go one at a time, newest last.
    let saving = Mutex(())
    let fixSource = Mutex<(any FixSource)?>(nil)
    let senderBell = Doorbell()
    let streamBell = Doorbell()
    /// Moves when the server may have become reachable (the stream connected, the network changed,
    /// new credentials): a sender holding off after a failure goes at once. New fixes do not move
    /// it, so that a device recording while offline does not knock on the server for each fix.
    let reachability = Atomic<Int>(0)

    public init(
        configuration: ClientConfiguration, transport: any ClientTransport, credentials: any CredentialStore,
        actions: (any DeviceActions)?, battery: (any BatterySource)? = nil
    ) throws {
        self.configuration = configuration
        self.transport = transport
        self.store = credentials
        self.actions = actions
        self.battery = battery
        try QueueFiles.makeDirectories(configuration.stateDirectory)
        queue = try FixQueue(
            directory: configuration.stateDirectory + "/queue", batchFixesMax: configuration.batchFixesMax,
            batchAgeSeconds: configuration.batchAgeSeconds)
        self.credentials = Mutex(try credentials.load())
        state = Mutex(try ClientState.load(configuration.stateDirectory + "/client-state.json"))
    }

    var log: @Sendable (String) -> Void { configuration.log }

    /// The credentials as stored; nil before the first enrolment.
    public var currentCredentials: DeviceCredentials? { credentials.withLock { $0 } }

    public var isPaused: Bool { state.withLock { $0.paused } }

    /// Whether the state directory says reporting is paused, read without opening the client (another
    /// process may run it).
    public static func isPaused(stateDirectory: String) -> Bool {
        (try? ClientState.load(stateDirectory + "/client-state.json"))?.paused ?? false
    }

    // MARK: Enrolment

    /// Enrols with a user token (`POST /api/find-my/devices`). The device UUID is made once and
    /// stored before the request, so that enrolling again (another token, a retry) is the same device.
    @discardableResult
    public func enrol(serverURL: String, userToken: String, name: String) async throws -> DeviceCredentials {
        var server = Substring(serverURL.trimmingWhiteSpace())
        while server.hasSuffix("/") { server = server.dropLast() }
        var current =
            credentials.withLock { $0 }
            ?? DeviceCredentials(
                serverURL: String(server), deviceUUID: ClientClock.randomUUID(), deviceID: nil,
                deviceToken: nil, name: name, platform: configuration.platform, model: configuration.model)
        current.serverURL = String(server)
        current.name = name
        current.platform = configuration.platform
        current.model = configuration.model
        try save(current)
        let body =
            "{\"device_uuid\":\(Wire.quoted(current.deviceUUID)),\"name\":\(Wire.quoted(name)),"
            + "\"platform\":\(Wire.quoted(current.platform)),\"model\":\(Wire.quoted(current.model))}"
        let response = try await transport.send(
            jsonRequest(
                "POST", current.serverURL + "/api/find-my/devices", token: userToken, body: Array(body.utf8)))
        guard response.status == 200 || response.status == 201 else { throw ClientError.from(response) }
        let answer: EnrolmentAnswer
        do {
            answer = try EnrolmentAnswer(response.body)
        } catch {
            throw ClientError.unreadableAnswer(status: response.status, "\(error)")
        }
        current.deviceID = answer.deviceID
        current.deviceToken = answer.deviceToken
        try save(current)
        log("enrolled as device \(answer.deviceID) (\(current.deviceUUID)) at \(current.serverURL)")
        await resendPushTokens()
        return current
    }

    /// Takes the credentials of the panel's setup link as they are: the panel enrolled already.
    @discardableResult
    public func enrol(setupLink text: String, name: String) async throws -> DeviceCredentials {
        let link = try SetupLink.parse(text)
        let current = DeviceCredentials(
            serverURL: link.serverURL, deviceUUID: link.deviceUUID, deviceID: link.deviceID,
            deviceToken: link.deviceToken, name: name, platform: configuration.platform,
            model: configuration.model)
        try save(current)
        log("enrolled from a setup link as device \(link.deviceID) (\(link.deviceUUID)) at \(link.serverURL)")
        await resendPushTokens()
        return current
    }

    private func save(_ new: DeviceCredentials) throws {
        try store.save(new)
        credentials.withLock { $0 = new }
        mayReachServer()
    }

    /// Says the network changed (an app's reachability callback): the sender and the command
    /// stream try again now instead of waiting out their back-off.
    public func networkChanged() {
        log("network changed: trying the server again")
        mayReachServer()
    }

    func mayReachServer() {
        reachability.add(1, ordering: .releasing)
        senderBell.ring()
        streamBell.ring()
    }

    // MARK: Fixes

    /// Takes fixes into the durable queue: when this returns they survive a crash. The battery is
    /// read for a fix that does not say. While reporting is paused they are dropped.
    public func record(_ fixes: [ClientFix]) throws {
        guard !isPaused else { return }
        let battery = self.battery?.current()
        let withBattery = fixes.map { fix in
            var fix = fix
            if fix.batteryPercent == nil, let battery {
                fix.batteryPercent = battery.percent
                fix.isCharging = battery.isCharging
            }
            return fix
        }
        let taken = try queue.append(withBattery)
        if taken < fixes.count { log("skipped \(fixes.count - taken) fixes whose position is not a number") }
        senderBell.ring()
    }

    public func record(_ fix: ClientFix) throws { try record([fix]) }

    // MARK: Pause

    /// Turns reporting off or on, said to the server (`POST /api/find-my/reporting`) and kept.
    public func setPaused(_ paused: Bool) async throws {
        let response = try await transport.send(
            try deviceRequest("POST", "/api/find-my/reporting", body: Array("{\"paused\":\(paused)}".utf8)))
        guard response.status == 200 else { throw ClientError.from(response) }
        try updateState { $0.paused = paused }
        log(paused ? "reporting paused" : "reporting resumed")
        senderBell.ring()
    }

    // MARK: Push tokens

    /// Registers a push token (replacing the earlier one of its provider) and keeps it, so that it is
    /// registered again after an enrolment.
    public func registerPushToken(_ token: PushToken) async throws {
        try updateState { state in
            state.pushTokens.removeAll { $0.provider == token.provider }
            state.pushTokens.append(token)
        }
        guard currentCredentials?.deviceToken != nil else { return }
        try await sendPushToken(token)
    }

    private func sendPushToken(_ token: PushToken) async throws {
        let response = try await transport.send(
            try deviceRequest("POST", "/api/find-my/push-tokens", body: token.requestBody))
        guard response.status == 200 else { throw ClientError.from(response) }
        log("push token of \(token.provider) registered")
    }

    private func resendPushTokens() async {
        for token in state.withLock({ $0.pushTokens }) {
            do { try await sendPushToken(token) } catch {
                log("push token of \(token.provider) not registered: \(error)")
            }
        }
    }

    // MARK: Running

    /// Starts `fixSource` (fixes go into the queue) and runs the sender and the command stream until
    /// the task is cancelled; then stops the source and seals nothing (the open batch stays open).
    public func run(fixSource source: (any FixSource)?) async throws {
        fixSource.withLock { $0 = source }
        if let lost = state.withLock({ $0.commands.lost }) {
            actions?.showLost(commandID: lost.commandID, message: lost.message ?? "", phone: lost.phone ?? "")
        }
        try source?.start { [weak self] fix in
            guard let self else { return }
            do { try self.record(fix) } catch { self.log("a fix could not be queued: \(error)") }
        }
        defer { source?.stop() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.runSender() }
            group.addTask { await self.runCommandStream() }
        }
    }

    /// Stops the alarm on the device (a person pressed stop; SIGUSR1 in the agent).
    public func stopSound() {
        try? updateState { $0.commands.soundStopped() }
        actions?.stopSound()
        log("sound stopped on the device")
    }

    // MARK: Helpers

    func updateState(_ change: (inout ClientState) -> Void) throws {
        try saving.withLock { _ in
            let snapshot = state.withLock { state -> ClientState in
                change(&state)
                return state
            }
            try snapshot.save(configuration.stateDirectory + "/client-state.json")
        }
    }

    func deviceRequest(_ method: String, _ path: String, body: [UInt8] = []) throws -> ClientRequest {
        guard let credentials = currentCredentials, let token = credentials.deviceToken else {
            throw ClientError.notEnrolled
        }
        return jsonRequest(method, credentials.serverURL + path, token: token, body: body)
    }

    func jsonRequest(_ method: String, _ url: String, token: String, body: [UInt8]) -> ClientRequest {
        var headers = [ClientHeader("Authorization", "Bearer " + token)]
        if !body.isEmpty { headers.append(ClientHeader("Content-Type", "application/json")) }
        return ClientRequest(method: method, url: url, headers: headers, body: body)
    }

    /// The wait before attempt `failures + 1`: doubling from one second to the maximum, times a
    /// random factor in [0.5, 1.5) so that devices cut off together do not come back together.
    /// `reachedServer` false (no connection, no answer): at most `unreachableRetrySecondsMax`,
    /// jittered below it.
    package func backoffSeconds(failures: Int, reachedServer: Bool = true) -> Double {
        let base = min(configuration.backoffSecondsMax, Double(1 << min(failures, 20)))
        let wait = base * Double.random(in: 0.5..<1.5)
        guard !reachedServer else { return wait }
        return min(wait, configuration.unreachableRetrySecondsMax * Double.random(in: 0.5..<1.0))
    }
}
