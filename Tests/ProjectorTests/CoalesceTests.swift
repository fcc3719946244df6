import Events
import Foundation
import Postgres
import Projector
import Testing
import Threads

/// Caught up, the projector lets records gather for its next transaction
/// (`Projector.Options.coalesceWindowMicros`). The window is an hour here, far past every deadline
/// below: a record folded only when it ran out would fail each test, and one folded before it
/// ended shows in the transactions counted.
@Suite(ProjectorClusterTrait()) struct CoalesceTests {
    static let hour: Int64 = 3_600_000_000

    private func append(_ writer: LogWriter, device: UInt64) throws -> UInt64 {
        let fix = Fix(
            latitude: 48.8566, longitude: 2.3522, accuracyMeters: 5, source: "manual",
            recordedAtMicros: wallClockMicros())
        return try writer.append(.fixBatch(FixBatch(deviceID: device, batchID: .random(), fixes: [fix])))
    }

    private func start(_ writer: LogWriter, _ path: String) throws -> (Projector, ProjectorService) {
        var options = Projector.Options()
        options.coalesceWindowMicros = Self.hour
        options.idleWaitMicros = Self.hour
        options.log = { _ in }
        let projector = Projector(
            client: PostgresClient(conninfo: try TestCluster.freshDatabase()),
            reader: LogReader(directory: path, writer: writer), options: options)
        let service = ProjectorService(projector: projector)
        try service.start()
        return (projector, service)
    }

    @Test func recordsTricklingInWhileCaughtUpFoldInOneTransaction() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 4, fixesPerBatch: 3)
        defer { writer.close() }
        let (projector, service) = try start(writer, log.path)
        defer { service.stop(graceMicros: 0) }
        try waitUntil("the first transaction, then its window") {
            projector.status.transactions == 1 && projector.status.gathering
        }

        let foldedBefore = projector.status.recordsFolded
        var last: UInt64 = 0
        for device in 1...8 { last = try append(writer, device: UInt64(device % 2 + 1)) }
        // In the window: nothing folded, whatever time the appends took.
        #expect(projector.status.transactions == 1)
        #expect(projector.status.checkpoint <= last)

        projector.foldNow()
        try waitUntil("the gathered records folded") { projector.status.checkpoint == writer.durableEnd }
        #expect(projector.status.transactions == 2)
        #expect(projector.status.recordsFolded == foldedBefore + 8)
    }

    @Test func aLoneRecordAfterTheWindowFoldsAtOnce() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 4, fixesPerBatch: 3)
        defer { writer.close() }
        let (projector, service) = try start(writer, log.path)
        defer { service.stop(graceMicros: 0) }
        try waitUntil("the first window") { projector.status.gathering }
        // Stands for the window running out: the projector then waits for new records, idle.
        projector.foldNow()
        try waitUntil("idle") { !projector.status.gathering && projector.status.transactions == 1 }

        let offset = try append(writer, device: 1)
        try waitUntil("the lone record folded") { projector.status.checkpoint > offset }
        #expect(projector.status.transactions == 2)
    }

    /// A read with `after_offset` adds a bell to `checkpointBells` and waits: that ends the window.
    @Test func aReaderWaitingOnTheCheckpointEndsTheWindow() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 4, fixesPerBatch: 3)
        defer { writer.close() }
        let (projector, service) = try start(writer, log.path)
        defer { service.stop(graceMicros: 0) }
        try waitUntil("the first window") { projector.status.gathering }
        let offset = try append(writer, device: 2)
        #expect(projector.status.checkpoint <= offset)

        let bell = Doorbell()
        projector.checkpointBells.add(bell)
        defer { projector.checkpointBells.remove(bell) }
        try waitUntil("the reader's record folded") { projector.status.checkpoint > offset }
        #expect(projector.status.transactions == 2)
    }
}
