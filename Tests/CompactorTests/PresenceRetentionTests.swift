import Compactor
import Events
import Foundation
import Testing

/// Presence changes (type 35) are device history: the window, an erasure and a removal reach them
/// as they reach a fix recorded at the change's time; the link (type 34) is configuration and
/// stays. Asserted on a real compaction of a real log (docs/retention.md, "Presence").
@Suite struct PresenceRetentionTests {
    static let day = RetentionPolicy.microsPerDay
    static let now = PlaceRetentionTests.now

    static func offline(_ device: UInt64, daysAgo: Int64, node: String) -> Event {
        .presenceChanged(
            PresenceChanged(
                deviceID: device, nodeID: node, online: false, lastSeenMicros: now - daysAgo * day,
                observedAtMicros: now - daysAgo * day + 60_000_000))
    }

    /// The node ids of the presence changes the log still holds, and how many links.
    static func presenceInLog(_ writer: LogWriter) throws -> (changes: [String], links: Int) {
        var changes: [String] = []
        var links = 0
        try LogReader(directory: writer.directory, writer: writer).read(from: 0) { record in
            switch try record.event() {
            case .presenceChanged(let changed): changes.append(changed.nodeID)
            case .devicePresenceLinked: links += 1
            default: break
            }
            return true
        }
        return (changes.sorted(), links)
    }

    @Test func expiredErasedAndRemovedPresenceLeavesTheLog() throws {
        let directory = PlaceRetentionTests.LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let enrolledAt = Self.now - 500 * Self.day
        var events: [(Event, Int64)] = []
        for device: UInt64 in 1...3 {
            events.append(
                (
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: device, userID: 1, deviceUUID: UUID128(high: 2, low: device), name: "d",
                            platform: "linux", model: "")), enrolledAt
                ))
            events.append(
                (
                    .devicePresenceLinked(
                        DevicePresenceLinked(deviceID: device, userID: 1, nodeID: "\(device)", nodeName: "n")),
                    enrolledAt
                ))
        }
        // Node ids name what each change is: "<device>-<age in days>".
        for device: UInt64 in 1...3 {
            for age: Int64 in [40, 5, 1] {
                events.append(
                    (Self.offline(device, daysAgo: age, node: "\(device)-\(age)"), Self.now - age * Self.day))
            }
        }
        // Device 2: its owner erases 10 to 3 days ago; device 3 is removed.
        events.append(
            (
                .historyErased(
                    HistoryErased(
                        deviceID: 2, fromMicros: Self.now - 10 * Self.day, toMicros: Self.now - 3 * Self.day)),
                Self.now
            ))
        events.append((.deviceRemoved(DeviceRemoved(deviceID: 3)), Self.now))
        for (event, received) in events { _ = try writer.append(event, receivedAtMicros: received) }

        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        let report = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(report.presenceEventsRemoved == 6)
        #expect(report.fixesRemoved == 0 && report.placesRemoved == 0)
        let left = try Self.presenceInLog(writer)
        #expect(left.changes == ["1-1", "1-5", "2-1"])
        #expect(left.links == 3)
    }

    @Test func anOpenSegmentHoldingAnExpiredChangeIsRolled() throws {
        let directory = PlaceRetentionTests.LogDirectory()
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory.path, options: options)
        defer { writer.close() }
        _ = try writer.append(
            Self.offline(7, daysAgo: 31, node: "old"), receivedAtMicros: Self.now - 31 * Self.day)
        _ = try writer.append(
            Self.offline(7, daysAgo: 29, node: "young"), receivedAtMicros: Self.now - 29 * Self.day)
        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        let report = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(report.activeSegmentRolled && report.presenceEventsRemoved == 1)
        #expect(try Self.presenceInLog(writer).changes == ["young"])
    }
}
