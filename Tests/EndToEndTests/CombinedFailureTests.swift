import Events
import Foundation
import HTTPClient
import NATSLog
import NATSSupport
import Postgres
import Testing

/// The JetStream log's combined failure test (docs/scale.md, "Tests"): three nats-server processes, two
/// `findmy serve --log nats://` ingest nodes, one `findmy projector` and a private PostgreSQL, all
/// real processes on loopback. Devices report through both nodes while the stream's leader, then
/// ingest node 1, then the projector are killed with SIGKILL and started again; afterwards
/// PostgreSQL holds every acknowledged batch and fix exactly once, in each device's order, and
/// nothing that was never sent. Every process is killed when the test ends, passed or not.
@Suite(.serialized) struct CombinedFailureTests {
    static let devices = 24
    /// Progress awaited after each kill and each restart before the next step: acknowledgements
    /// from the devices, counted by the test (a condition, not a time).
    static let progressBatches = 150

    /// It failed about one run in 20 to 40 until two faults were found (docs/scale.md,
    /// "Everything at once"): a projector that moved its checkpoints to an end a lagging replica
    /// reported, and Debian 12's nats-server 2.9.10, whose replicas disagreed about sequences
    /// after the leader's kill (NATSCluster refuses it).
    @Test
    func acknowledgedReportsSurviveANATSNodeAnIngestNodeAndTheProjectorKilledInTurn() throws {
        try IngestNodesTests.withNodes { ingest in
            let postgres = try ScratchPostgres()
            let projectorArguments = [
                "--log", ingest.cluster.logArgument, "--database-url", postgres.conninfo,
                "--compact-interval-seconds", "0",
            ]
            var projectors = [
                try ProjectorProcess(
                    projectorArguments, outputPath: postgres.directory + "/projector-1.out",
                    executable: findmyExecutable())
            ]
            defer { for projector in projectors { projector.kill9() } }
            let admin = try PostgresConnection(postgres.conninfo)
            defer { admin.close() }
            var probeConfiguration = ingest.cluster.patientLogConfiguration(
                partitions: IngestNodesTests.partitions)
            probeConfiguration.createsStream = false
            let probe = try JetStreamLog(probeConfiguration)
            defer { probe.close() }

            let userToken = try addUser("chaos", data: ingest.dataDirectory(0))
            var deviceIDs: [Int64] = []
            var tokens: [String] = []
            for index in 0..<Self.devices {
                let enrolled = try enrol(
                    HTTPConnection(address: ingest.address(index % 2)), userToken: userToken,
                    uuid: UUID().uuidString, name: "d\(index)")
                tokens.append(try #require(enrolled.string("device_token"), "\(enrolled.body)"))
                deviceIDs.append(try #require(enrolled.int("device_id")))
            }

            let ledger = ChaosLedger(devices: Self.devices)
            // Recorded a little in the past, 30 ms apart per batch: never in the future of arrival.
            let firstRecordedMicros = (Int64(Date().timeIntervalSince1970 * 1000) - 3 * 3_600_000) * 1000
            let frozenTokens = tokens
            let threads = (0..<Self.devices).map { device in
                Thread {
                    reportUntilStopped(
                        device: device, token: frozenTokens[device], ingest: ingest, ledger: ledger,
                        firstRecordedMicros: firstRecordedMicros)
                }
            }
            for thread in threads { thread.start() }
            // Whatever fails below, the device threads end (and so release the nodes' addresses).
            defer { ledger.abandon() }
            let context = {
                "node 1: \(ingest.nodes[0].process.standardError.suffix(2000))\nnode 2: "
                    + "\(ingest.nodes[1].process.standardError.suffix(2000))\n"
                    + projectors.enumerated().map { index, projector in
                        "projector \(index + 1) (running: \(projector.isRunning)): \(projector.output.prefix(1500))"
                            + " ... \(projector.output.suffix(1500))\n"
                    }.joined()
                    + "stream end \((try? probe.durableEndOffset()).map(String.init) ?? "?"); "
                    + ((try? projectionState(admin)) ?? "projection unreadable")
            }
            func awaitProgress(_ what: String, batches: Int = Self.progressBatches) throws -> Double {
                let from = ledger.acknowledgedCount
                let started = Date()
                let reached = waitUntil(timeoutSeconds: 180) { ledger.acknowledgedCount >= from + batches }
                try #require(
                    reached,
                    "no progress \(what): \(ledger.acknowledgedCount - from) acknowledged\n\(context())")
                return Date().timeIntervalSince(started)
            }
            var figures: [String] = []
            var failedBefore = 0
            /// The attempts that failed since the last call, by what they got.
            func failedSince() -> String {
                let failed = ledger.failed
                defer { failedBefore = failed.values.reduce(0, +) }
                return "\(failed.values.reduce(0, +) - failedBefore) attempts failed meanwhile"
            }
            _ = try awaitProgress("before any kill")
            _ = failedSince()

            // 1. The stream's leader (the node every append waits for) killed, then started again.
            let leaderName = try probe.streamLeader()
            let leader = ingest.cluster.nodes.firstIndex { $0.name == leaderName } ?? 0
            ingest.cluster.kill(leader)
            let natsGoesOn = try awaitProgress("after NATS node \(leader + 1) was killed")
            try ingest.cluster.restart(leader)
            _ = try awaitProgress("after NATS node \(leader + 1) was restarted")
            figures.append(
                "NATS node \(ingest.cluster.nodes[leader].name) (stream leader) killed: "
                    + "\(Self.progressBatches) more acknowledged within \(seconds(natsGoesOn)); \(failedSince())"
            )

            // 2. Ingest node 1 killed; the devices retry through node 2; node 1 started again.
            ingest.kill9(0)
            let killedAt = Date()
            let nodeTwoAlone = try awaitProgress("through node 2 after node 1 was killed")
            let throughOneBefore = ledger.acknowledgedThrough(0)
            let restartStarted = Date()
            try ingest.restart(0)
            let listening = Date().timeIntervalSince(restartStarted)
            try #require(
                waitUntil(timeoutSeconds: 180) { ledger.acknowledgedThrough(0) > throughOneBefore + 20 },
                "no report acknowledged through the restarted node 1\n\(context())")
            figures.append(
                "ingest node 1 killed: \(Self.progressBatches) acknowledged through node 2 within "
                    + "\(seconds(nodeTwoAlone)); restarted node listening after \(seconds(listening)), "
                    + "acknowledging again \(seconds(Date().timeIntervalSince(killedAt))) after the kill; \(failedSince())"
            )

            // 3. The projector killed in the middle of folding, then started again: it goes on
            // from its committed checkpoints.
            try #require(
                waitUntil(timeoutSeconds: 180) { (try? mainCheckpoint(admin)) ?? 0 > 0 },
                "the projector folded nothing\n\(context())")
            let foldedBeforeKill = try count(admin, "SELECT count(*) FROM findmy.device_batches")
            projectors[0].kill9()
            let acknowledgedAtKill = ledger.highestAcknowledgedOffset
            _ = try awaitProgress("while the projector is down")
            let projectorRestarted = Date()
            projectors.append(
                try ProjectorProcess(
                    projectorArguments, outputPath: postgres.directory + "/projector-2.out",
                    executable: findmyExecutable()))
            try #require(
                waitUntil(timeoutSeconds: 300) { (try? mainCheckpoint(admin)) ?? 0 > acknowledgedAtKill },
                "the restarted projector did not fold past offset \(acknowledgedAtKill)\n\(context())")
            figures.append(
                "projector killed with \(foldedBeforeKill) batches folded: the restarted one had folded "
                    + "everything acknowledged before the kill \(seconds(Date().timeIntervalSince(projectorRestarted))) "
                    + "after its start")

