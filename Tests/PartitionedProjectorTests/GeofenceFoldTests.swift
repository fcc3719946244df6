import Events
import Foundation
import Geofences
import JetStreamRetention
import NATSLog
import NATSSupport
import Postgres
import Projector
import Testing
import Threads

private let day: Int64 = 86_400_000_000
private let now: Int64 = 1_790_000_000_000_000

/// The geofence projection folded from a JetStream log by one `SharedLogProjector` (docs/scale.md,
/// "Geofences in a cluster"), and retention by deletion reaching its rows as the local compactor
/// does (docs/retention.md, "Geofences"). A real three-node cluster and a private PostgreSQL, on an
/// injected clock.
@Suite(.serialized) struct GeofenceFoldTests {
    /// Fences of device d: centred on `home(d)`, 100 m; a fix at `home(d)` is inside, 1.1 km north outside.
    func home(_ device: UInt64) -> Double { 52.0 + Double(device) * 0.1 }

    func batch(_ device: UInt64, _ fixes: [(latitude: Double, daysAgo: Int64)], receivedDaysAgo: Int64)
        -> EncodedEvent
    {
        EventCodec.encode(
            .fixBatch(
                FixBatch(
                    deviceID: device, batchID: UUID128.random(),
                    fixes: fixes.enumerated().map { index, fix in
                        Fix(
                            latitude: fix.latitude, longitude: 13.4, accuracyMeters: 10, batteryPercent: 80,
                            source: "significant", recordedAtMicros: now - fix.daysAgo * day + Int64(index))
                    })), receivedAtMicros: now - receivedDaysAgo * day)
    }

    @Test func oneFolderOfEveryPartitionThenRetentionTakesTheExpiredRows() throws {
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let postgres = try ScratchPostgres()
        let log = try JetStreamLog(cluster.patientLogConfiguration(partitions: 4))
        defer { log.close() }
        let devices: [UInt64] = [1, 2, 3, 4, 5]
        _ = try log.append(batch: registry(devices: devices.count, atMicros: now - 100 * day))
        // Each fence is a record of its own partition, not necessarily its device's: the fold
        // needs it before the device's fixes whatever the partitions.
        _ = try log.append(
            batch: devices.map { device in
                EventCodec.encode(
                    .geofenceDefined(
                        GeofenceDefined(
                            geofenceID: device, ownerUserID: 1, name: "home \(device)",
                            latitude: home(device),
                            longitude: 13.4, radiusMeters: 100, deviceIDs: [device])),
                    receivedAtMicros: now - 100 * day)
            })
        for device in devices {
            // 40 days ago: inside (sets the state), outside (a leave); 1 day ago inside (an enter).
            _ = try log.append(batch: [
                batch(device, [(home(device), 40), (home(device) + 0.01, 40)], receivedDaysAgo: 40),
                batch(device, [(home(device), 1)], receivedDaysAgo: 1),
            ])
        }
        let logID = try log.logID()
        let end = try log.durableEndOffset()
        // Retention's database half runs on a database holding the main projection.
        try project(log, postgres, logID: logID, schema: "findmy", now: now)

        var options = SharedLogProjector<GeofenceProjection>.Options()
        options.log = { _ in }
        let folder = SharedLogProjector(
            conninfo: postgres.conninfo, reader: log, logID: logID, options: options, clock: { now },
            makeProjection: { GeofenceProjection() })
        let stop = StopSignal()
        let thread = spawnThread { folder.run(until: stop) }
        defer {
            stop.request()
            pthread_join(thread, nil)
        }
        try waitUntil(
            "the geofence projection reaches \(end): \(folder.status)", timeoutSeconds: 120,
            intervalMillis: 50
        ) {
            (folder.status.checkpoint ?? 0) >= end
        }
        let database = try PostgresConnection(postgres.conninfo)
        defer { database.close() }
        let transitions = "SELECT count(*) FROM findmy_geofences.geofence_transitions"
        #expect(try count(database, transitions) == 2 * devices.count)
        #expect(try count(database, transitions + " WHERE event = 'leave'") == devices.count)

        let report = try JetStreamRetention(
            log: log, settings: RetentionSettings(retentionDays: 30, arrivalsRetentionDays: 90)
        ).run(nowMicros: now, database: database)
        // The leave that the fixes of 40 days ago decided, per device (the fixes are the history's);
        // the enter stays.
        #expect(report.database?.geofenceRowsDeleted == devices.count, "\(report)")
        #expect(try count(database, transitions) == devices.count)
        #expect(try count(database, transitions + " WHERE event = 'enter'") == devices.count)
        #expect(try count(database, "SELECT count(*) FROM findmy.device_locations") == devices.count)
    }
}
