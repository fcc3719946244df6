import Events
import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import NATSLog
import NATSSupport
import Testing

/// What one machine writes once, two ingest nodes must write once too (docs/scale.md, "Ingest
/// nodes"): a geofence's id, a command's expiry, an OwnTracks MQTT message both nodes receive.
/// Real processes: three nats-server, two `findmy serve --log nats://`, a mosquitto; every one
/// stopped by a `defer` (and the cluster and broker under pdeathsig), whatever the outcome.
@Suite(.serialized) struct IngestNodesOnceTests {
    /// Fences created at the same moment through both nodes, all of one user (the case where a
    /// shared id silently replaced the earlier fence): every fence is kept, with an id of its own,
    /// and every answer names the fence the stream holds under that id.
    @Test func geofencesCreatedAtOnceThroughBothNodesKeepDistinctIDs() throws {
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let scratch = ScratchDirectory("findmy-nodes")
        let nodes = try IngestNodesTests.startNodes(cluster, scratch)
        defer { for node in nodes where node.process.process.isRunning { node.kill9() } }
        let userToken = try addUser("fay", data: scratch.path + "/node1")
        let enrolled = try enrol(
            HTTPConnection(address: nodes[0].address), userToken: userToken, uuid: UUID().uuidString)
        let deviceID = try #require(enrolled.int("device_id"))
        let workers = 4
        let fencesPerWorker = 6
        let answers = AllocationAnswers()
        let addresses = nodes.map(\.address)
        let threads = (0..<workers).map { worker in
            Thread {
                let api = HTTPConnection(address: addresses[worker % 2])
                for index in 0..<fencesPerWorker {
                    let name = "f\(worker)-\(index)"
                    let body =
                        "{\"name\": \"\(name)\", \"latitude\": 52.5, \"longitude\": 13.4, "
                        + "\"radius_m\": \(100 + worker * 10 + index), \"device_ids\": [\(deviceID)]}"
                    guard
                        let created = try? post(api, "/api/find-my/geofences", token: userToken, body: body),
                        created.status == 201, let id = created.int("geofence_id")
                    else {
                        answers.fail("fence \(name) not created")
                        continue
                    }
                    answers.named(name, id)
                }
            }
        }
        for thread in threads { thread.start() }
        #expect(waitUntil(timeoutSeconds: 300) { threads.allSatisfy(\.isFinished) })
        #expect(answers.failures.isEmpty, "\(answers.failures)")

        var definitions: [UInt64: [String]] = [:]
        let records = try IngestNodesTests.streamRecords(cluster)
        for (_, event) in records {
            if case .geofenceDefined(let defined) = event {
                definitions[defined.geofenceID, default: []].append(defined.name)
            }
        }
        let fences = workers * fencesPerWorker
        #expect(definitions.count == fences, "ids in the stream: \(definitions.keys.sorted())")
        #expect(definitions.values.allSatisfy { $0.count == 1 }, "an id defined twice: \(definitions)")
        for (name, id) in answers.byName {
            #expect(definitions[UInt64(id)] == [name], "the answer for \(name) names fence \(id)")
        }
        // Both nodes list every fence, each once, under the id its creation was answered with, once
        // each has folded the whole stream.
        let end = Int64(records.last?.record.offset ?? 0) + 1
        for node in nodes {
            #expect(waitUntil(timeoutSeconds: 60) { ((try? Self.appliedEnd(node)) ?? 0) >= end })
            let listed = try get(
                HTTPConnection(address: node.address), "/api/find-my/geofences", token: userToken)
            let pairs = try listed.body["geofences"]?.arrayValue.map {
                (try $0["name"]!.stringValue, try $0["geofence_id"]!.int64Value)
            }
            #expect(pairs.map { Dictionary($0, uniquingKeysWith: { a, _ in a }) } == answers.byName)
            #expect(pairs?.count == fences)
        }
        print(
            "geofences created at once through both nodes: \(definitions.count) ids, conflicts decided again: "
                + "\(IngestNodesTests.conflicts(nodes))")
    }

