import Crypto
import Events
import HTTPClient
import Identity
import JSON
import Synchronization
import Threads

/// `findmy serve --headscale-url`: what it polls and how (docs/presence.md, "Configuration").
public struct HeadscaleConfiguration: Sendable, Equatable {
    /// The headscale server, e.g. `https://headscale.example.com` (http:// for a local one).
    public var url: String
    /// A file holding the API key (`headscale apikeys create`), readable by its owner only.
    public var apiKeyFile: String
    public var pollSeconds: Int = 30
    /// findmy user name → headscale user name; a findmy user not named here maps to the headscale
    /// user of the same name.
    public var userNames: [String: String] = [:]
    /// Trust this CA file instead of the system's.
    public var caFile: String?
    /// Failures space polls out (doubling from `pollSeconds`) up to this.
    public var backoffSecondsMax = 600

    public static let pollSecondsMin = 1
    public static let pollSecondsMax = 86_400

    public init(url: String, apiKeyFile: String) {
        self.url = url
        self.apiKeyFile = apiKeyFile
    }

    /// The delay before the next poll after `failures` failures in a row.
    public func delaySeconds(afterFailures failures: Int) -> Int {
        guard failures > 0 else { return pollSeconds }
        let cap = max(pollSeconds, backoffSecondsMax)
        var delay = pollSeconds
        for _ in 0..<min(failures, 32) where delay < cap { delay = min(cap, delay * 2) }
        return delay
    }

    /// `/api/v1/node` under the configured URL (a trailing slash or not).
    public var nodesURL: String {
        (url.hasSuffix("/") ? String(url.dropLast()) : url) + "/api/v1/node"
    }
}

/// The headscale poller (a service with one thread), the linking of devices to nodes (the API and
/// the panel through `PresenceLinking`), and its status in /healthz and /metrics.
///
/// Each round: one `GET /api/v1/node` with the API key; on an answer, every linked device's node
/// is judged by `PresenceRule` against the state the registry folded from the log, and a change is
/// appended (`IdentityService.recordPresence`). On a failure nothing is recorded (a headscale that
/// does not answer says nothing about the nodes) and the next poll waits longer.
public final class PresenceService: Service, StatusSource, PresenceLinking {
    public let name = "presence"
    let configuration: HeadscaleConfiguration
    let identity: IdentityService
    let clockMicros: @Sendable () -> Int64
    private let worker = StoppableThread()
    private let client = Mutex<HTTP2Client?>(nil)
    private let status = Mutex(Status())

    struct Status {
        var nodes: [HeadscaleNode]?
        var nodesAtMicros: Int64 = 0
        var lastSuccessMicros: Int64?
        var lastFailure: HeadscaleFailure?
        var consecutiveFailures = 0
        var polls: [String: Int] = [:]
        var changesRecorded = 0
        var nextDelaySeconds = 0
    }

    public init(
        _ configuration: HeadscaleConfiguration, identity: IdentityService,
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        precondition(
            (HeadscaleConfiguration.pollSecondsMin...HeadscaleConfiguration.pollSecondsMax).contains(
                configuration.pollSeconds))
        self.configuration = configuration
        self.identity = identity
        self.clockMicros = clockMicros
    }

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    /// Checks the key file (owner-only, not empty) before anything starts: a wrong file stops the
    /// start with a message, rather than a server that polls with no key.
    public func start() throws {
        try prepare()
        worker.start { [self] stop in
            repeat {
                let delay = round()
                if stop.wait(micros: Int64(delay) * 1_000_000) { break }
            } while true
        }
    }

    /// What `start` does before its thread: the key file checked, the client made. Tests run
    /// rounds on their own thread after it.
    func prepare() throws {
        _ = try Self.readKey(configuration.apiKeyFile)
        var options = HTTP2Client.Options(caFile: configuration.caFile)
        options.requestTimeoutMillis = 15_000
        options.connectTimeoutMillis = 5_000
        // A node list is about 1 KB per node.
        options.responseBytesMax = 16 * 1024 * 1024
        client.withLock { $0 = HTTP2Client(name: "headscale", options: options) }
    }

    public func stop(graceMicros: Int64) {
        worker.stopSignal.request()
        // Fails a request in flight, so the worker does not wait out its timeout.
        let closing = client.withLock { $0 }
        closing?.close()
        worker.stop()
    }

    static func readKey(_ path: String) throws(PresenceSetupError) -> String {
        let bytes: [UInt8]
        do { bytes = try KeyFile.readPrivate(path) } catch { throw .keyFile(error) }
        let key = String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
        guard !key.isEmpty, !key.contains(where: { $0 == "\n" || $0 == "\r" }) else {
            throw .emptyKey(path: path)
        }
        return key
    }

