import Compactor
import Events
import Foundation
import Postgres
import Projector
import Synchronization
import Testing

/// A projection is bound to the log it was folded from (docs/postgres.md, "Which log a projection
/// belongs to"): a projection of another log is never served, it is dropped and rebuilt.
@Suite(ProjectorClusterTrait()) struct LogBindingTests {
    /// A second installation's log: user 1 "bob" with device 1 "bob's tablet", no fix.
    func writeBobsLog(_ directory: String) throws -> LogWriter {
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory, options: options)
        try writer.append(
            .userCreated(
                UserCreated(userID: 1, name: "bob", role: .member, tokenHash: Array(repeating: 2, count: 32)))
        )
        try writer.append(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: UUID128.random(), name: "bob's tablet",
                    platform: "android", model: "tab")))
        return writer
    }

    func names(_ connection: PostgresConnection, _ sql: String) throws -> [String] {
        let result = try connection.execute(sql)
        return (0..<result.rowCount).compactMap { result.string($0, 0) }
    }

    @Test func aProjectionOfAnotherLogIsDroppedAndRebuiltFromOffsetZero() throws {
        let conninfo = try TestCluster.freshDatabase()
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        // Log A (user "ada", devices "device 1" and "device 2", 60 fixes) folded into the database.
        let logA = TemporaryLog()
        let writerA = try writeLog(logA.path, devices: 2, batches: 20, fixesPerBatch: 3)
        let projectorA = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: logA.path, writer: writerA))
        try projectorA.prepare()
        try catchUp(projectorA)
        writerA.close()
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 60)

        // A new log B at the same place, the same database: the stale projection must go.
        let logB = TemporaryLog()
        let writerB = try writeBobsLog(logB.path)
        defer { writerB.close() }
        let lines = Mutex<[String]>([])
        var options = Projector.Options()
        options.log = { line in lines.withLock { $0.append(line) } }
        let projectorB = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: logB.path, writer: writerB),
            options: options)
        try projectorB.prepare()
        // Before anything of B is folded, nothing of A is left to read.
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_latest") == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.devices") == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.users") == 0)
        #expect(try count(connection, "SELECT next_offset FROM findmy.projector_checkpoints") == 0)
        try catchUp(projectorB)
        #expect(try names(connection, "SELECT name FROM findmy.devices ORDER BY id") == ["bob's tablet"])
        #expect(try names(connection, "SELECT name FROM findmy.users ORDER BY id") == ["bob"])
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 0)
        #expect(
            try count(connection, "SELECT next_offset FROM findmy.projector_checkpoints")
                == Int64(writerB.durableEnd))
        let logIDA = try #require(try LogReader(directory: logA.path).logID())
        let said = lines.withLock { $0 }
        #expect(
            said.contains {
                $0.contains("was folded from log \(logIDA)") && $0.contains("this log is \(writerB.logID)")
                    && $0.contains("dropping it and rebuilding")
            }, "\(said)")

        // Opened again with log B, the projection is B's own: kept as it is.
        let again = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: logB.path, writer: writerB),
            options: options)
        let linesBefore = lines.withLock { $0.count }
        try again.prepare()
        #expect(again.status.checkpoint == writerB.durableEnd)
        #expect(lines.withLock { $0.count } == linesBefore)
        #expect(try names(connection, "SELECT name FROM findmy.devices ORDER BY id") == ["bob's tablet"])
    }

    @Test func aProjectionWithoutALogIDIsRebuiltOnce() throws {
        let conninfo = try TestCluster.freshDatabase()
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 5, fixesPerBatch: 2)
        defer { writer.close() }
        let reader = LogReader(directory: log.path, writer: writer)
        try Projector(client: PostgresClient(conninfo: conninfo), reader: reader).prepare()
        try catchUp(Projector(client: PostgresClient(conninfo: conninfo), reader: reader))
        // As a projection made before projections were bound to their log.
        try connection.executeScript("UPDATE findmy_meta.generations SET log_id = NULL")
        let lines = Mutex<[String]>([])
        var options = Projector.Options()
        options.log = { line in lines.withLock { $0.append(line) } }
        let projector = Projector(
            client: PostgresClient(conninfo: conninfo), reader: reader, options: options)
        try projector.prepare()
        #expect(projector.status.checkpoint == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 0)
        #expect(lines.withLock { $0 }.contains { $0.contains("has no log id") })
        try catchUp(projector)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 10)
        try projector.prepare()
        #expect(projector.status.checkpoint == writer.durableEnd, "rebuilt once, then kept")
    }

    @Test func theProjectorNeverWritesIntoAProjectionOfAnotherLog() throws {
        // Two logs sharing one database (a misconfiguration): B's projector took the projection
        // over while A's was running. A's next transaction must not land in B's tables.
        let conninfo = try TestCluster.freshDatabase()
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        let logA = TemporaryLog()
        let writerA = try writeLog(logA.path, devices: 1, batches: 5, fixesPerBatch: 2)
        defer { writerA.close() }
        let projectorA = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: logA.path, writer: writerA))
        try projectorA.prepare()
        let logB = TemporaryLog()
        let writerB = try writeBobsLog(logB.path)
        defer { writerB.close() }
        let projectorB = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: logB.path, writer: writerB))
        try projectorB.prepare()
        #expect(throws: ProjectorError.projectionOfAnotherLog(schema: Schema.live, logID: writerA.logID)) {
            try projectorA.step(logEnd: writerA.durableEnd)
        }
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 0)
        #expect(try count(connection, "SELECT next_offset FROM findmy.projector_checkpoints") == 0)
        #expect(projectorA.status.boundLogID == nil, "A's reads are refused until A prepares again")
    }

    @Test func aRebuildIsBoundToItsLog() throws {
        let conninfo = try TestCluster.freshDatabase()
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 5, fixesPerBatch: 2)
        defer { writer.close() }
        let reader = LogReader(directory: log.path, writer: writer)
        try Projector(client: PostgresClient(conninfo: conninfo), reader: reader).prepare()
        try connection.executeScript("UPDATE findmy_meta.generations SET log_id = NULL")
        _ = try Rebuild.run(client: PostgresClient(conninfo: conninfo), reader: reader) { _ in }
        let bound = try connection.execute(
            "SELECT log_id FROM findmy_meta.generations WHERE schema_name = 'findmy'")
        #expect(bound.string(0, 0) == writer.logID.description)
    }

    @Test func theCompactorLeavesAProjectionOfAnotherLogAlone() throws {
        let conninfo = try TestCluster.freshDatabase()
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 5, fixesPerBatch: 2)
        defer { writer.close() }
        let reader = LogReader(directory: log.path, writer: writer)
        let projector = Projector(client: PostgresClient(conninfo: conninfo), reader: reader)
        try projector.prepare()
        try catchUp(projector)
        // A year on, every fix is past its window.
        let policy = try RetentionPolicy.fold(reader, upTo: writer.durableEnd, settings: RetentionSettings())
        let later = wallClockMicros() + 365 * RetentionPolicy.microsPerDay
        let otherLog = UUID128.random()
        let foreign = try DatabaseCompaction(
            policy: policy, nowMicros: later, rowsPerStatementMax: 100, logID: otherLog
        ).run(connection, dryRun: false)
        #expect(foreign.skipped?.contains("not from this log \(otherLog)") == true, "\(foreign)")
        #expect(foreign.locationRowsDeleted == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 10)
        let own = try DatabaseCompaction(
            policy: policy, nowMicros: later, rowsPerStatementMax: 100, logID: writer.logID
        ).run(connection, dryRun: false)
        #expect(own.skipped == nil && own.locationRowsDeleted == 10)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_locations") == 0)
    }

    @Test func aProjectionAheadOfItsOwnLogIsNotServed() throws {
        // The same log restored from an older backup: same id, but the projection holds more.
        let conninfo = try TestCluster.freshDatabase()
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 1, batches: 5, fixesPerBatch: 2)
        defer { writer.close() }
        let backup = TemporaryLog()
        try FileManager.default.createDirectory(atPath: backup.path, withIntermediateDirectories: true)
        let copied = try LogBackup().copy(from: log.path, to: backup.path)
        try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
        let projector = Projector(
            client: PostgresClient(conninfo: conninfo), reader: LogReader(directory: log.path, writer: writer)
        )
        try projector.prepare()
        try catchUp(projector)
        #expect(projector.status.boundLogID == writer.logID)

        let restored = Projector(
            client: PostgresClient(conninfo: conninfo), reader: LogReader(directory: backup.path))
        #expect(try LogReader(directory: backup.path).logID() == writer.logID)
        #expect(
            throws: ProjectorError.logBehindCheckpoint(
                logEnd: copied.durableEnd, checkpoint: writer.durableEnd)
        ) {
            try restored.prepare()
        }
        #expect(restored.status.boundLogID == nil, "the read side reads nothing")
    }
}