    /// Every node's dispatcher expires the same commands. Both nodes are stopped (SIGSTOP) until
    /// their locates are past their 2 s expiry and resumed together while records keep arriving,
    /// so both decide the expiries at once, each at its own position in the log: each command
    /// must have exactly one `command_expired` in the stream.
    @Test func aCommandExpiresOnceWhateverTheNumberOfNodes() throws {
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let scratch = ScratchDirectory("findmy-nodes")
        let expirySeconds = 2
        let nodes = try IngestNodesTests.startNodes(
            cluster, scratch,
            extraArguments: [
                "--command-locate-expiry-seconds", "\(expirySeconds)", "--command-locate-interval-seconds",
                "1",
            ])
        defer {
            for node in nodes {
                node.process.kill(SIGCONT)
                if node.process.process.isRunning { node.kill9() }
            }
        }
        let userToken = try addUser("gus", data: scratch.path + "/node1")
        let one = HTTPConnection(address: nodes[0].address)
        var devices: [Int64] = []
        for index in 0..<8 {
            let enrolled = try enrol(one, userToken: userToken, uuid: UUID().uuidString, name: "d\(index)")
            devices.append(try #require(enrolled.int("device_id")))
        }

        var commands: [String] = []
        for round in 0..<3 {
            var requestedAt = Date()
            for device in devices {
                // Rounds are 1 s apart at least: the locate interval.
                let answer = try post(
                    one, "/api/find-my/devices/\(device)/commands", token: userToken,
                    body: "{\"kind\": \"locate\"}")
                #expect(answer.status == 202, "round \(round): \(answer.body)")
                if let id = answer.string("command_id") { commands.append(id.lowercased()) }
                requestedAt = Date()
            }
            for node in nodes { node.process.kill(SIGSTOP) }
            // Waiting for a time to pass, not for a process: the locates must be due when both resume.
            _ = waitUntil(timeoutSeconds: 60) {
                Date().timeIntervalSince(requestedAt) > Double(expirySeconds) + 0.5
            }
            // Records arriving while both nodes catch up and decide: they decide at different
            // positions, so a Msg-Id made of the position would differ between them.
            let traffic = try StreamTraffic(cluster, deviceID: UInt64(devices[0]))
            defer { traffic.stop() }
            _ = waitUntil(timeoutSeconds: 60) { traffic.appended >= 200 }
            for node in nodes { node.process.kill(SIGCONT) }
            let requested = commands
            #expect(
                try waitUntil(timeoutSeconds: 120) {
                    try Self.expiries(cluster, of: requested).count == requested.count
                }, "round \(round): not every locate expired")
            traffic.stop()
        }
        // A registry change through each node waits for that node's mutations lock, which its
        // dispatcher holds until its expiries are stored: after these, each node has stored every
        // expiry it decided, and decides none again (it folded them, and those commands are closed).
        for node in nodes {
            let enrolled = try enrol(
                HTTPConnection(address: node.address), userToken: userToken, uuid: UUID().uuidString)
            #expect(enrolled.status == 201)
        }
        let expiries = try Self.expiries(cluster, of: commands)
        let twice = expiries.filter { $0.value > 1 }
        print(
            "command expiries through two nodes: \(commands.count) locates, \(expiries.count) expired, "
                + "\(twice.count) recorded more than once (\(twice.values.reduce(0, +)) records)")
        #expect(expiries.count == commands.count && twice.isEmpty, "\(twice)")
    }

    /// The stream's `command_expired` records per command id of `commands`.
    static func expiries(_ cluster: NATSCluster, of commands: [String]) throws -> [String: Int] {
        let wanted = Set(commands)
        var counts: [String: Int] = [:]
        for (_, event) in try IngestNodesTests.streamRecords(cluster) {
            if case .commandExpired(let expired) = event, wanted.contains(expired.commandID.description) {
                counts[expired.commandID.description, default: 0] += 1
            }
        }
        return counts
    }