    // MARK: a round

    /// Polls once, records the changes, and returns the seconds until the next poll.
    @discardableResult
    func round() -> Int {
        let result = fetch()
        let now = clockMicros()
        switch result {
        case .success(let nodes):
            status.withLock {
                $0.nodes = nodes
                $0.nodesAtMicros = now
                $0.lastSuccessMicros = now
                if $0.lastFailure != nil {
                    StructuredLog.info("presence_poll_recovered", ["nodes": .int(Int64(nodes.count))])
                }
                $0.lastFailure = nil
                $0.consecutiveFailures = 0
                $0.polls["ok", default: 0] += 1
            }
            record(nodes, atMicros: now)
        case .failure(let failure):
            // A poll cut by the stop says nothing about headscale.
            if worker.stopSignal.isRequested { return 0 }
            status.withLock {
                if $0.lastFailure != failure {
                    StructuredLog.error(
                        "presence_poll_failed",
                        ["state": .string(failure.state), "error": .string(failure.description)])
                }
                $0.lastFailure = failure
                $0.consecutiveFailures += 1
                $0.polls[failure.state, default: 0] += 1
            }
        }
        return status.withLock {
            $0.nextDelaySeconds = configuration.delaySeconds(afterFailures: $0.consecutiveFailures)
            return $0.nextDelaySeconds
        }
    }

    /// Records every linked device's change against `nodes`, seen at `atMicros`.
    func record(_ nodes: [HeadscaleNode], atMicros now: Int64) {
        var byID: [String: HeadscaleNode] = [:]
        for node in nodes { byID[node.id] = node }
        for linked in identity.presenceLinks() {
            guard let node = byID[linked.link.nodeID] else { continue }
            recordChange(deviceID: linked.deviceID, node: node, atMicros: now)
        }
    }

    private func recordChange(deviceID: UInt64, node: HeadscaleNode, atMicros now: Int64) {
        do {
            let changed = try identity.recordPresence(deviceID: deviceID) { link, last in
                PresenceRule.change(
                    deviceID: deviceID, link: link, last: last, observed: node, nowMicros: now)
            }
            guard let changed else { return }
            status.withLock { $0.changesRecorded += 1 }
            StructuredLog.info(
                "presence_changed",
                [
                    "device_id": .int(Int64(deviceID)), "headscale_node_id": .string(node.id),
                    "online": .bool(changed.online),
                ])
        } catch {
            // The log could not take it: the next poll finds the same difference and tries again.
            StructuredLog.error(
                "presence_record_failed",
                ["device_id": .int(Int64(deviceID)), "error": .string(error.message)])
        }
    }

    /// One GET, waited for. The key is read again on every poll, so a key replaced in its file
    /// (after a 401) is used without a restart.
    func fetch() -> Result<[HeadscaleNode], HeadscaleFailure> {
        let key: String
        do {
            key = try Self.readKey(configuration.apiKeyFile)
        } catch {
            return .failure(.keyFile(error.description))
        }
        guard let client = client.withLock({ $0 }) else { return .failure(.unreachable("not started")) }
        let answer = OneShot<Result<IncomingResponse, TransportFailure>>()
        client.send(
            .get(
                configuration.nodesURL, headers: ["Authorization: Bearer \(key)", "Accept: application/json"])
        ) { answer.set($0) }
        switch answer.wait() {
        case .failure(let failure): return .failure(.unreachable(failure.message))
        case .success(let response): return HeadscaleNodes.nodes(status: response.status, body: response.body)
        }
    }

    // MARK: linking (PresenceLinking)

    /// The headscale user whose nodes findmy user `userID` may link to.
    public func headscaleUser(userID: UInt64) -> String? {
        identity.userName(userID).map { configuration.userNames[$0] ?? $0 }
    }

    public func linkableNodes(userID: UInt64) throws(APIError) -> [LinkableNode] {
        try ownNodes(userID: userID).map {
            LinkableNode(id: $0.id, name: $0.name, online: $0.online, lastSeenMicros: $0.lastSeenMicros)
        }
    }

    func ownNodes(userID: UInt64) throws(APIError) -> [HeadscaleNode] {
        let (nodes, failure) = status.withLock { ($0.nodes, $0.lastFailure) }
        guard let nodes else {
            throw APIError(
                status: 503, code: .presenceUnavailable,
                message:
                    "headscale has not answered yet (\(failure?.description ?? "the first poll is under way")); try again in a minute"
            )
        }
        guard let owner = headscaleUser(userID: userID) else { return [] }
        return nodes.filter { $0.userName == owner }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
    }

