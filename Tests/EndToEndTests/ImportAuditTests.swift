import Events
import Foundation
import HTTPClient
import JSON
import Testing

/// An import's records as a running server answers them: 300 chunks of a file (more than the ring
/// of recent batch results) and the import's `history_imported` record, appended to the log of a
/// stopped server as an import appends them. After a restart the first chunk's batch id is still
/// a duplicate, the arrivals name the file, and the imports list is the owner's alone.
@Suite(.serialized) struct ImportAuditTests {
    static let chunks = 300

    static func chunkID(_ index: Int) -> UUID128 {
        UUID128(high: 0x1234_5678_9ABC_8DEF, low: 0x8000 + UInt64(index))
    }

    @Test func aReimportedChunkIsADuplicateAndArrivalsNameTheFile() throws {
        let data = ScratchDirectory("findmy-import-audit")
        let olga = try addUser("olga", data: data.path)
        let mia = try addUser("mia", data: data.path)
        var deviceID: Int64 = 0
        var deviceToken = ""
        do {
            let server = try ServerProcess(data: data.path)
            defer { server.stop() }
            let connection = HTTPConnection(address: server.address)
            let enrolled = try enrol(connection, userToken: olga, uuid: UUID().uuidString)
            deviceID = try #require(enrolled.int("device_id"))
            deviceToken = try #require(enrolled.string("device_token"))
            let shared = try post(
                connection, "/api/find-my/devices/\(deviceID)/shares", token: olga,
                body: "{\"user\": \"mia\"}")
            #expect(shared.status == 201)
        }

        let gpx = try #require(ClientProtocol.imported(format: "gpx"))
        let recorded = Int64(Date().timeIntervalSince1970 * 1_000_000) - 86_400_000_000
        let log = try LogWriter(directory: data.path + "/log")
        for index in 0..<Self.chunks {
            let fix = Fix(
                latitude: 48 + Double(index) / 10_000, longitude: 11.5, accuracyMeters: nil,
                source: "significant",
                recordedAtMicros: recorded + Int64(index) * 1_000_000)
            try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(deviceID), batchID: Self.chunkID(index), fixes: [fix],
                        clientProtocol: gpx)))
        }
        let importID = UUID128(high: 0xFEED, low: 1)
        try log.append(
            .historyImported(
                HistoryImported(
                    deviceID: UInt64(deviceID), importID: importID, format: "gpx", fileName: "alps.gpx",
                    fileSHA256: Array(repeating: 0xAB, count: 32), fileBytes: 54_321, userID: 1,
                    fixesRead: UInt64(Self.chunks), fixesAccepted: UInt64(Self.chunks), fixesRejected: 0,
                    fixesDuplicate: 0, notAFix: 2,
                    recordedSpanMicros: recorded...(recorded + Int64(Self.chunks - 1) * 1_000_000),
                    batchIDs: (0..<Self.chunks).map(Self.chunkID))))
        let lastOffset = log.durableEnd - 1
        log.close()

        let server = try ServerProcess(data: data.path, extraArguments: ["--projector", "on"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        // The first chunk sent again (an import of the same file, or a device that happened on the
        // id): answered as the duplicate it is, with what it stored.
        let again = try post(
            connection, "/api/find-my/report", token: deviceToken,
            body: reportBody(batchID: Self.chunkID(0).description, fixes: [fixJSON()]))
        #expect(again.status == 200 && again.body["duplicate"] == .bool(true), "\(again.body)")
        #expect(again.int("accepted") == 1)

        let arrivals = try get(
            connection, "/api/find-my/devices/\(deviceID)/arrivals?limit=1000&after_offset=\(lastOffset)",
            token: olga)
        #expect(arrivals.status == 200, "\(arrivals.body)")
        let rows = try #require(try? arrivals.body["arrivals"]?.arrayValue)
        #expect(rows.count == Self.chunks)
        for arrival in rows {
            let named = arrival["import"]
            #expect(named?.objectKeys.sorted() == ["file_name", "format", "import_id", "sha256"])
            #expect(named?["import_id"] == .string(importID.description))
            #expect(named?["file_name"] == .string("alps.gpx") && named?["format"] == .string("gpx"))
            #expect(named?["sha256"] == .string(String(repeating: "ab", count: 32)))
            #expect(arrival["protocol"] == .string("import:gpx"))
        }

        let imports = try get(connection, "/api/find-my/devices/\(deviceID)/imports", token: olga)
        #expect(imports.status == 200, "\(imports.body)")
        let listed = try #require(try? imports.body["imports"]?.arrayValue)
        #expect(listed.count == 1)
        let row = try #require(listed.first)
        #expect(row["import_id"] == .string(importID.description) && row["file_name"] == .string("alps.gpx"))
        #expect(row["fixes_read"] == .integer(Int64(Self.chunks)) && row["not_a_fix"] == .integer(2))
        #expect(row["file_bytes"] == .integer(54_321) && row["format"] == .string("gpx"))
        #expect(row["log_offset"] == .integer(Int64(lastOffset)))
        // Shared with mia, who sees the device's arrivals but not its imports: the 404 of a missing device.
        let miaToken = mia
        #expect(
            try get(connection, "/api/find-my/devices/\(deviceID)/arrivals", token: miaToken).status == 200)
        let refused = try get(connection, "/api/find-my/devices/\(deviceID)/imports", token: miaToken)
        let missing = try get(connection, "/api/find-my/devices/999999/imports", token: miaToken)
        #expect(refused.status == 404 && refused.body == missing.body)
    }
}
