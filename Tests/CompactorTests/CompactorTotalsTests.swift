import Compactor
import Events
import Foundation
import Testing

/// The compactor's totals since start (what `/metrics` shows as `findmy_compactor_*`) count the
/// presence changes a run removed from the log, as they count fixes and command events.
@Suite struct CompactorTotalsTests {
    typealias Presence = PresenceRetentionTests

    @Test func theTotalsCountPresenceChangesRemoved() throws {
        let directory = PlaceRetentionTests.LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let now = Presence.now
        _ = try writer.append(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 7, userID: 1, deviceUUID: UUID128(high: 2, low: 7), name: "laptop",
                    platform: "linux", model: "")), receivedAtMicros: now - 100 * Presence.day)
        for age: Int64 in [45, 40, 31, 29] {
            _ = try writer.append(
                Presence.offline(7, daysAgo: age, node: "\(age)"), receivedAtMicros: now - age * Presence.day)
        }
        let compactor = Compactor(writer: writer, client: nil, options: Compactor.Options())
        let dry = try compactor.run(asOfMicros: now, dryRun: true)
        #expect(dry.log.presenceEventsRemoved == 3)
        #expect(compactor.totals.presenceEventsRemoved == 0, "a dry run removes nothing")
        let report = try compactor.run(asOfMicros: now)
        #expect(report.log.presenceEventsRemoved == 3)
        #expect(compactor.totals.presenceEventsRemoved == 3)
        #expect(compactor.totals.geofenceRowsDeleted == 0)
        #expect(try Presence.presenceInLog(writer).changes == ["29"])
        // Nothing more to remove: the totals stay.
        _ = try compactor.run(asOfMicros: now)
        #expect(compactor.totals.presenceEventsRemoved == 3)
    }
}
