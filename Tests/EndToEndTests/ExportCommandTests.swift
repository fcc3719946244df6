import Events
import Foundation
import Testing

/// `findmy export` as an operator runs it on a data directory, with no server and no database: a
/// device's history to standard output or a file, and the errors that say what is wrong.
@Suite struct ExportCommandTests {
    static let day: Int64 = 86_400_000_000
    static let asOf = "2026-06-01T00:00:00Z"
    static let now: Int64 = 1_780_272_000_000_000

    /// Device 1 with two live fixes and one past the default window; device 2 removed.
    static func writeLog(_ data: String) throws {
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: data + "/log", options: options)
        defer { writer.close() }
        for device in [1, 2] as [UInt64] {
            try writer.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: 1, deviceUUID: UUID128.random(), name: "phone \(device)",
                        platform: "ios", model: "test")), receivedAtMicros: now - 60 * day)
        }
        let fixes = [now - 2 * day, now - 40 * day, now - day].enumerated().map { index, at in
            Fix(
                latitude: 52.5 + Double(index) / 100, longitude: 13.4, accuracyMeters: 10,
                source: "significant",
                recordedAtMicros: at)
        }
        try writer.append(
            .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: fixes)),
            receivedAtMicros: now - day)
        try writer.append(
            .fixBatch(FixBatch(deviceID: 2, batchID: UUID128.random(), fixes: [fixes[0]])),
            receivedAtMicros: now - day)
        try writer.append(.deviceRemoved(DeviceRemoved(deviceID: 2)), receivedAtMicros: now - day)
    }

    @Test func aDeviceToStandardOutputAndToAFile() throws {
        let scratch = ScratchDirectory("findmy-export")
        try Self.writeLog(scratch.path)
        let common = ["export", "--data-dir", scratch.path, "--device", "1", "--as-of", Self.asOf]
        let gpx = try FindmyProcess.run(common + ["--format", "gpx"])
        #expect(gpx.status == 0, "\(gpx.error)")
        #expect(gpx.output.components(separatedBy: "<trkpt").count - 1 == 2, "\(gpx.output)")
        #expect(
            gpx.error.contains("exported 2 fixes of device 1 (phone 1) as gpx, in log order"), "\(gpx.error)")
        #expect(gpx.error.contains("1 past the retention window (30 days)"), "\(gpx.error)")

        let file = scratch.path + "/phone.csv"
        let csv = try FindmyProcess.run(
            common + ["--format", "csv", "--output", file, "--retention-days", "45"])
        #expect(csv.status == 0, "\(csv.error)")
        #expect(csv.output.contains("exported 3 fixes"), "\(csv.output)")
        let rows = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\r\n")
        #expect(rows.count == 4 && rows[0].hasPrefix("recorded_at,received_at,latitude"), "\(rows)")
        #expect(!FileManager.default.fileExists(atPath: file + ".partial"))
    }

    @Test func anUnknownOrRemovedDeviceAndAMissingLogAreClearErrors() throws {
        let scratch = ScratchDirectory("findmy-export")
        try Self.writeLog(scratch.path)
        let file = scratch.path + "/out.gpx"
        let unknown = try FindmyProcess.run([
            "export", "--data-dir", scratch.path, "--device", "9", "--format", "gpx", "--output", file,
        ])
        #expect(unknown.status == 1)
        #expect(unknown.error.contains("no device 9 in this log"), "\(unknown.error)")
        #expect(
            !FileManager.default.fileExists(atPath: file)
                && !FileManager.default.fileExists(atPath: file + ".partial"))

        let removed = try FindmyProcess.run([
            "export", "--data-dir", scratch.path, "--device", "2", "--format", "csv",
        ])
        #expect(removed.status == 1)
        #expect(removed.error.contains("device 2 was removed"), "\(removed.error)")
        #expect(removed.output.isEmpty, "\(removed.output)")

        let noLog = try FindmyProcess.run([
            "export", "--data-dir", scratch.path + "/nothing", "--device", "1", "--format", "csv",
        ])
        #expect(noLog.status == 2)
        #expect(noLog.error.contains("no event log at"), "\(noLog.error)")

        let badFormat = try FindmyProcess.run([
            "export", "--data-dir", scratch.path, "--device", "1", "--format", "kml",
        ])
        #expect(badFormat.status == 2)
        #expect(badFormat.error.contains("--format must be gpx, geojson or csv"), "\(badFormat.error)")

        let help = try FindmyProcess.run(["export", "--help"])
        #expect(help.status == 0)
        #expect(
            help.output.contains("in log order") && help.output.contains("--retention-days"), "\(help.output)"
        )
    }
}
