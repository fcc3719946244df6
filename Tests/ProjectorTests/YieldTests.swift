import Events
import Foundation
import Geofences
import Postgres
import Projector
import Testing

/// The geofence projector yields to the main one, which reads wait for: while the main projector
/// drains a backlog, the geofence projector folds nothing; once it has caught up, the geofence
/// projector folds everything.
@Suite(ProjectorClusterTrait()) struct YieldTests {
    @Test func theGeofenceProjectorWaitsWhileTheMainOneDrainsThenCatchesUp() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 20, fixesPerBatch: 5)
        defer { writer.close() }
        let end = writer.durableEnd
        let conninfo = try TestCluster.freshDatabase()
        var mainOptions = Projector.Options()
        mainOptions.recordsPerTransactionMax = 4
        mainOptions.log = { _ in }
        let main = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: log.path, writer: writer),
            options: mainOptions)
        try main.prepare()
        try main.step(logEnd: end)
        #expect(main.status.draining)

        var fenceOptions = Projector.Options()
        fenceOptions.yieldsTo = main
        // Far past every deadline here: a projector that folded when this ran out would fail.
        fenceOptions.yieldMicrosMax = 3_600_000_000
        fenceOptions.log = { _ in }
        let fences = Projector(
            client: PostgresClient(conninfo: conninfo),
            reader: LogReader(directory: log.path, writer: writer),
            projection: GeofenceProjection(), options: fenceOptions)
        let service = ProjectorService(projector: fences, name: "geofences")
        try service.start()
        defer { service.stop(graceMicros: 0) }
        #expect(waitUntil { fences.status.yielding })
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        func geofenceCheckpoint() throws -> Int64? {
            try connection.execute(
                "SELECT next_offset FROM findmy_geofences.projector_checkpoints WHERE projection = 'geofences'"
            ).int64(0, 0)
        }
        #expect(try geofenceCheckpoint() == 0)

        while try main.step(logEnd: end) > 0 {}
        #expect(!main.status.draining)
        #expect(waitUntil { fences.status.checkpoint == end })
        #expect(try geofenceCheckpoint() == Int64(end))
    }
}
