import Events
import Foundation
import Postgres
import Projector
@_exported import TestSupport
import Testing
import Threads

/// The tailing projector sleeps while idle and is woken by what it waits for: new durable records,
/// and its stop. Its idle wait is set to an hour here, far past every deadline below, so a
/// projector that only looked again when that timer ran out would fail each test.
@Suite(ProjectorClusterTrait()) struct IdleWakeTests {
    static let idleWaitMicros: Int64 = 3_600_000_000

    private func idleProjector(_ reader: LogReader, _ conninfo: String) -> Projector {
        var options = Projector.Options()
        options.idleWaitMicros = Self.idleWaitMicros
        options.log = { _ in }
        return Projector(client: PostgresClient(conninfo: conninfo), reader: reader, options: options)
    }

    /// Caught up with the log, and waiting (or about to wait) for more.
    private func isIdle(_ projector: Projector, _ end: UInt64) -> Bool {
        let status = projector.status
        return status.checkpoint == end && status.logEnd == end && status.boundLogID != nil
    }

    @Test func aFixAppendedAfterTheProjectorWentIdleIsProjected() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 4, fixesPerBatch: 3)
        defer { writer.close() }
        let projector = idleProjector(
            LogReader(directory: log.path, writer: writer), try TestCluster.freshDatabase())
        let service = ProjectorService(projector: projector)
        try service.start()
        defer { service.stop(graceMicros: 0) }
        #expect(waitUntil { isIdle(projector, writer.durableEnd) })

        let fix = Fix(
            latitude: 48.8566, longitude: 2.3522, accuracyMeters: 5, source: "manual",
            recordedAtMicros: wallClockMicros())
        let offset = try writer.append(.fixBatch(FixBatch(deviceID: 1, batchID: .random(), fixes: [fix])))
        #expect(waitUntil { projector.status.checkpoint > offset })
        let connection = try PostgresConnection(projector.client.conninfo)
        defer { connection.close() }
        let latest = try connection.execute(
            "SELECT log_offset, latitude FROM findmy.device_latest WHERE device_id = 1")
        #expect(try latest.int64(0, 0) == Int64(offset))
        #expect(try latest.double(0, 1) == 48.8566)
    }

    @Test(arguments: [true, false])
    func stopWakesAnIdleProjector(writerInProcess: Bool) throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 4, fixesPerBatch: 3)
        defer { writer.close() }
        // Without the writer, the reader polls log/durable as `findmy project` does beside a server.
        let reader = LogReader(directory: log.path, writer: writerInProcess ? writer : nil)
        let projector = idleProjector(reader, try TestCluster.freshDatabase())
        let service = ProjectorService(projector: projector)
        try service.start()
        #expect(waitUntil { isIdle(projector, writer.durableEnd) })

        let stopped = Locked(false)
        let stopper = spawnThread {
            service.stop(graceMicros: 0)
            stopped.withLock { $0 = true }
        }
        let stoppedInTime = waitUntil { stopped.withLock { $0 } }
        #expect(stoppedInTime, "the projector's stop waited for its idle timer")
        if stoppedInTime { pthread_join(stopper, nil) } else { pthread_detach(stopper) }
        #expect(service.state == .stopped)
    }
}