            // The load stops (each device finishes the batch it is retrying); the projection
            // catches up with the stream's end.
            ledger.stop()
            try #require(
                waitUntil(timeoutSeconds: 300) { threads.allSatisfy(\.isFinished) },
                "device threads still retrying\n\(context())")
            let streamEnd = try probe.durableEndOffset()
            let drainStarted = Date()
            try #require(
                waitUntil(timeoutSeconds: 300) { (try? mainCheckpoint(admin)) ?? 0 >= Int64(streamEnd) },
                "the projection did not reach the stream's end \(streamEnd)\n\(context())")
            figures.append(
                "projection at the stream's end \(seconds(Date().timeIntervalSince(drainStarted))) after the load stopped"
            )

            let verdict = try ChaosVerdict(
                ledger: ledger, deviceIDs: deviceIDs, admin: admin,
                stream: try IngestNodesTests.streamRecords(ingest.cluster))
            print("combined failure test: " + verdict.summary)
            for figure in figures { print("combined failure test: " + figure) }
            #expect(verdict.problems.isEmpty, "\(verdict.problems.prefix(20))")
            #expect(ledger.unacknowledged == 0, "every batch was acknowledged in the end")
            #expect(verdict.acknowledgedFixes > 0 && verdict.presentFixes >= verdict.acknowledgedFixes)

            #expect(projectors[1].stop(), "the projector stops on SIGTERM")
            let stopped = projectors[1].output.split(separator: "\n").first {
                $0.contains("projector: stopped")
            }
            print("combined failure test: the restarted projector says \(stopped ?? "nothing")")
            for node in ingest.nodes {
                #expect(node.stop() == 0, "\(node.process.standardError.suffix(2000))")
            }
        }
    }
}

