import Events
import Foundation
import HTTPClient
import JSON
import NATSLog
import NATSSupport
import Testing

/// Two `findmy serve --log nats://` ingest nodes on a real three-node JetStream cluster on
/// loopback (docs/scale.md, "Ingest nodes"). Every process is stopped by a `defer`, whatever the
/// outcome: the nodes by SIGKILL, the cluster (under pdeathsig as well) when released.
@Suite(.serialized) struct IngestNodesTests {
    static let partitions = 4

    /// Runs `body` with a fresh three-node cluster and two ingest nodes on it; every node and the
    /// cluster are killed when it returns or throws.
    static func withNodes(extraArguments: [String] = [], _ body: (IngestNodes) throws -> Void) throws {
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let nodes = try IngestNodes(cluster: cluster, partitions: partitions, extraArguments: extraArguments)
        defer { nodes.killAll() }
        try body(nodes)
    }

    /// Two ingest nodes on `cluster`, each with its own data directory (admin socket) in `scratch`,
    /// both given `extraArguments` too (IngestNodesOnceTests).
    static func startNodes(
        _ cluster: NATSCluster, _ scratch: ScratchDirectory, extraArguments: [String] = []
    ) throws -> [ServerProcess] {
        let log = cluster.logArgument
        var nodes: [ServerProcess] = []
        do {
            for index in 1...2 {
                nodes.append(
                    try ServerProcess(
                        data: scratch.path + "/node\(index)",
                        extraArguments: ["--log", log, "--log-partitions", "\(partitions)"] + extraArguments))
            }
        } catch {
            // The caller's defer never sees a node started before the failure.
            for node in nodes { node.kill9() }
            throw error
        }
        return nodes
    }

    /// How many registry changes each node decided again after another node took their new id
    /// (its `registry_conflict` lines).
    static func conflicts(_ nodes: [ServerProcess]) -> [Int] {
        nodes.map { $0.process.standardError.components(separatedBy: "registry_conflict").count - 1 }
    }

    /// Every record of the stream, read back with JetStreamLog, in offset order.
    static func streamRecords(_ cluster: NATSCluster) throws -> [(record: LogRecord, event: Event)] {
        var configuration = cluster.patientLogConfiguration(partitions: partitions)
        configuration.createsStream = false
        let log = try JetStreamLog(configuration)
        defer { log.close() }
        var records: [(LogRecord, Event)] = []
        for partition in 0..<partitions {
            try log.read(partition: partition, from: 0, upTo: nil) { record in
                records.append((record, try record.event()))
                return true
            }
        }
        return records.sorted { $0.0.offset < $1.0.offset }
    }