    @discardableResult
    public func link(deviceID: UInt64, userID: UInt64, node: String?) throws(APIError) -> UInt64? {
        guard let node else {
            return try identity.setPresenceLink(deviceID: deviceID, userID: userID, node: nil)
        }
        let own = try ownNodes(userID: userID)
        guard
            let found = own.first(where: { $0.id == node }) ?? own.first(where: { $0.name == node })
                ?? own.first(where: { $0.hostName == node })
        else {
            throw APIError(
                status: 404, code: .presenceNodeNotFound,
                message:
                    "no node '\(node)' among the tailnet nodes of headscale user '\(headscaleUser(userID: userID) ?? "")'; GET /api/find-my/presence/nodes lists the ones you may link"
            )
        }
        let offset = try identity.setPresenceLink(
            deviceID: deviceID, userID: userID,
            node: LinkableNode(
                id: found.id, name: found.name, online: found.online, lastSeenMicros: found.lastSeenMicros))
        // The node list is at most one poll old: its state is recorded now rather than at the next poll.
        let seenAt = status.withLock { $0.nodesAtMicros }
        recordChange(deviceID: deviceID, node: found, atMicros: seenAt)
        return offset
    }

    // MARK: StatusSource

    public func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let snapshot = status.withLock { $0 }
        var members: [(String, JSONValue)] = [
            (
                "state",
                .string(
                    snapshot.lastFailure?.state ?? (snapshot.lastSuccessMicros == nil ? "starting" : "ok"))
            ),
            ("url", .string(configuration.nodesURL)),
            ("poll_seconds", .integer(Int64(configuration.pollSeconds))),
            ("consecutive_failures", .integer(Int64(snapshot.consecutiveFailures))),
            ("next_poll_in_s", .integer(Int64(snapshot.nextDelaySeconds))),
            ("nodes", .integer(Int64(snapshot.nodes?.count ?? 0))),
            ("linked_devices", .integer(Int64(identity.presenceLinks().count))),
            ("changes_recorded", .integer(Int64(snapshot.changesRecorded))),
        ]
        members.append(
            ("last_success_at", snapshot.lastSuccessMicros.map { .string(RFC3339.formatMicros($0)) } ?? .null)
        )
        members.append(("error", snapshot.lastFailure.map { .string($0.description) } ?? .null))
        return (snapshot.lastFailure != nil, members)
    }

    public func metricsText() -> String {
        let snapshot = status.withLock { $0 }
        var text = """
            # HELP findmy_presence_up Whether the last poll of headscale answered with a node list.
            # TYPE findmy_presence_up gauge
            findmy_presence_up \(snapshot.lastFailure == nil && snapshot.lastSuccessMicros != nil ? 1 : 0)
            # HELP findmy_presence_polls_total Polls of headscale, by outcome.
            # TYPE findmy_presence_polls_total counter

            """
        for outcome in ["ok", "unauthorized", "unreachable", "http_error", "bad_answer", "key_file"] {
            text += "findmy_presence_polls_total{result=\"\(outcome)\"} \(snapshot.polls[outcome] ?? 0)\n"
        }
        text += """
            # HELP findmy_presence_changes_total Presence changes recorded in the log since the start.
            # TYPE findmy_presence_changes_total counter
            findmy_presence_changes_total \(snapshot.changesRecorded)
            # HELP findmy_presence_nodes Nodes in headscale's last answer.
            # TYPE findmy_presence_nodes gauge
            findmy_presence_nodes \(snapshot.nodes?.count ?? 0)
            # HELP findmy_presence_consecutive_failures Failed polls since the last answer.
            # TYPE findmy_presence_consecutive_failures gauge
            findmy_presence_consecutive_failures \(snapshot.consecutiveFailures)

            """
        return text
    }
}

/// Why presence could not start.
public enum PresenceSetupError: Error, Equatable, Sendable, CustomStringConvertible {
    case keyFile(KeyFileError)
    case emptyKey(path: String)

    public var description: String {
        switch self {
        case .keyFile(let error): "--headscale-api-key-file: \(error)"
        case .emptyKey(let path):
            "--headscale-api-key-file: \(path) must hold the API key on one line (headscale apikeys create)"
        }
    }
}

/// A value set once by one thread and waited for by another.
final class OneShot<Value: Sendable>: @unchecked Sendable {
    private let lock = ConditionLock()
    private var value: Value?

    func set(_ newValue: Value) {
        lock.withLock {
            if value == nil { value = newValue }
            lock.broadcast()
        }
    }

    func wait() -> Value {
        lock.withLock {
            while value == nil { lock.wait() }
            return value!
        }
    }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        var slice = self[...]
        while let first = slice.first, first.isWhitespace { slice = slice.dropFirst() }
        while let last = slice.last, last.isWhitespace { slice = slice.dropLast() }
        return String(slice)
    }
}