/// One device as a phone behaves: batches one after the other (the next only once the last was
/// acknowledged), 1-3 fixes each, round-robin through the two nodes; a failed attempt (refused,
/// timed out, not 200) is retried with the same batch id through the other node.
private func reportUntilStopped(
    device: Int, token: String, ingest: IngestNodes, ledger: ChaosLedger, firstRecordedMicros: Int64
) {
    var connections: [String: HTTPConnection] = [:]
    var node = device % 2
    var sequence = 0
    while !ledger.stopping {
        let batch = SentBatch(
            device: device, sequence: sequence, batchID: UUID().uuidString.lowercased(),
            recordedAtMicros: (0..<(1 + sequence % 3)).map {
                firstRecordedMicros + Int64(sequence) * 30_000 + Int64($0) * 10_000
            })
        ledger.send(batch)
        let body = reportBody(
            batchID: batch.batchID,
            fixes: batch.recordedAtMicros.map { fixJSON(latitude: batch.latitude, recordedAtMicros: $0) })
        var failures = 0
        while !ledger.abandoned {
            let address = ingest.address(node)
            let connection = connections[address] ?? HTTPConnection(address: address, timeoutSeconds: 30)
            connections[address] = connection
            let answer = try? post(connection, "/api/find-my/report", token: token, body: body)
            if let answer, answer.status == 200, let offset = answer.int("offset") {
                ledger.acknowledge(
                    batch, offset: offset, duplicate: answer.body["duplicate"] == .bool(true), node: node)
                break
            }
            ledger.countFailedAttempt(answer.map { "\($0.status) \($0.errorCode ?? "")" } ?? "no answer")
            connection.close()
            connections[address] = nil
            node = 1 - node
            failures += 1
            // Both nodes failed in turn: back off a little, as a phone's retry timer does.
            if failures % 2 == 0 { usleep(100_000) }
        }
        node = 1 - node
        sequence += 1
    }
}

/// A batch as a device sent it.
struct SentBatch: Sendable {
    var device: Int
    var sequence: Int
    var batchID: String
    var recordedAtMicros: [Int64]
    /// Says which device and batch a fix came from, so that a stray fix is recognised.
    var latitude: Double { 40 + Double(device) * 0.1 + Double(sequence % 1000) * 0.0001 }
}