    @Test func aDeviceMadeThroughOneNodeReportsThroughTheOtherAndARetryIsADuplicate() throws {
        try Self.withNodes { ingest in
            let cluster = ingest.cluster
            let nodes = ingest.nodes
            let one = HTTPConnection(address: nodes[0].address)
            let two = HTTPConnection(address: nodes[1].address)

            // The user through node 1's admin socket, the device through node 1's API.
            let userToken = try addUser("alice", data: ingest.dataDirectory(0))
            let uuid = "3b4e28ba-2fa1-11d2-883f-0016d3cca427"
            let enrolled = try enrol(one, userToken: userToken, uuid: uuid)
            #expect(enrolled.status == 201, "\(enrolled.body)")
            let deviceToken = try #require(enrolled.string("device_token"))
            let deviceID = try #require(enrolled.int("device_id"))

            // Node 2 never saw the request: it knows the token from the stream (at once, or after
            // catching up with the stream's end before it would answer 401).
            let batchID = UUID().uuidString.lowercased()
            let body = reportBody(batchID: batchID, fixes: [fixJSON(latitude: 1), fixJSON(latitude: 2)])
            let first = try post(two, "/api/find-my/report", token: deviceToken, body: body)
            #expect(first.status == 200, "\(first.body) \(nodes[1].process.standardError)")
            #expect(first.int("accepted") == 2 && first.body["duplicate"] == .bool(false))

            // The same batch retried through node 1: a duplicate with the first result.
            let retry = try post(one, "/api/find-my/report", token: deviceToken, body: body)
            #expect(retry.status == 200 && retry.body["duplicate"] == .bool(true), "\(retry.body)")
            #expect(retry.int("offset") == first.int("offset") && retry.int("accepted") == 2)

            // The enrolment retried through node 2 (its answer lost, say): the same device, not a
            // second one (a new token, as a re-enrolment on one machine gives).
            let again = try enrol(two, userToken: userToken, uuid: uuid)
            #expect(again.status == 200 && again.int("device_id") == deviceID, "\(again.body)")
            let newToken = try #require(again.string("device_token"))
            #expect(
                try post(
                    one, "/api/find-my/report", token: newToken,
                    body: reportBody(
                        batchID: UUID().uuidString, fixes: [fixJSON()])
                ).status == 200)

            // An app's report (Overland, the fixtures' batch) through node 2 takes the same path.
            let overland = try #require(try AppRequestFixture.all("overland", token: newToken).first)
            let overlandAnswer = try overland.send(two)
            #expect(overlandAnswer.status == overland.status)

            // A token no node made: 401 once node 2 has caught up with the stream.
            let unknown = try post(
                two, "/api/find-my/report", token: "fm_d_" + String(repeating: "x", count: 40), body: body)
            #expect(unknown.status == 401)

            // In the stream: one user, one device, the batch exactly once.
            let records = try Self.streamRecords(cluster)
            let users = records.filter { if case .userCreated = $0.event { true } else { false } }
            let devices = records.filter { if case .deviceEnrolled = $0.event { true } else { false } }
            let batches = records.filter {
                if case .fixBatch(let batch) = $0.event {
                    batch.batchID == UUID128(batchID)! && batch.deviceID == UInt64(deviceID)
                } else {
                    false
                }
            }
            let deviceBatches = records.filter {
                if case .fixBatch(let batch) = $0.event { batch.deviceID == UInt64(deviceID) } else { false }
            }
            #expect(deviceBatches.count == 3, "the native batch, the one with the new token, Overland's")
            #expect(users.count == 1 && devices.count == 1, "\(records.map(\.record.header.type))")
            #expect(
                batches.count == 1 && batches.first.map { Int64($0.record.offset) } == first.int("offset"))
            if case .fixBatch(let stored)? = batches.first?.event {
                #expect(stored.fixes.map(\.latitude) == [1, 2])
            }
            // SIGTERM: an ingest node stops its listeners, its follower and its NATS connection, exit 0.
            for node in nodes { #expect(node.stop() == 0, "\(node.process.standardError)") }
        }
    }

    /// A device token made through node 1 while node 2 was stopped (SIGSTOP), used through node 2
    /// the moment it runs again: node 2 has not folded the enrolment yet when the request comes,
    /// and answers 200 because an unknown token waits for the node to catch up with the stream.
    @Test func aTokenMadeWhileTheOtherNodeWasBehindIsWaitedFor() throws {
        try Self.withNodes { ingest in
            let nodes = ingest.nodes
            let one = HTTPConnection(address: nodes[0].address)
            let userToken = try addUser("dora", data: ingest.dataDirectory(0))
            let address = nodes[1].address
            var answers: [Int] = []
            for round in 0..<3 {
                nodes[1].process.kill(SIGSTOP)
                let enrolled = try enrol(
                    one, userToken: userToken, uuid: UUID().uuidString, name: "r\(round)")
                let deviceToken = try #require(enrolled.string("device_token"))
                let status = StatusSlot()
                let sender = Thread {
                    // The kernel accepts the connection while node 2 is stopped; it reads it once resumed.
                    let answer = try? post(
                        HTTPConnection(address: address), "/api/find-my/report", token: deviceToken,
                        body: reportBody(batchID: UUID().uuidString, fixes: [fixJSON()]))
                    status.set(answer?.status ?? 0)
                }
                sender.start()
                usleep(200_000)  // not a synchronisation: only lets the request reach node 2's socket
                nodes[1].process.kill(SIGCONT)
                #expect(waitUntil(timeoutSeconds: 60) { status.value != nil })
                answers.append(status.value ?? 0)
            }
            #expect(
                answers == [200, 200, 200], "node 2 answered \(answers): \(nodes[1].process.standardError)")
        }
    }

    /// A batch stored through node 2 while node 1 was stopped, retried through node 1 the moment it
    /// runs again: node 1 has not folded the batch when the retry comes, JetStream knows its Msg-Id,
    /// and node 1 answers it as a duplicate with the first offset.
    @Test func aRetryReachingANodeBehindIsStillADuplicate() throws {
        try Self.withNodes { ingest in
            let nodes = ingest.nodes
            let userToken = try addUser("erin", data: ingest.dataDirectory(0))
            let enrolled = try enrol(
                HTTPConnection(address: nodes[0].address), userToken: userToken, uuid: UUID().uuidString)
            let deviceToken = try #require(enrolled.string("device_token"))
            let two = HTTPConnection(address: nodes[1].address)
            let address = nodes[0].address
            for _ in 0..<3 {
                let body = reportBody(batchID: UUID().uuidString, fixes: [fixJSON()])
                nodes[0].process.kill(SIGSTOP)
                let first = try post(two, "/api/find-my/report", token: deviceToken, body: body)
                #expect(first.status == 200 && first.body["duplicate"] == .bool(false))
                let retry = AnswerSlot()
                let sender = Thread {
                    retry.set(
                        try? post(
                            HTTPConnection(address: address), "/api/find-my/report", token: deviceToken,
                            body: body))
                }
                sender.start()
                usleep(200_000)  // not a synchronisation: only lets the request reach node 1's socket
                nodes[0].process.kill(SIGCONT)
                #expect(waitUntil(timeoutSeconds: 60) { retry.value != nil })
                let answer = try #require(retry.value ?? nil)
                #expect(answer.status == 200 && answer.body["duplicate"] == .bool(true), "\(answer.body)")
                #expect(answer.int("offset") == first.int("offset"))
            }
        }
    }

    /// Users and devices created at the same moment through both nodes: every id is given once
    /// (a node that allocated an id another node took meanwhile is refused by its partition's
    /// expectation and decides again), and every answer names the record the stream holds.
    @Test func idsAllocatedAtOnceThroughBothNodesAreDistinct() throws {
        try Self.withNodes { ingest in
            let cluster = ingest.cluster
            let nodes = ingest.nodes
            let workers = 4
            let usersPerWorker = 6
            let answers = AllocationAnswers()
            let threads = (0..<workers).map { worker in
                let node = ingest.dataDirectory(worker % 2)
                let address = nodes[worker % 2].address
                return Thread {
                    let admin = HTTPConnection(address: "unix:" + node + "/admin.sock")
                    let api = HTTPConnection(address: address)
                    for index in 0..<usersPerWorker {
                        let name = "u\(worker)-\(index)"
                        guard
                            let created = try? post(
                                admin, "/admin/users", token: nil, body: "{\"name\": \"\(name)\"}"),
                            created.status == 201, let userID = created.int("user_id"),
                            let token = created.string("token")
                        else {
                            answers.fail("user \(name) not created")
                            continue
                        }
                        answers.named(name, userID)
                        for device in 0..<2 {
                            let uuid = UUID().uuidString
                            guard let enrolled = try? enrol(api, userToken: token, uuid: uuid),
                                enrolled.status == 201, let deviceID = enrolled.int("device_id")
                            else {
                                answers.fail("device \(device) of \(name) not enrolled")
                                continue
                            }
                            answers.device(deviceID, owner: userID, uuid: uuid)
                        }
                    }
                }
            }
            for thread in threads { thread.start() }
            #expect(waitUntil(timeoutSeconds: 300) { threads.allSatisfy(\.isFinished) })
            #expect(answers.failures.isEmpty, "\(answers.failures)")

            var userIDs: [UInt64: [String]] = [:]
            var deviceIDs: [UInt64: [(UInt64, UUID128)]] = [:]
            for (_, event) in try Self.streamRecords(cluster) {
                switch event {
                case .userCreated(let created): userIDs[created.userID, default: []].append(created.name)
                case .deviceEnrolled(let enrolled):
                    deviceIDs[enrolled.deviceID, default: []].append((enrolled.userID, enrolled.deviceUUID))
                default: break
                }
            }
            #expect(userIDs.count == workers * usersPerWorker && userIDs.values.allSatisfy { $0.count == 1 })
            #expect(
                deviceIDs.count == workers * usersPerWorker * 2
                    && deviceIDs.values.allSatisfy { $0.count == 1 })
            for (name, userID) in answers.byName {
                #expect(userIDs[UInt64(userID)] == [name], "the answer for \(name) names user \(userID)")
            }
            for (deviceID, owner) in answers.devices {
                let stored = deviceIDs[UInt64(deviceID)]?.first
                #expect(stored?.0 == UInt64(owner.userID) && stored?.1 == UUID128(owner.uuid))
            }
            print(
                "ids allocated at once through both nodes: \(userIDs.count) users, \(deviceIDs.count) devices, "
                    + "conflicts decided again: \(Self.conflicts(nodes))"
            )
        }
    }

    /// The time from node 1's answer to an enrolment until node 2's registry holds it, printed
    /// (docs/scale.md quotes it); asserted only to be finite, as no test asserts a duration.
    @Test func aChangeThroughOneNodeReachesTheOther() throws {
        try Self.withNodes { ingest in
            let nodes = ingest.nodes
            let one = HTTPConnection(address: nodes[0].address)
            let two = HTTPConnection(address: nodes[1].address)
            let userToken = try addUser("bob", data: ingest.dataDirectory(0))
            var millis: [Double] = []
            for _ in 0..<40 {
                let enrolled = try enrol(one, userToken: userToken, uuid: UUID().uuidString)
                let answered = ContinuousClock.now
                let offset = try #require(enrolled.int("offset"))
                let reached = try waitUntil(timeoutSeconds: 60) {
                    let health = try two.send("GET", "/healthz", headers: [], body: [])
                    let document = try JSONParser.parse(health.body)
                    let applied = try document["registry_follower"]?["applied_end"]?.int64Value ?? 0
                    return applied > offset
                }
                #expect(reached)
                let elapsed = ContinuousClock.now - answered
                millis.append(
                    Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000)
            }
            millis.sort()
            print(
                "registry visibility node 1 -> node 2 over \(millis.count) enrolments: median "
                    + String(format: "%.2f", millis[millis.count / 2]) + " ms, p90 "
                    + String(format: "%.2f", millis[millis.count * 9 / 10]) + " ms, max "
                    + String(format: "%.2f", millis.last!) + " ms (polled through GET /healthz)")
        }
    }

    /// Reports through both nodes from several threads while the stream's leader is killed
    /// (SIGKILL): every report answered 200 is in the stream exactly once afterwards.
    @Test func acknowledgedReportsSurviveANATSNodeKilled() throws {
        try Self.withNodes { ingest in
            let cluster = ingest.cluster
            let nodes = ingest.nodes
            let userToken = try addUser("carol", data: ingest.dataDirectory(0))
            let setup = HTTPConnection(address: nodes[0].address)
            let devicesCount = 6
            var tokens: [String] = []
            for index in 0..<devicesCount {
                let enrolled = try enrol(
                    setup, userToken: userToken, uuid: UUID().uuidString, name: "d\(index)")
                tokens.append(try #require(enrolled.string("device_token")))
            }

            let tally = LoadTally()
            let addresses = nodes.map(\.address)
            let frozenTokens = tokens
            let threads = (0..<devicesCount).map { index in
                Thread {
                    let connection = HTTPConnection(address: addresses[index % 2], timeoutSeconds: 30)
                    while !tally.stopping {
                        let batchID = UUID().uuidString.lowercased()
                        tally.count(sent: 1)
                        guard
                            let answer = try? post(
                                connection, "/api/find-my/report", token: frozenTokens[index],
                                body: reportBody(batchID: batchID, fixes: [fixJSON()])),
                            answer.status == 200, let offset = answer.int("offset")
                        else {
                            tally.count(refused: 1)
                            continue
                        }
                        tally.acknowledge(batchID, offset)
                    }
                }
            }
            for thread in threads { thread.start() }
            defer { tally.stop() }
            #expect(waitUntil(timeoutSeconds: 120) { tally.acknowledged.count >= 50 })

            // The stream's leader: the node whose acknowledgement every append waits for.
            var configuration = JetStreamLogConfiguration(
                servers: cluster.urls, partitionCount: Self.partitions)
            configuration.createsStream = false
            let probe = try JetStreamLog(configuration)
            let leaderName = try probe.streamLeader()
            probe.close()
            let leader = cluster.nodes.firstIndex { $0.name == leaderName } ?? 0
            let before = tally.acknowledged.count
            cluster.kill(leader)
            #expect(
                waitUntil(timeoutSeconds: 120) { tally.acknowledged.count >= before + 100 },
                "reports did not go on after node \(leader) was killed: \(nodes[0].process.standardError)")
            tally.stop()
            #expect(waitUntil(timeoutSeconds: 120) { threads.allSatisfy(\.isFinished) })

            let records = try Self.streamRecords(cluster)
            var stored: [String: [Int64]] = [:]
            for (record, event) in records {
                if case .fixBatch(let batch) = event {
                    stored["\(batch.batchID)".lowercased(), default: []].append(Int64(record.offset))
                }
            }
            let answered = tally.acknowledged
            let missing = answered.filter { stored[$0.key] == nil }
            let twice = stored.filter { $0.value.count > 1 }
            // Acknowledged at one offset, stored at another: the answer named the wrong record.
            let moved = answered.filter { entry in stored[entry.key].map { $0 != [entry.value] } ?? false }
            print(
                "kill -9 of NATS node \(cluster.nodes[leader].name) (the stream leader) under load: "
                    + "\(tally.sent) sent, \(answered.count) acknowledged, "
                    + "\(tally.refused) refused or failed (to be retried by the phone), "
                    + "\(missing.count) acknowledged but missing, \(twice.count) stored twice")
            #expect(missing.isEmpty && twice.isEmpty && moved.isEmpty)
        }
    }
}

