import Events
import Export
import Foundation
import Import
import Testing

/// `findmy export`'s reading of the log: what the server still shows of a device (erasures, a
/// removal and the retention window applied), in log order, read back through Import's readers.
@Suite struct LogHistoryTests {
    static let day: Int64 = 86_400_000_000
    static let hour: Int64 = 3_600_000_000
    static let now: Int64 = 1_780_272_000_000_000  // 2026-06-01T00:00:00Z

    static func fix(_ recordedAtMicros: Int64, _ latitude: Double, battery: UInt8? = nil) -> Fix {
        Fix(
            latitude: latitude, longitude: 13.25, accuracyMeters: 8.5, batteryPercent: battery,
            isCharging: battery.map { $0 > 50 }, source: "significant", recordedAtMicros: recordedAtMicros)
    }

    /// A log of two devices of one user: device 1's batches around an erasure and one fix past the
    /// 30-day window; device 2 removed. `extra` are appended at the end.
    final class Log: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "findmy-loghistory-\(UUID().uuidString.prefix(8))"
        var reader: LogReader { LogReader(directory: path) }
        /// Device 1's fixes as the server shows them, in log order, with their received_at.
        private(set) var shown: [(fix: Fix, receivedAtMicros: Int64)] = []
        let expired = LogHistoryTests.fix(now - 40 * day, 52.0)
        let erased = LogHistoryTests.fix(now - 3 * day - hour, 52.4)

