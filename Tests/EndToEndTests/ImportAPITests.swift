import Foundation
import HTTPClient
import JSON
import Testing

/// The network API's imports: an upload streamed to disk and imported into the owner's device, its
/// status followed until done, its fixes in the device's history; refused to anyone else (404,
/// before the body is read) and over the size limit (413); the upload removed once it is done.
@Suite(.serialized) struct ImportAPITests {
    func upload(_ connection: HTTPConnection, _ target: String, token: String, body: [UInt8]) throws -> Answer
    {
        let response = try connection.send(
            "POST", target,
            headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/gpx+xml")],
            body: body)
        return Answer(status: response.status, body: (try? JSONParser.parse(response.body)) ?? .null)
    }

    @Test func anUploadIsImportedIntoTheOwnersDeviceAndReadInItsHistory() throws {
        let data = ScratchDirectory("findmy-import-api")
        let jane = try addUser("jane", data: data.path)
        let bob = try addUser("bob", data: data.path)
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on", "--import-bytes-max", "20000"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let device = try #require(
            try enrol(connection, userToken: jane, uuid: UUID().uuidString).int("device_id"))
        let imports = "/api/find-my/devices/\(device)/imports"
        let gpx = Array(ImportFiles.gpx(secondsAgo: (0..<30).map { 7200 - $0 * 60 }).utf8)
        #expect(gpx.count < 20_000)

        let started = try upload(connection, imports + "?name=trip.gpx", token: jane, body: gpx)
        #expect(started.status == 202, "\(started.body)")
        let id = try #require(started.string("import_id"))
        var status = Answer(status: 0, body: .null)
        try waitUntil("the import to end") {
            status = try get(connection, imports + "/\(id)?wait_ms=1000", token: jane)
            return status.string("state") == "done" || status.string("state") == "failed"
        }
        #expect(status.status == 200 && status.string("state") == "done", "\(status.body)")
        #expect(status.int("accepted") == 30 && status.string("format") == "gpx", "\(status.body)")
        #expect(status.string("file_name") == "trip.gpx")
        try waitUntil("the 30 fixes in the device's history") {
            let page = try get(connection, "/api/find-my/devices/\(device)/locations?limit=100", token: jane)
            return ((try? page.body["locations"]?.arrayValue) ?? []).count == 30
        }
        // The upload is the import's: gone once the import ended.
        #expect(try FileManager.default.contentsOfDirectory(atPath: data.path + "/imports") == [])

        // Bob may neither import into jane's device nor read her import: the 404 of a missing device.
        let refused = try upload(connection, imports + "?name=trip.gpx", token: bob, body: gpx)
        #expect(refused.status == 404 && refused.errorCode == "device_not_found", "\(refused.body)")
        let unseen = try get(connection, imports + "/\(id)", token: bob)
        #expect(unseen.status == 404)
        // Over --import-bytes-max: 413, nothing imported.
        let large = try upload(
            connection, imports + "?name=big.gpx", token: jane, body: Array(repeating: 0x20, count: 30_000))
        #expect(large.status == 413, "\(large.body)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: data.path + "/imports") == [])

        // The gate answers once the head is in: a body announced and never sent is not waited for.
        for (token, status) in [(bob, 404), (jane, 413)] {
            let raw = try RawClient(address: server.address)
            #expect(
                raw.write(
                    "POST \(imports)?name=big.gpx HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n"
                        + "Content-Length: 1000000\r\n\r\n"))
            #expect(raw.readResponse()?.status == status)
        }
    }
}