/// Two `findmy serve --log nats://` ingest nodes on `cluster`, each with its own data directory
/// (admin socket, server keys) in a scratch directory; a node can be killed and started again on
/// the same directory (at a new port) while other threads read `address(_:)`.
final class IngestNodes: @unchecked Sendable {
    let cluster: NATSCluster
    let scratch = ScratchDirectory("findmy-nodes")
    private let arguments: [String]
    private let lock = NSLock()
    private var processes: [ServerProcess] = []

    init(cluster: NATSCluster, partitions: Int, extraArguments: [String] = []) throws {
        self.cluster = cluster
        arguments = ["--log", cluster.logArgument, "--log-partitions", "\(partitions)"] + extraArguments
        do {
            for index in 0..<2 { processes.append(try start(index)) }
        } catch {
            // The caller's defer never sees a node started before the failure.
            killAll()
            throw error
        }
    }

    var nodes: [ServerProcess] { lock.withLock { processes } }
    /// Node `index`'s current HTTP address (it changes when the node is started again).
    func address(_ index: Int) -> String { lock.withLock { processes[index].address } }
    func dataDirectory(_ index: Int) -> String { scratch.path + "/node\(index + 1)" }

    /// SIGKILL node `index`, then start it again on its data directory; returns once it listens.
    func restart(_ index: Int) throws {
        kill9(index)
        let started = try start(index)
        lock.withLock { processes[index] = started }
    }