        init(extra: [Event] = []) throws {
            var options = LogOptions()
            options.diagnostics = { _ in }
            let writer = try LogWriter(directory: path, options: options)
            defer { writer.close() }
            for device in [1, 2] as [UInt64] {
                try writer.append(
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: device, userID: 7, deviceUUID: UUID128.random(),
                            name: "phone \(device)",
                            platform: "ios", model: "test")), receivedAtMicros: now - 50 * day)
            }
            let a = [fix(now - 10 * day - 2 * hour, 52.1, battery: 80), expired, fix(now - 10 * day, 52.2)]
            try batch(writer, device: 1, a, receivedAtMicros: now - 10 * day + 60_000_000)
            try batch(writer, device: 2, [fix(now - 5 * day, 48.0)], receivedAtMicros: now - 5 * day)
            let c = [fix(now - 3 * day - 2 * hour, 52.3), erased]
            try batch(writer, device: 1, c, receivedAtMicros: now - 3 * day)
            try writer.append(
                .historyErased(
                    HistoryErased(
                        deviceID: 1, fromMicros: now - 3 * day - 90 * 60_000_000,
                        toMicros: now - 3 * day)),
                receivedAtMicros: now - 3 * day + 1)
            // In the erased range, but after the erasure: the erasure covers earlier records only.
            let d = [fix(now - 3 * day - hour + 1_000_000, 52.5, battery: 20), fix(now - 2 * day, 52.6)]
            try batch(writer, device: 1, d, receivedAtMicros: now - 2 * day)
            try writer.append(.deviceRemoved(DeviceRemoved(deviceID: 2)), receivedAtMicros: now - day)
            for event in extra { try writer.append(event, receivedAtMicros: now - day) }
            shown =
                [a[0], a[2]].map { ($0, now - 10 * day + 60_000_000) } + [(c[0], now - 3 * day)]
                + d.map { ($0, now - 2 * day) }
        }

        private func batch(_ writer: LogWriter, device: UInt64, _ fixes: [Fix], receivedAtMicros: Int64)
            throws
        {
            try writer.append(
                .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes)),
                receivedAtMicros: receivedAtMicros)
        }

        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    static func export(
        _ log: Log, device: UInt64 = 1, format: ExportFormat = .csv, from: Int64? = nil, to: Int64? = nil,
        settings: RetentionSettings = RetentionSettings()
    ) throws -> (bytes: [UInt8], counts: LogHistory.Counts) {
        let facts = try LogHistory.facts(device: device, reader: log.reader, settings: settings)
        var output: [UInt8] = []
        var exporter = FixExporter(format: format, flushBytes: 256) { output += $0 }
        let counts = try LogHistory.fixes(
            of: facts, reader: log.reader, fromMicros: from, toMicros: to, nowMicros: now
        ) { fix, received in try exporter.write(fix, receivedAtMicros: received) }
        try exporter.finish()
        #expect(exporter.fixesWritten == counts.written)
        return (output, counts)
    }

    static func readBack(_ bytes: [UInt8], _ format: ExportFormat) throws -> [Fix] {
        let importFormat: ImportFormat =
            switch format {
            case .gpx: .gpx
            case .geojson: .geojson
            case .csv: .csv
            }
        #expect(ImportFormat.detect(prefix: bytes, fileName: nil) == importFormat)
        return fixes(try readAll(importFormat.reader(source: MemoryByteSource(bytes))))
    }

    @Test(arguments: ExportFormat.allCases)
    func theExportIsWhatTheServerShowsInLogOrderAndReadsBack(format: ExportFormat) throws {
        let log = try Log()
        let (bytes, counts) = try Self.export(log, format: format)
        #expect(try Self.readBack(bytes, format) == log.shown.map(\.fix))
        #expect(
            counts
                == {
                    var c = LogHistory.Counts()
                    (c.written, c.expired, c.erased) = (5, 1, 1)
                    return c
                }())
    }

    @Test func eachFixCarriesTheReceivedAtOfItsBatch() throws {
        let log = try Log()
        let text = String(decoding: try Self.export(log, format: .csv).bytes, as: UTF8.self)
        let rows = text.split(separator: "\r\n").dropFirst()
        let header = text.split(separator: "\r\n")[0].split(separator: ",")
        let column = try #require(header.firstIndex(of: "received_at"))
        let received = rows.map { String($0.split(separator: ",", omittingEmptySubsequences: false)[column]) }
        #expect(
            received == [
                "2026-05-22T00:01:00.000000Z", "2026-05-22T00:01:00.000000Z", "2026-05-29T00:00:00.000000Z",
                "2026-05-30T00:00:00.000000Z", "2026-05-30T00:00:00.000000Z",
            ])
    }

    @Test func aRemovedDeviceAndAnUnknownOneAreRefused() throws {
        let log = try Log()
        #expect(throws: LogHistory.Failure.removedDevice(2, offset: 7)) {
            try LogHistory.facts(device: 2, reader: log.reader, settings: RetentionSettings())
        }
        #expect(throws: LogHistory.Failure.unknownDevice(9)) {
            try LogHistory.facts(device: 9, reader: log.reader, settings: RetentionSettings())
        }
    }

    @Test func fromAndToBoundRecordedAtLikeTheAPI() throws {
        let log = try Log()
        let from = Self.now - 3 * Self.day - 2 * Self.hour
        let (bytes, counts) = try Self.export(log, from: from, to: Self.now - 2 * Self.day)
        let expected = log.shown.map(\.fix).filter {
            $0.recordedAtMicros >= from && $0.recordedAtMicros < Self.now - 2 * Self.day
        }
        #expect(expected.count == 2)
        #expect(try Self.readBack(bytes, .csv) == expected)
        // The expired fix is outside the range: not counted as left out.
        #expect(counts.expired == 0 && counts.erased == 1)
    }

    @Test func aLongerWindowOfTheDeviceOrItsUserKeepsTheOldFix() throws {
        for scope in [RetentionScope.device(1), .user(7)] {
            let log = try Log(extra: [.retentionChanged(RetentionChanged(scope: scope, days: 60))])
            let read = try Self.readBack(try Self.export(log).bytes, .csv)
            #expect(read.contains(log.expired), "\(scope)")
            #expect(read.count == 6)
        }
        // The server's own default, as --retention-days gives it.
        let log = try Log()
        let read = try Self.readBack(
            try Self.export(log, settings: RetentionSettings(retentionDays: 45)).bytes, .csv)
        #expect(read.contains(log.expired))
    }

    @Test func aShorterWindowLeavesOutWhatAnExportBeforeItGave() throws {
        let log = try Log(extra: [.retentionChanged(RetentionChanged(scope: .device(1), days: 5))])
        let (bytes, counts) = try Self.export(log)
        #expect(try Self.readBack(bytes, .csv) == log.shown.map(\.fix).suffix(3))
        #expect(counts.expired == 3)
    }
    /// A running server holds the writer's lock; the export needs none. Both passes stop where the
    /// log stood when the first began, so the file is the history as of one offset: an erasure and a
    /// new fix appended between the passes are neither of them in it, and the next export has both.
    @Test func theLogIsReadBesideItsWriterUpToWhereTheFirstPassBegan() throws {
        let log = try Log()
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: log.path, options: options)
        defer { writer.close() }
        let facts = try LogHistory.facts(device: 1, reader: log.reader, settings: RetentionSettings())
        try writer.append(.historyErased(HistoryErased(deviceID: 1)), receivedAtMicros: Self.now)
        let late = Self.fix(Self.now - Self.hour, 52.7)
        try writer.append(
            .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: [late])),
            receivedAtMicros: Self.now)
        var read: [Fix] = []
        _ = try LogHistory.fixes(
            of: facts, reader: log.reader, fromMicros: nil, toMicros: nil, nowMicros: Self.now
        ) {
            fix, _ in read.append(fix)
        }
        #expect(read == log.shown.map(\.fix))
        let (bytes, counts) = try Self.export(log)
        #expect(try Self.readBack(bytes, .csv) == [late])
        // All seven, the one past the window too: an erasure is decided before the window.
        #expect(counts.written == 1 && counts.erased == 7 && counts.expired == 0)
    }
}
