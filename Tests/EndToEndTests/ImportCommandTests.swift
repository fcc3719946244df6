import Foundation
import HTTPClient
import JSON
import Testing

/// Files a test writes: GPX and CSV whose fixes were recorded a given time ago, so that the
/// retention window decides what is expired.
enum ImportFiles {
    static func micros(secondsAgo: Int) -> Int64 {
        Int64(Date().timeIntervalSince1970) * 1_000_000 - Int64(secondsAgo) * 1_000_000
    }

    /// A GPX track of one point per `secondsAgo`, each at its own latitude.
    static func gpx(secondsAgo: [Int]) -> String {
        let points = secondsAgo.enumerated().map { index, ago in
            "<trkpt lat=\"\(52.0 + Double(index) / 10_000)\" lon=\"13.4\"><time>"
                + RFC3339.formatMicros(micros(secondsAgo: ago)) + "</time></trkpt>"
        }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <gpx version="1.1" creator="test" xmlns="http://www.topografix.com/GPX/1/1"><trk><trkseg>
            \(points.joined(separator: "\n"))
            </trkseg></trk></gpx>
            """
    }

    /// A CSV of `rows` fixes a minute apart, ending an hour ago; the row `damagedRow` (from 1, the
    /// file's line `damagedRow + 1`) has a time that cannot be read.
    static func csv(rows: Int, damagedRow: Int? = nil) -> String {
        var lines = ["latitude,longitude,time,accuracy"]
        for row in 1...rows {
            let time =
                row == damagedRow
                ? "not-a-time" : RFC3339.formatMicros(micros(secondsAgo: 3600 + (rows - row) * 60))
            lines.append("\(48.0 + Double(row) / 100_000),2.35,\(time),10")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func write(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// `findmy import` as a user runs it: offline on the log, through the server's socket, a second
/// time, on a damaged file, and as a dry run.
@Suite(.serialized) struct ImportCommandTests {
    /// `findmy import ... --json`: the exit status and each file's final status.
    func runImport(_ arguments: [String], data: String) throws -> (
        status: Int32, files: [JSONValue], error: String
    ) {
        let result = try FindmyProcess.run(["import", "--json", "--data-dir", data] + arguments)
        let files = try result.output.split(separator: "\n").map { try JSONParser.parse(String($0)) }
        return (result.status, files, result.error)
    }

    func batches(_ data: String, protocolName: String) throws -> [JSONValue] {
        try dumpLog(data).records.filter {
            $0["type"] == .string("fix_batch") && $0["protocol"] == .string(protocolName)
        }
    }

    @Test func aGPXImportedOfflineIsStoredOnceAndItsAuditRecordFollows() throws {
        let data = ScratchDirectory("findmy-import-gpx")
        let jane = try addUser("jane", data: data.path)
        let file = data.path + "/trip.gpx"
        try ImportFiles.write(
            ImportFiles.gpx(secondsAgo: Array(stride(from: 7200, to: 3600, by: -120))), to: file)

        let first = try runImport(["--user", "jane", "--new-device", "pixel", file], data: data.path)
        #expect(first.status == 0, "\(first.error)")
        #expect(first.files.count == 1)
        let status = first.files[0]
        #expect(status["state"] == .string("done"), "\(status)")
        #expect(status["format"] == .string("gpx"))
        #expect(status["accepted"] == .integer(30) && status["duplicate"] == .integer(0), "\(status)")
        #expect(first.error.contains("created device"), "\(first.error)")
        let stored = try batches(data.path, protocolName: "import:gpx")
        #expect(stored.count == 1)
        #expect(((try? stored.first?["fixes"]?.arrayValue) ?? []).count == 30)
        let audits = try dumpLog(data.path).records.filter { $0["type"] == .string("history_imported") }
        #expect(audits.count == 1, "\(audits)")

        // The same file again, into the same device by its name: every chunk answered as stored.
        let second = try runImport(["--user", "jane", "--new-device", "pixel", file], data: data.path)
        #expect(second.status == 0, "\(second.error)")
        #expect(second.files[0]["accepted"] == .integer(0) && second.files[0]["duplicate"] == .integer(30))
        #expect(second.files[0]["device_id"] == status["device_id"])
        #expect(!second.error.contains("created device"))
        #expect(try batches(data.path, protocolName: "import:gpx").count == 1)

        // Projected to the log's end, the device's history holds each fix once.
        let lastOffset = try #require(try dumpLog(data.path).records.last?["offset"]?.int64Value)
        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let device = try #require(try? status["device_id"]?.int64Value)
        var page = Answer(status: 0, body: .null)
        try waitUntil("the projection to reach the log's end") {
            page = try get(
                connection, "/api/find-my/devices/\(device)/locations?limit=100&after_offset=\(lastOffset)",
                token: jane)
            return page.status == 200
        }
        #expect(((try? page.body["locations"]?.arrayValue) ?? []).count == 30, "\(page.body)")
    }

    @Test func aDamagedCSVStoresTheWholeChunksBeforeTheDamageAndNamesTheLine() throws {
        let data = ScratchDirectory("findmy-import-csv")
        _ = try addUser("jane", data: data.path)
        let file = data.path + "/damaged.csv"
        try ImportFiles.write(ImportFiles.csv(rows: 2500, damagedRow: 2400), to: file)

        let result = try FindmyProcess.run(
            ["import", "--user", "jane", "--new-device", "laptop", "--data-dir", data.path, file])
        #expect(result.status == 1, "\(result.output) \(result.error)")
        #expect(result.output.contains("FAILED") && result.output.contains("line 2401"), "\(result.output)")
        #expect(result.output.contains("2000 stored"), "\(result.output)")
        let stored = try batches(data.path, protocolName: "import:csv")
        // Chunks of 1,000: the first two are whole; the third, holding row 2400, is not stored.
        #expect(stored.count == 2)
        #expect(stored.map { ((try? $0["fixes"]?.arrayValue) ?? []).count } == [1000, 1000])
        #expect(try dumpLog(data.path).records.allSatisfy { $0["type"] != .string("history_imported") })
    }

    @Test func aDryRunCountsWhatIsOutsideTheWindowAndStoresNothing() throws {
        let data = ScratchDirectory("findmy-import-dry")
        _ = try addUser("jane", data: data.path)
        let file = data.path + "/old.gpx"
        // 5 fixes an hour old, 7 three days old: a window of 1 day keeps 5.
        let ages =
            Array(repeating: 3600, count: 5).enumerated().map { $0.element + $0.offset }
            + Array(repeating: 3 * 86_400, count: 7).enumerated().map { $0.element + $0.offset }
        try ImportFiles.write(ImportFiles.gpx(secondsAgo: ages), to: file)

        let result = try FindmyProcess.run(
            [
                "import", "--user", "jane", "--new-device", "pixel", "--dry-run", "--retention-days", "1",
                "--data-dir", data.path, file,
            ])
        #expect(result.status == 0, "\(result.error)")
        #expect(result.output.contains("12 fixes read, nothing stored (dry run)"), "\(result.output)")
        #expect(result.output.contains("7 fixes are older than the device's retention window of 1 days"))
        #expect(result.output.contains("findmy retention set --device"), "\(result.output)")
        #expect(try batches(data.path, protocolName: "import:gpx").isEmpty)
    }

    @Test func fixesOutsideTheWindowAreStoredByAnImportAfterItWidens() throws {
        let data = ScratchDirectory("findmy-import-widen")
        _ = try addUser("jane", data: data.path)
        let file = data.path + "/old.gpx"
        try ImportFiles.write(ImportFiles.gpx(secondsAgo: (0..<7).map { 3 * 86_400 + $0 }), to: file)
        let arguments = ["--user", "jane", "--new-device", "pixel", file]

        let narrow = try runImport(["--retention-days", "1"] + arguments, data: data.path)
        #expect(narrow.status == 0, "\(narrow.error)")
        #expect(narrow.files[0]["rejected"] == .integer(7) && narrow.files[0]["accepted"] == .integer(0))
        #expect(narrow.files[0]["rejected_by_reason"]?["expired"] == .integer(7), "\(narrow.files)")
        #expect(try batches(data.path, protocolName: "import:gpx").isEmpty)

        let wide = try runImport(["--retention-days", "30"] + arguments, data: data.path)
        #expect(
            wide.files[0]["accepted"] == .integer(7) && wide.files[0]["duplicate"] == .integer(0),
            "\(wide.files)")
        #expect(try batches(data.path, protocolName: "import:gpx").count == 1)
    }

    @Test func withAServerRunningTheImportGoesThroughItsSocket() throws {
        let data = ScratchDirectory("findmy-import-online")
        _ = try addUser("jane", data: data.path)
        let file = data.path + "/trip.gpx"
        try ImportFiles.write(ImportFiles.gpx(secondsAgo: [600, 500, 400]), to: file)
        let server = try ServerProcess(data: data.path)
        // The server holds the log: an import that did not go through its socket could not open it.
        let result = try runImport(["--user", "jane", "--new-device", "pixel", file], data: data.path)
        #expect(result.status == 0, "\(result.error)")
        #expect(result.files.first?["accepted"] == .integer(3), "\(result.files)")
        #expect(server.stop() == 0)
        #expect(server.process.standardError.contains("import_ended"), "\(server.process.standardError)")
        #expect(try batches(data.path, protocolName: "import:gpx").count == 1)
    }

    @Test func aPausedDeviceRefusesTheImportAndSaysHowToResume() throws {
        let data = ScratchDirectory("findmy-import-paused")
        let userToken = try addUser("jane", data: data.path)
        let file = data.path + "/trip.gpx"
        try ImportFiles.write(ImportFiles.gpx(secondsAgo: [600, 500]), to: file)
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let enrolled = try enrol(connection, userToken: userToken, uuid: UUID().uuidString, name: "phone")
        let deviceID = try #require(enrolled.int("device_id"))
        let paused = try post(
            connection, "/api/find-my/reporting", token: enrolled.string("device_token"),
            body: "{\"paused\": true}")
        #expect(paused.status == 200)

        let result = try runImport(["--user", "jane", "--device", "\(deviceID)", file], data: data.path)
        #expect(result.status == 1)
        #expect(result.files.first?["state"] == .string("failed"))
        #expect(
            (try? result.files.first?["error"]?.stringValue)?.contains("reporting is paused for this device")
                == true,
            "\(result.files)")
        // Another user's device is no target.
        _ = try addUser("bob", data: data.path)
        let other = try runImport(["--user", "bob", "--device", "\(deviceID)", file], data: data.path)
        #expect(other.status == 2 && other.error.contains("has no device"), "\(other.error)")
    }

    @Test func aRecorderStoreGoesToTheMappedUsersDevicesByName() throws {
        let data = ScratchDirectory("findmy-import-recorder")
        _ = try addUser("jane", data: data.path)
        _ = try addUser("max", data: data.path)
        let store = data.path + "/store"
        func line(_ secondsAgo: Int, _ latitude: Double) -> String {
            let micros = ImportFiles.micros(secondsAgo: secondsAgo)
            return RFC3339.formatMicros(micros).prefix(19) + "Z\t*                 \t"
                + "{\"_type\":\"location\",\"lat\":\(latitude),\"lon\":13.4,\"acc\":8,\"tst\":\(micros / 1_000_000)}"
        }
        for (user, device, lines) in [
            ("jane", "phone", [line(900, 52.1), line(800, 52.2)]), ("bob", "tablet", [line(700, 52.3)]),
        ] {
            try FileManager.default.createDirectory(
                atPath: "\(store)/rec/\(user)/\(device)", withIntermediateDirectories: true)
            try ImportFiles.write(
                lines.joined(separator: "\n") + "\n", to: "\(store)/rec/\(user)/\(device)/2026-12.rec")
        }
        let result = try runImport(["--user", "jane", "--user-map", "bob=max", store], data: data.path)
        #expect(result.status == 0, "\(result.error)")
        #expect(result.files.map { $0["accepted"] } == [.integer(1), .integer(2)], "\(result.files)")
        #expect(
            result.files.map { $0["file_name"] } == [
                .string("bob/tablet/2026-12.rec"), .string("jane/phone/2026-12.rec"),
            ])
        let devices = try dumpLog(data.path).records.filter { $0["type"] == .string("device_enrolled") }
        #expect(devices.count == 2, "\(devices)")
        #expect(try batches(data.path, protocolName: "import:owntracks-recorder").count == 2)
    }

    @Test func anUnknownFormatAsksForFormat() throws {
        let data = ScratchDirectory("findmy-import-unknown")
        _ = try addUser("jane", data: data.path)
        let file = data.path + "/notes.txt"
        try ImportFiles.write("hello\nworld\n", to: file)
        let result = try FindmyProcess.run(
            ["import", "--user", "jane", "--new-device", "pixel", "--data-dir", data.path, file])
        #expect(result.status == 1)
        #expect(result.output.contains("--format"), "\(result.output)")
    }
}