    func kill9(_ index: Int) {
        let node = lock.withLock { processes[index] }
        if node.process.process.isRunning { node.kill9() }
    }

    /// Every node that still runs: resumed first (a test may have stopped one), then SIGKILL.
    func killAll() {
        for node in nodes where node.process.process.isRunning {
            node.process.kill(SIGCONT)
            node.kill9()
        }
    }

    private func start(_ index: Int) throws -> ServerProcess {
        try ServerProcess(data: dataDirectory(index), extraArguments: arguments)
    }
}

/// What the load threads of a test did, shared between them.
final class LoadTally: @unchecked Sendable {
    private let lock = NSLock()
    private var acknowledgedBatches: [String: Int64] = [:]
    private var sentCount = 0
    private var refusedCount = 0
    private var stopRequested = false

    var acknowledged: [String: Int64] { lock.withLock { acknowledgedBatches } }
    var sent: Int { lock.withLock { sentCount } }
    var refused: Int { lock.withLock { refusedCount } }
    var stopping: Bool { lock.withLock { stopRequested } }

    func stop() { lock.withLock { stopRequested = true } }
    func acknowledge(_ batchID: String, _ offset: Int64) {
        lock.withLock { acknowledgedBatches[batchID] = offset }
    }
    func count(sent: Int = 0, refused: Int = 0) {
        lock.withLock {
            sentCount += sent
            refusedCount += refused
        }
    }
}

