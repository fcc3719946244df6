import Compactor
import Events
import Foundation
import Testing

/// An import's audit record (type 40) holds no coordinate and lives as its batches' envelopes do:
/// past the arrivals window (or the device's fix window, when longer) it goes, with its device's
/// removal it goes, and an erasure leaves it. Asserted on a real compaction of a real log
/// (docs/retention.md, "Imports").
@Suite struct ImportRetentionTests {
    static let day = RetentionPolicy.microsPerDay
    static let now = PlaceRetentionTests.now

    /// An import into `device`, named by its file.
    static func imported(_ device: UInt64, _ fileName: String) -> Event {
        .historyImported(
            HistoryImported(
                deviceID: device, importID: UUID128.random(), format: "gpx", fileName: fileName,
                fileSHA256: Array(repeating: 7, count: 32), fileBytes: 100, userID: 1, fixesRead: 1,
                fixesAccepted: 1, fixesRejected: 0, fixesDuplicate: 0, notAFix: 0,
                recordedSpanMicros: (now - 400 * day)...(now - 400 * day), batchIDs: [UUID128.random()]))
    }

    static func importsInLog(_ writer: LogWriter) throws -> [String] {
        var names: [String] = []
        try LogReader(directory: writer.directory, writer: writer).read(from: 0) { record in
            if case .historyImported(let imported) = try record.event() { names.append(imported.fileName) }
            return true
        }
        return names.sorted()
    }

    @Test func anImportRecordLivesAsTheEnvelopesOfItsBatches() throws {
        let directory = PlaceRetentionTests.LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let enrolledAt = Self.now - 500 * Self.day
        var events: [(Event, Int64)] = []
        for device: UInt64 in 1...4 {
            events.append(
                (
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: device, userID: 1, deviceUUID: UUID128(high: 3, low: device), name: "d",
                            platform: "linux", model: "")), enrolledAt
                ))
        }
        // Device 4 keeps fixes for 200 days: its envelopes, and its imports, live as long.
        events.append((.retentionChanged(RetentionChanged(scope: .device(4), days: 200)), enrolledAt))
        // File names say "<device>-<age in days>"; the arrivals window is 90 days.
        for device: UInt64 in 1...4 {
            for age: Int64 in [150, 91, 89, 1] {
                events.append((Self.imported(device, "\(device)-\(age)"), Self.now - age * Self.day))
            }
        }
        // Device 2's history is erased whole; device 3 is removed.
        events.append((.historyErased(HistoryErased(deviceID: 2, fromMicros: nil, toMicros: nil)), Self.now))
        events.append((.deviceRemoved(DeviceRemoved(deviceID: 3)), Self.now))
        for (event, received) in events { _ = try writer.append(event, receivedAtMicros: received) }

        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        let dry = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: true)
        #expect(dry.recordsDropped == 2 + 2 + 4)
        let report = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(report.recordsDropped == dry.recordsDropped)
        #expect(report.fixesRemoved == 0 && report.envelopesMade == 0)
        #expect(
            try Self.importsInLog(writer) == ["1-1", "1-89", "2-1", "2-89", "4-1", "4-150", "4-89", "4-91"])
    }

    /// The open segment is rolled once it holds an import record past its window, as for an envelope.
    @Test func anOpenSegmentHoldingAnExpiredImportIsRolled() throws {
        let directory = PlaceRetentionTests.LogDirectory()
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory.path, options: options)
        defer { writer.close() }
        _ = try writer.append(Self.imported(7, "old"), receivedAtMicros: Self.now - 91 * Self.day)
        _ = try writer.append(Self.imported(7, "young"), receivedAtMicros: Self.now - 89 * Self.day)
        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        let report = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(report.activeSegmentRolled && report.recordsDropped == 1)
        #expect(try Self.importsInLog(writer) == ["young"])
    }
}