/// What the devices sent and were answered, shared between their threads and the test.
final class ChaosLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var sentBatches: [[SentBatch]]
    private var acknowledgedOffsets: [String: Int64] = [:]
    private var throughNode = [0, 0]
    private var highestOffset: Int64 = -1
    private var failedAttempts: [String: Int] = [:]
    private var duplicateAnswers = 0
    private var stopRequested = false
    private var abandonRequested = false

    init(devices: Int) { sentBatches = Array(repeating: [], count: devices) }

    var stopping: Bool { lock.withLock { stopRequested || abandonRequested } }
    var abandoned: Bool { lock.withLock { abandonRequested } }
    var acknowledgedCount: Int { lock.withLock { acknowledgedOffsets.count } }
    var highestAcknowledgedOffset: Int64 { lock.withLock { highestOffset } }
    var sent: [[SentBatch]] { lock.withLock { sentBatches } }
    var acknowledged: [String: Int64] { lock.withLock { acknowledgedOffsets } }
    /// Failed attempts by what they got: "503 log_unavailable", "no answer" (refused, reset, timed out).
    var failed: [String: Int] { lock.withLock { failedAttempts } }
    var duplicates: Int { lock.withLock { duplicateAnswers } }
    var unacknowledged: Int {
        lock.withLock { sentBatches.joined().count - acknowledgedOffsets.count }
    }
    func acknowledgedThrough(_ node: Int) -> Int { lock.withLock { throughNode[node] } }

    /// No new batches; the one being retried is finished.
    func stop() { lock.withLock { stopRequested = true } }
    /// No more attempts at all (the test is ending, passed or not).
    func abandon() { lock.withLock { abandonRequested = true } }
    func send(_ batch: SentBatch) { lock.withLock { sentBatches[batch.device].append(batch) } }
    func countFailedAttempt(_ outcome: String) { lock.withLock { failedAttempts[outcome, default: 0] += 1 } }
    func acknowledge(_ batch: SentBatch, offset: Int64, duplicate: Bool, node: Int) {
        lock.withLock {
            acknowledgedOffsets[batch.batchID] = offset
            throughNode[node] += 1
            highestOffset = max(highestOffset, offset)
            if duplicate { duplicateAnswers += 1 }
        }
    }
}

/// The checks on PostgreSQL and the stream after the run, and the figures.
struct ChaosVerdict {
    var problems: [String] = []
    var summary = ""
    var acknowledgedFixes = 0
    var presentFixes = 0

