import Events
import Foundation
import NATSLog
import NATSSupport
import Postgres
import Testing
import Threads

// `findmy log export` and `findmy log import` (docs/scale.md, "Migrating a single-machine log"),
// every step a real process: a local log written by LogWriter (group records holding several
// requests, single- and multi-fix batches, a command answered by a batch), exported, imported into
// a real three-node cluster, verified, grown, exported and imported again (only the new records
// are stored), imported a third time (nothing), and projected by `findmy projector`; the
// projection must equal the one `findmy project` builds from the original log. Every process,
// node and cluster is stopped when the test ends, passed or not.

@Suite(.serialized) struct LogMigrationTests {
    struct LocalLog {
        var records = 0
        var batches = 0
        var fixesPerDevice: [UInt64: Int] = [:]
    }

    static func writer(_ directory: String) throws -> LogWriter {
        var options = LogOptions()
        // Long enough that each `append(batch:)` lands in one group commit, its requests in one record.
        options.groupCommitDelayMicros = 50_000
        options.diagnostics = { _ in }
        return try LogWriter(directory: directory, options: options)
    }

    /// Users 1 and 2, devices 1...6 (user 1's), 60 batches (odd devices one fix, even ones five),
    /// appended in groups so that they share group records, and a batch of device 2 that will
    /// answer a locate; returns that batch's offset.
    static func writeFirstPart(_ directory: String, now: Int64, _ local: inout LocalLog) throws -> UInt64 {
        let writer = try writer(directory)
        defer { writer.close() }
        var registryEvents = registry(devices: 6, atMicros: now - 3_600_000_000)
        registryEvents.append(
            EventCodec.encode(
                .userCreated(
                    UserCreated(
                        userID: 2, name: "bob", role: .member, tokenHash: Array(repeating: 9, count: 32))),
                receivedAtMicros: now - 3_600_000_000))
        local.records += try writer.append(batch: registryEvents).count
        for round in 0..<10 {
            var group: [EncodedEvent] = []
            for device in UInt64(1)...6 {
                let fixes = device % 2 == 1 ? 1 : 5
                let recorded = (0..<fixes).map { now - Int64(round * 100 + fixes - $0) * 1_000_000 }
                group.append(
                    fixBatch(
                        device: device, recordedAtMicros: recorded, receivedAtMicros: now - 1_000_000,
                        salt: round))
                local.fixesPerDevice[device, default: 0] += fixes
            }
            local.records += try writer.append(batch: group).count
            local.batches += group.count
        }
        let answering = fixBatch(
            device: 2, recordedAtMicros: [now - 400_000, now - 300_000], receivedAtMicros: now - 200_000,
            salt: 99)
        local.fixesPerDevice[2, default: 0] += 2
        local.records += 1
        local.batches += 1
        return try writer.append(answering)
    }

    /// A locate of device 2 and its answer, which names the batch at `batchOffset`.
    static func writeSecondPart(_ directory: String, now: Int64, batchOffset: UInt64, _ local: inout LocalLog)
        throws
    {
        let writer = try writer(directory)
        defer { writer.close() }
        let command = UUID128.random()
        let events = [
            EventCodec.encode(
                .commandRequested(
                    CommandRequested(
                        commandID: command, deviceID: 2, kind: .locate, requestedByUserID: 1,
                        requestedAtMicros: now - 500_000)),
                receivedAtMicros: now - 500_000),
            EventCodec.encode(
                .commandAnswered(
                    CommandAnswered(
                        commandID: command, deviceID: 2, batchOffset: batchOffset, fixIndex: 1,
                        clientProtocol: .native)),
                receivedAtMicros: now - 100_000),
        ]
        local.records += try writer.append(batch: events).count
    }

