import Compactor
import Events
import Foundation
import Geofences
import Postgres
import Projector
import Testing

/// The device's own view (docs/geofences.md, "A device's transitions"): the OwnTracks `transition`
/// messages in the log (event 25) folded by the geofence projection into `device_transitions`, as
/// the device reported them, and reached by erasure, removal and retention like its fixes.
@Suite(ProjectorClusterTrait()) struct DeviceTransitionProjectionTests {
    typealias G = GeofenceProjectionTests
    static let minute = G.minute
    static let t0 = G.t0

    static func transition(
        _ kind: RegionTransition.Kind, at m: Int64, device: UInt64 = 1, rid: String = "findmy-1",
        name: String = "home", accuracy: Double? = 20
    ) -> Event {
        .regionTransition(
            RegionTransition(
                deviceID: device, clientProtocol: .owntracksHTTP, kind: kind,
                recordedAtMicros: t0 + m * minute,
                regionID: rid, regionName: name, trigger: "c", latitude: G.home.latitude,
                longitude: G.home.longitude, accuracyMeters: accuracy))
    }

    /// "device fence-or-dash region event minute received-minute accuracy-or-dash", by device and time.
    static func rows(_ setup: G.Setup) throws -> [String] {
        try catchUpWithHistory(setup.projector)
        return try setup.client.withConnection { connection in
            let result = try connection.execute(
                """
                SELECT device_id || ' ' || coalesce(geofence_id::text, '-') || ' ' || region_name || ' '
                    || event || ' '
                    || ((extract(epoch FROM recorded_at) * 1000000)::bigint - $1) / 60000000 || ' '
                    || ((extract(epoch FROM received_at) * 1000000)::bigint - $1) / 60000000 || ' '
                    || coalesce(fix_accuracy_m::text, '-')
                FROM findmy_geofences.device_transitions ORDER BY device_id, recorded_at
                """, [.int64(t0)])
            return (0..<result.rowCount).compactMap { result.string($0, 0) }
        }
    }

    @Test func theDevicesOwnTransitionsAreStoredAsReportedAndNeverDecide() throws {
        let setup = try G.Setup()
        try setup.append(.geofenceDefined(G.fence))
        try setup.batch([G.fix(0, at: 0)])
        // The phone says it left at 00:10, while its fixes say it stayed: stored, and decides nothing.
        try setup.append(Self.transition(.leave, at: 10), receivedMinute: 12)
        try setup.append(
            Self.transition(.enter, at: 30, rid: "", name: "gym", accuracy: nil), receivedMinute: 31)
        try setup.append(Self.transition(.enter, at: 5, device: 2, rid: "findmy-x", name: "x"))
        #expect(
            try Self.rows(setup) == [
                "1 1 home leave 10 12 20", "1 - gym enter 30 31 -", "2 - x enter 5 0 20",
            ])
        #expect(try setup.transitions().isEmpty)
    }

    @Test func erasureRemovalAndRetentionReachThem() throws {
        let setup = try G.Setup()
        let day: Int64 = 24 * 60
        for m: Int64 in [0, 60, 120] { try setup.append(Self.transition(.enter, at: m)) }
        try setup.append(Self.transition(.leave, at: 35 * day), receivedMinute: 35 * day)
        try setup.append(Self.transition(.enter, at: 10, device: 2))
        #expect(try Self.rows(setup).count == 5)
        try setup.append(
            .historyErased(
                HistoryErased(
                    deviceID: 1, fromMicros: Self.t0 + 30 * Self.minute, toMicros: Self.t0 + 90 * Self.minute)
            ))
        #expect(
            try Self.rows(setup) == [
                "1 1 home enter 0 0 20", "1 1 home enter 120 0 20",
                "1 1 home leave \(35 * day) \(35 * day) 20",
                "2 1 home enter 10 0 20",
            ])
        try setup.append(.deviceRemoved(DeviceRemoved(deviceID: 2)))
        #expect(try Self.rows(setup).count == 3)
        // The compactor's database half: past the window by the earlier clock.
        let main = Projector(client: setup.client, reader: setup.projector.reader)
        try main.prepare()
        try catchUp(main)
        let report = try setup.compact(nowMicros: Self.t0 + 40 * day * Self.minute)
        #expect(report.geofenceRowsDeleted == 2)
        #expect(try Self.rows(setup) == ["1 1 home leave \(35 * day) \(35 * day) 20"])
    }

    @Test func aRegionIDFindmyHandedOutNamesItsFence() {
        typealias Row = GeofenceBatch.DeviceTransitionRow
        #expect(Row.geofenceID(regionID: "findmy-42") == 42)
        for other in [
            "", "findmy-", "findmy-0", "findmy-x", "findmy--1", "home", "findmy-99999999999999999999",
        ] {
            #expect(Row.geofenceID(regionID: other) == nil, "\(other)")
        }
    }

    /// As the registry: a removed device leaves the fences' device lists, in the table and in a
    /// cache loaded again from it.
    @Test func aRemovedDeviceLeavesTheProjectionsFences() throws {
        let setup = try G.Setup()
        var both = G.fence
        both.deviceIDs = [1, 2]
        try setup.append(.geofenceDefined(both))
        try setup.append(.deviceRemoved(DeviceRemoved(deviceID: 1)))
        try catchUpWithHistory(setup.projector)
        let listed = try setup.client.withConnection {
            try $0.execute("SELECT device_ids::text FROM findmy_geofences.geofences").string(0, 0)
        }
        #expect(listed == "{2}")
        // A later fence redefinition, folded by a projector that loads its cache from the tables.
        let again = Projector(
            client: setup.client, reader: setup.projector.reader, projection: GeofenceProjection())
        try again.prepare()
        try setup.batch([G.fix(0, at: 0), G.fix(1_000, at: 60)], device: 2)
        try catchUpWithHistory(again)
        let events = try setup.client.withConnection {
            try $0.execute("SELECT device_id || ' ' || event FROM findmy_geofences.geofence_transitions")
                .string(0, 0)
        }
        #expect(events == "2 leave")
    }
}