    init(
        ledger: ChaosLedger, deviceIDs: [Int64], admin: PostgresConnection,
        stream: [(record: LogRecord, event: Event)]
    ) throws {
        let sent = ledger.sent
        let acknowledged = ledger.acknowledged
        let deviceOf = Dictionary(uniqueKeysWithValues: deviceIDs.enumerated().map { ($1, $0) })
        var sentByID: [String: SentBatch] = [:]
        for batch in sent.joined() { sentByID[batch.batchID] = batch }

        // Arrivals: every acknowledged batch once, at the offset its answer named; none unsent;
        // a device's batches in the order it sent them.
        let arrivals = try admin.execute(
            "SELECT device_id, batch_id::text, log_offset FROM findmy.device_batches ORDER BY device_id, log_offset"
        )
        var arrivalsOf: [String: [Int64]] = [:]
        var lastSequence: [Int64: Int] = [:]
        for row in 0..<arrivals.rowCount {
            let deviceID = try arrivals.int64(row, 0) ?? -1
            let batchID = (arrivals.string(row, 1) ?? "").lowercased()
            arrivalsOf[batchID, default: []].append(try arrivals.int64(row, 2) ?? -1)
            guard let batch = sentByID[batchID], deviceOf[deviceID] == batch.device else {
                problems.append("arrival \(batchID) of device \(deviceID) was never sent by it")
                continue
            }
            if let last = lastSequence[deviceID], last >= batch.sequence {
                problems.append("device \(batch.device): batch \(batch.sequence) folded after batch \(last)")
            }
            lastSequence[deviceID] = batch.sequence
        }
        for (batchID, offset) in acknowledged {
            let folded = arrivalsOf[batchID] ?? []
            if folded != [offset] {
                problems.append("batch \(batchID) acknowledged at \(offset), folded at \(folded)")
            }
        }

        // History: every acknowledged fix once; none unsent; a device's fixes in the order of
        // their recorded_at as sent (the fold's order is the log's, then the index in the batch).
        var expected: [Int64: Set<Int64>] = [:]
        var sentFixes: [Int64: [Int64: Double]] = [:]
        for batch in sent.joined() {
            let deviceID = deviceIDs[batch.device]
            for recorded in batch.recordedAtMicros {
                sentFixes[deviceID, default: [:]][recorded] = batch.latitude
                if acknowledged[batch.batchID] != nil {
                    expected[deviceID, default: []].insert(recorded)
                    acknowledgedFixes += 1
                }
            }
        }
        let history = try admin.execute(
            "SELECT device_id, (extract(epoch FROM recorded_at) * 1000000)::bigint, latitude "
                + "FROM findmy.device_locations ORDER BY device_id, log_offset, fix_index")
        presentFixes = history.rowCount
        var seen: [Int64: Set<Int64>] = [:]
        var lastRecorded: [Int64: Int64] = [:]
        for row in 0..<history.rowCount {
            let deviceID = try history.int64(row, 0) ?? -1
            let recorded = try history.int64(row, 1) ?? -1
            let latitude = try history.double(row, 2) ?? .nan
            if sentFixes[deviceID]?[recorded].map({ abs($0 - latitude) < 1e-9 }) != true {
                problems.append(
                    "fix of device \(deviceID) recorded at \(recorded) (\(latitude)) was never sent")
            }
            if !seen[deviceID, default: []].insert(recorded).inserted {
                problems.append("fix of device \(deviceID) recorded at \(recorded) is in the history twice")
            }
            if let last = lastRecorded[deviceID], last >= recorded {
                problems.append("device \(deviceID): fix recorded at \(recorded) folded after \(last)")
            }
            lastRecorded[deviceID] = recorded
        }
        var missingFixes = 0
        for (deviceID, fixes) in expected { missingFixes += fixes.subtracting(seen[deviceID] ?? []).count }
        if missingFixes > 0 { problems.append("\(missingFixes) acknowledged fixes missing from the history") }

        // The stream: copies of one batch beyond the first (stored twice, folded once).
        var copies: [String: Int] = [:]
        for (_, event) in stream {
            if case .fixBatch(let batch) = event { copies["\(batch.batchID)".lowercased(), default: 0] += 1 }
        }
        let extraCopies = copies.values.reduce(0) { $0 + $1 - 1 }
        // Lost by the stream, or skipped by the projector: which one a missing batch is.
        let missingFromStream = acknowledged.keys.filter { copies[$0] == nil }.count
        if missingFromStream > 0 {
            problems.append("\(missingFromStream) acknowledged batches are not in the stream")
        }
        let missingBatches = acknowledged.keys.filter { arrivalsOf[$0] == nil }.count
        summary =
            "\(sent.joined().count) batches sent by \(sent.count) devices, \(acknowledged.count) acknowledged "
            + "(\(acknowledgedFixes) fixes), \(ledger.failed.values.reduce(0, +)) attempts failed and retried through "
            + "the other node (\(ledger.failed.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))), "
            + "\(ledger.duplicates) retries answered as duplicates; in PostgreSQL \(arrivals.rowCount) batches and "
            + "\(presentFixes) fixes present, \(missingBatches) acknowledged batches and \(missingFixes) fixes "
            + "missing; in the stream \(missingFromStream) acknowledged batches missing and \(extraCopies) extra "
            + "copies (folded once); \(problems.count) problems"
    }
}

/// Checkpoints and arrivals, for a failure's message.
private func projectionState(_ connection: PostgresConnection) throws -> String {
    let rows = try connection.execute(
        "SELECT projection, next_offset FROM findmy.projector_checkpoints ORDER BY projection")
    let checkpoints = (0..<rows.rowCount).map { "\(rows.string($0, 0) ?? "") \(rows.string($0, 1) ?? "")" }
    let arrivals = try connection.execute(
        "SELECT count(*), max(log_offset) FROM findmy.device_batches")
    return "checkpoints: \(checkpoints.joined(separator: ", ")); arrivals: \(arrivals.string(0, 0) ?? "?"), "
        + "highest offset \(arrivals.string(0, 1) ?? "none")"
}

/// The whole projection's checkpoint (every partition folded below it); 0 before the first.
private func mainCheckpoint(_ connection: PostgresConnection) throws -> Int64 {
    let exists = try connection.execute("SELECT to_regclass('findmy.projector_checkpoints') IS NOT NULL")
    guard exists.string(0, 0) == "t" else { return 0 }
    let row = try connection.execute(
        "SELECT next_offset FROM findmy.projector_checkpoints WHERE projection = 'main'")
    return row.rowCount == 0 ? 0 : try row.int64(0, 0) ?? 0
}

private func count(_ connection: PostgresConnection, _ sql: String) throws -> Int {
    Int(try connection.execute(sql).int64(0, 0) ?? -1)
}

private func seconds(_ interval: TimeInterval) -> String { String(format: "%.2f s", interval) }