    /// An import keeps several publishes in flight per partition (`--publishers-per-partition`),
    /// fix batches spread over them by device; every other record must still take its source place
    /// among its partition's records, or a device's enrolment could be stored before its user's
    /// creation in the same partition, which the fold takes in stream order for good (the
    /// projector then retried that transaction forever). One partition, eight lanes, forty devices
    /// enrolled among other devices' batches: `--verify` finds every record at its place.
    @Test func recordsOtherThanBatchesKeepTheirPlaceInTheirPartition() throws {
        let scratch = NSTemporaryDirectory() + "findmy-lanes-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: scratch + "/data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let now = wallClockMicros()
        let writer = try Self.writer(scratch + "/data/log")
        var records = 0
        let user = registry(devices: 1, atMicros: now - 3_600_000_000)
        records += try writer.append(batch: user).count
        for device in UInt64(2)...40 {
            var group = [
                EventCodec.encode(
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: device, userID: 1, deviceUUID: UUID128.random(),
                            name: "device \(device)",
                            platform: "ios", model: "test")),
                    receivedAtMicros: now - 3_000_000_000)
            ]
            for earlier in 1..<device {
                group.append(
                    fixBatch(
                        device: earlier, recordedAtMicros: [now - Int64(device * 1_000 + earlier) * 1_000],
                        receivedAtMicros: now - 1_000_000, salt: Int(device)))
            }
            records += try writer.append(batch: group).count
        }
        writer.close()
        let exportPath = scratch + "/findmy.export"
        let exported = try ProjectorProcess.run(
            ["log", "export"], ["--data-dir", scratch + "/data", "--out", exportPath],
            outputPath: scratch + "/export.out")
        #expect(exported.status == 0, "\(exported.output)")
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let imported = try ProjectorProcess.run(
            ["log", "import"],
            [
                "--log", cluster.logArgument, "--log-partitions", "1", "--publishers-per-partition", "8",
                "--verify",
                exportPath,
            ], outputPath: scratch + "/import.out")
        #expect(imported.status == 0, "\(imported.output)")
        #expect(imported.output.contains("\(records) records stored"), "\(imported.output)")
        #expect(imported.output.contains(" 0 out of partition order"), "\(imported.output)")
        #expect(imported.output.contains("verify: ok"), "\(imported.output)")
    }

    @Test func aLocalLogMovesIntoTheClusterOnceAndProjectsTheSame() throws {
        let scratch = NSTemporaryDirectory() + "findmy-migrate-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: scratch + "/data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let now = wallClockMicros()
        var local = LocalLog()
        let answeringBatch = try Self.writeFirstPart(scratch + "/data/log", now: now, &local)
        let firstPart = local.records
        let exportPath = scratch + "/findmy.export"
        var runs = 0
        func findmy(_ command: [String], _ arguments: [String]) throws -> (status: Int32?, output: String) {
            runs += 1
            return try ProjectorProcess.run(command, arguments, outputPath: scratch + "/run-\(runs).out")
        }

        let exported = try findmy(["log", "export"], ["--data-dir", scratch + "/data", "--out", exportPath])
        #expect(exported.status == 0, "\(exported.output)")
        #expect(exported.output.contains("exported \(local.records) records"), "\(exported.output)")

        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let importArguments = ["--log", cluster.logArgument, "--log-partitions", "4", "--verify"]

        // A damaged file (cut short, or one byte changed) is refused and stores nothing: the
        // stream is not even created.
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: exportPath)))
        var changed = bytes
        changed[bytes.count / 2] ^= 0x10
        for (name, damaged) in [("cut", Array(bytes.prefix(bytes.count - 30))), ("changed", changed)] {
            let path = scratch + "/\(name).export"
            try Data(damaged).write(to: URL(fileURLWithPath: path))
            let refused = try findmy(["log", "import"], importArguments + [path])
            #expect(refused.status == 1, "\(name): \(refused.output)")
            #expect(refused.output.contains("is damaged at byte"), "\(name): \(refused.output)")
            #expect(refused.output.contains("nothing was imported"), "\(name): \(refused.output)")
        }
        var configuration = cluster.patientLogConfiguration(partitions: 4)
        configuration.createsStream = false
        #expect(throws: JetStreamLogError.streamMissing(stream: "FINDMY_LOG")) {
            try JetStreamLog(configuration)
        }

        let imported = try findmy(["log", "import"], importArguments + [exportPath])
        #expect(imported.status == 0, "\(imported.output)")
        #expect(imported.output.contains("\(firstPart) records stored"), "\(imported.output)")
        #expect(imported.output.contains("verify: ok"), "\(imported.output)")
        let log = try JetStreamLog(cluster.patientLogConfiguration(partitions: 4))
        defer { log.close() }
        #expect(try log.durableEndOffset() == UInt64(firstPart))

        // The log grows; exported again, its import stores only the new records, as a run resumed
        // after a crash halfway does: the stream holds part of this log's records. The answer names
        // a batch the first run stored, whose new offset comes from the stream.
        try Self.writeSecondPart(scratch + "/data/log", now: now, batchOffset: answeringBatch, &local)
        let reexported = try findmy(
            ["log", "export"], ["--data-dir", scratch + "/data", "--out", exportPath])
        #expect(reexported.status == 0, "\(reexported.output)")
        let resumed = try findmy(["log", "import"], importArguments + [exportPath])
        #expect(resumed.status == 0, "\(resumed.output)")
        #expect(
            resumed.output.contains(
                "\(local.records - firstPart) records stored, \(firstPart) were there already"),
            "\(resumed.output)")
        #expect(resumed.output.contains("1 command answers pointed at"), "\(resumed.output)")
        #expect(resumed.output.contains("verify: ok"), "\(resumed.output)")
        #expect(try log.durableEndOffset() == UInt64(local.records))
        let map = try String(contentsOfFile: exportPath + ".offsets", encoding: .utf8)
            .split(separator: "\n").filter { !$0.hasPrefix("#") }
        #expect(map.count == local.records)

        // Again: nothing new is stored, and the stream still verifies.
        let again = try findmy(["log", "import"], importArguments + [exportPath])
        #expect(again.status == 0, "\(again.output)")
        #expect(
            again.output.contains("0 records stored, \(local.records) were there already"), "\(again.output)")
        #expect(again.output.contains("verify: ok"), "\(again.output)")
        #expect(try log.durableEndOffset() == UInt64(local.records))

        // The projection from the stream equals the one from the original log.
        let postgres = try ScratchPostgres()
        let admin = try PostgresConnection(postgres.conninfo)
        defer { admin.close() }
        for database in ["from_local", "from_stream"] { _ = try admin.execute("CREATE DATABASE \(database)") }
        let fromLocal = try PostgresConnection(postgres.cluster.conninfo(database: "from_local"))
        defer { fromLocal.close() }
        let fromStream = try PostgresConnection(postgres.cluster.conninfo(database: "from_stream"))
        defer { fromStream.close() }
        let project = try ProjectorProcess(
            [
                "--data-dir", scratch + "/data", "--database-url",
                postgres.cluster.conninfo(database: "from_local"),
            ],
            outputPath: scratch + "/project.out", command: ["project"])
        let projector = try ProjectorProcess(
            [
                "--log", cluster.logArgument, "--database-url",
                postgres.cluster.conninfo(database: "from_stream"),
                "--compact-interval-seconds", "0",
            ], outputPath: scratch + "/projector.out")
        for (name, connection) in [("findmy project", fromLocal), ("findmy projector", fromStream)] {
            do {
                try waitUntil(
                    "\(name) folded every batch and the answer", timeoutSeconds: 120, intervalMillis: 50
                ) {
                    try folded(connection) == local.batches
                        && count(connection, "SELECT count(*) FROM findmy.commands WHERE state = 'answered'")
                            == 1
                }
            } catch {
                Issue.record("project:\n\(project.output)\nprojector:\n\(projector.output)")
                throw error
            }
        }
        #expect(project.stop())
        #expect(projector.stop())

        let fixes = """
            SELECT device_id, recorded_at, received_at, latitude, longitude, accuracy_m, battery_pct
            FROM findmy.device_locations ORDER BY device_id, recorded_at, latitude
            """
        let localFixes = try rows(fromLocal, fixes)
        #expect(localFixes.count == local.fixesPerDevice.values.reduce(0, +))
        #expect(try rows(fromStream, fixes) == localFixes)
        let perDevice = "SELECT device_id, count(*) FROM findmy.device_locations GROUP BY 1 ORDER BY 1"
        #expect(
            try rows(fromStream, perDevice)
                == local.fixesPerDevice.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" })
        #expect(try rows(fromStream, perDevice) == rows(fromLocal, perDevice))
        let devices = "SELECT id, user_id, device_uuid, name FROM findmy.devices ORDER BY id"
        #expect(try rows(fromStream, devices) == rows(fromLocal, devices))
        // The answer names its batch by offset: the import mapped it, so it still finds its fix.
        let answer = """
            SELECT c.state, l.recorded_at, l.latitude FROM findmy.commands c
            LEFT JOIN findmy.device_locations l ON l.device_id = c.device_id
                AND l.log_offset = c.answer_log_offset AND l.fix_index = c.answer_fix_index
            """
        let localAnswer = try rows(fromLocal, answer)
        #expect(localAnswer.count == 1 && !localAnswer[0].hasSuffix(" "), "\(localAnswer)")
        #expect(try rows(fromStream, answer) == localAnswer)
    }

    /// Every row as its columns' text joined by spaces (NULL as empty).
    func rows(_ connection: PostgresConnection, _ sql: String) throws -> [String] {
        let result = try connection.execute(sql)
        let columns = result.columnNames.count
        return (0..<result.rowCount).map { row in
            (0..<columns).map { result.string(row, $0) ?? "" }.joined(separator: " ")
        }
    }
}