/// What the allocation tests' threads were answered: the id given for each name (a user's, a
/// geofence's), and each device's owner.
final class AllocationAnswers: @unchecked Sendable {
    private let lock = NSLock()
    private var namedAnswers: [String: Int64] = [:]
    private var deviceAnswers: [Int64: (userID: Int64, uuid: String)] = [:]
    private var failureTexts: [String] = []

    var byName: [String: Int64] { lock.withLock { namedAnswers } }
    var devices: [Int64: (userID: Int64, uuid: String)] { lock.withLock { deviceAnswers } }
    var failures: [String] { lock.withLock { failureTexts } }

    func named(_ name: String, _ id: Int64) { lock.withLock { namedAnswers[name] = id } }
    func device(_ id: Int64, owner: Int64, uuid: String) {
        lock.withLock { deviceAnswers[id] = (owner, uuid) }
    }
    func fail(_ text: String) { lock.withLock { failureTexts.append(text) } }
}

/// One status code handed from a sending thread to the test.
final class StatusSlot: @unchecked Sendable {
    private let lock = NSLock()
    private var status: Int?
    var value: Int? { lock.withLock { status } }
    func set(_ value: Int) { lock.withLock { status = value } }
}

/// One answer handed from a sending thread to the test (nil inside: the request failed).
final class AnswerSlot: @unchecked Sendable {
    private let lock = NSLock()
    private var answer: Answer??
    var value: Answer?? { lock.withLock { answer } }
    func set(_ value: Answer?) { lock.withLock { answer = .some(value) } }
}