    /// Both nodes subscribed to one mosquitto (each with its own persistent session) receive
    /// every OwnTracks message. The batch id is derived from the message, a place's Msg-Id from
    /// the batch id, a command's answer's from the command: the stream holds one device, one
    /// batch per location, one record per region transition and per waypoints message, and one
    /// answer.
    @Test func twoNodesOnOneMQTTBrokerStoreEachMessageOnce() throws {
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let broker = try Mosquitto()
        let scratch = ScratchDirectory("findmy-nodes")
        let nodes = try IngestNodesTests.startNodes(
            cluster, scratch, extraArguments: ["--mqtt-url", "mqtt://127.0.0.1:\(broker.port)"])
        defer { for node in nodes where node.process.process.isRunning { node.kill9() } }
        let alice = try addUser("alice", data: scratch.path + "/node1")
        for node in nodes {
            #expect(
                waitUntil(timeoutSeconds: 60) {
                    (try? OwnTracksMQTTTests.mqttHealth(node)["subscribed"]) == .bool(true)
                }, "\(node.process.standardError)")
        }
        let topic = "owntracks/alice/phone"
        let latitudes = [46.1, 46.2, 46.3, 46.4, 46.5]
        var published = 0
        for (index, latitude) in latitudes.enumerated() {
            try broker.publish(
                topic: topic, OwnTracksMQTTTests.location(latitude: latitude, secondsAgo: 300 - index))
            published += 1
        }
        for node in nodes {
            #expect(
                waitUntil(timeoutSeconds: 60) {
                    OwnTracksMQTTTests.count(node, "acknowledgements_sent") == Int64(published)
                }, "\(node.process.standardError)")
        }
        let phone = try #require(
            try IngestNodesTests.streamRecords(cluster).lazy.compactMap { entry -> UInt64? in
                if case .deviceEnrolled(let enrolled) = entry.event { enrolled.deviceID } else { nil }
            }.first)
        // From here records arrive while both nodes take each message: their positions in the
        // log differ, so a Msg-Id made of the position would differ between them.
        let traffic = try StreamTraffic(cluster, deviceID: phone)
        defer { traffic.stop() }
        _ = waitUntil(timeoutSeconds: 60) { traffic.appended >= 50 }

        let tst = Int(Date().timeIntervalSince1970) - 200
        let crossings = ["enter", "leave", "enter"]
        for (index, crossing) in crossings.enumerated() {
            try broker.publish(
                topic: topic + "/event",
                "{\"_type\":\"transition\",\"event\":\"\(crossing)\",\"desc\":\"home\",\"t\":\"c\","
                    + "\"tst\":\(tst + index),\"wtst\":\(tst - 1000),\"lat\":46.15,\"lon\":13.4,\"acc\":20,"
                    + "\"rid\":\"r1\",\"tid\":\"ph\"}")
        }
        let places = ["work", "school"]
        for (index, place) in places.enumerated() {
            try broker.publish(
                topic: topic + "/waypoints",
                "{\"_type\":\"waypoints\",\"waypoints\":[{\"_type\":\"waypoint\",\"desc\":\"\(place)\","
                    + "\"lat\":46.2,\"lon\":13.41,\"rad\":150,\"tst\":\(tst - 5000 + index)}]}")
        }
        published += crossings.count + places.count
        // Both nodes acknowledged everything: stored by one, a duplicate (or folded) on the other.
        for node in nodes {
            #expect(
                waitUntil(timeoutSeconds: 60) {
                    OwnTracksMQTTTests.count(node, "acknowledgements_sent") == Int64(published)
                },
                "\(node.process.standardError)")
        }

        // A locate through node 1, answered by a location sent for it (`t: "r"`), which both
        // nodes receive and both may take as the answer.
        let locate = try post(
            HTTPConnection(address: nodes[0].address), "/api/find-my/devices/\(phone)/commands", token: alice,
            body: "{\"kind\": \"locate\"}")
        #expect(locate.status == 202, "\(locate.body)")
        let commandID = try #require(locate.string("command_id")).lowercased()
        let locateOffset = try #require(locate.int("offset"))
        for node in nodes {
            #expect(waitUntil(timeoutSeconds: 60) { (try? Self.appliedEnd(node)) ?? 0 > locateOffset })
        }
        let answerTst = Int(Date().timeIntervalSince1970) - 5
        try broker.publish(
            topic: topic,
            "{\"_type\":\"location\",\"lat\":46.9,\"lon\":13.405,\"tst\":\(answerTst),\"acc\":12,\"t\":\"r\",\"tid\":\"ph\"}"
        )
        published += 1
        // The answer's append is handed to the acknowledgement threads before the message is
        // acknowledged: once nothing is in flight on either node, every answer decided is stored.
        for node in nodes {
            #expect(
                waitUntil(timeoutSeconds: 60) {
                    OwnTracksMQTTTests.count(node, "acknowledgements_sent") == Int64(published)
                        && (try? Self.appendsInFlight(node)) == 0
                }, "\(node.process.standardError)")
        }
        traffic.stop()

        var batches: [Double: Int] = [:]
        var enrolments = 0
        var transitions = 0
        var waypoints = 0
        var answers = 0
        for (_, event) in try IngestNodesTests.streamRecords(cluster) {
            switch event {
            case .fixBatch(let batch) where !StreamTraffic.wrote(batch):
                for fix in batch.fixes { batches[fix.latitude, default: 0] += 1 }
            case .deviceEnrolled: enrolments += 1
            case .regionTransition: transitions += 1
            case .waypointsReported: waypoints += 1
            case .commandAnswered(let answered) where answered.commandID.description == commandID:
                answers += 1
            default: break
            }
        }
        #expect(enrolments == 1)
        #expect(
            batches == Dictionary(uniqueKeysWithValues: (latitudes + [46.9]).map { ($0, 1) }), "\(batches)")
        #expect(
            transitions == crossings.count && waypoints == places.count,
            "transitions \(transitions), waypoints \(waypoints)")
        #expect(answers == 1, "the locate answered \(answers) times")
        let received = nodes.map { OwnTracksMQTTTests.count($0, "messages_received") ?? -1 }
        print(
            "one broker, two nodes: \(published) messages published, received per node \(received); "
                + "in the stream: \(enrolments) device, \(batches.values.reduce(0, +)) fixes for "
                + "\(batches.count) locations, \(transitions) transitions, \(waypoints) waypoints, \(answers) answer"
        )
    }

    static func registryFollower(_ node: ServerProcess) throws -> JSONValue {
        let health = try get(HTTPConnection(address: node.address), "/healthz", token: nil)
        return health.body["registry_follower"] ?? .null
    }

    static func appliedEnd(_ node: ServerProcess) throws -> Int64 {
        try registryFollower(node)["applied_end"]?.int64Value ?? 0
    }

    static func appendsInFlight(_ node: ServerProcess) throws -> Int64? {
        try registryFollower(node)["appends_in_flight"]?.int64Value
    }
}

/// Fix batches appended straight to the stream by a thread of the test, one after another until
/// `stop`: traffic that moves the log's end while the nodes decide. Its fixes are at latitude
/// `latitude`, which no other fix of these tests has.
final class StreamTraffic: @unchecked Sendable {
    static let latitude = -1.25
    private let tally = LoadTally()
    private let thread: Thread

    init(_ cluster: NATSCluster, deviceID: UInt64) throws {
        var configuration = JetStreamLogConfiguration(
            servers: cluster.urls, partitionCount: IngestNodesTests.partitions)
        configuration.createsStream = false
        let log = try JetStreamLog(configuration)
        let tally = self.tally
        thread = Thread {
            defer { log.close() }
            while !tally.stopping {
                let fix = Fix(
                    latitude: Self.latitude, longitude: 2, accuracyMeters: 10, source: "significant",
                    recordedAtMicros: Int64(Date().timeIntervalSince1970 * 1e6))
                let batch = FixBatch(deviceID: deviceID, batchID: UUID128.random(), fixes: [fix])
                _ = try? log.append(batch: [EventCodec.encode(.fixBatch(batch), receivedAtMicros: 0)])
                tally.count(sent: 1)
            }
        }
        thread.start()
    }

    /// Records appended so far.
    var appended: Int { tally.sent }

    /// Stops the thread and waits for it (and its connection) to end.
    func stop() {
        tally.stop()
        _ = waitUntil(timeoutSeconds: 60) { thread.isFinished }
    }

    static func wrote(_ batch: FixBatch) -> Bool { batch.fixes.allSatisfy { $0.latitude == latitude } }
}
