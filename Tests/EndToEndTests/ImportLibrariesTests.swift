import Foundation
import HTTPClient
import JSON
import Testing

/// `findmy serve` loads libxml2 and libarchive only when an import needs them (docs/configuration.md,
/// "Memory"): the executable does not link them, a server that has imported nothing maps neither,
/// a GPX import loads libxml2 alone and a KMZ libarchive too. Without them an import fails naming
/// the library, and the server keeps serving and importing the formats that need neither.
@Suite(.serialized) struct ImportLibrariesTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/import")
        .path

    /// `findmy import --json` of one file into a new device of jane's: the exit status and the
    /// file's final status.
    func importOne(_ file: String, data: String) throws -> (status: Int32, result: JSONValue, error: String) {
        let run = try FindmyProcess.run([
            "import", "--json", "--data-dir", data, "--user", "jane", "--new-device", "phone",
            "--retention-days", "36500", file,
        ])
        let line = run.output.split(separator: "\n").first.map(String.init) ?? ""
        return (run.status, (try? JSONParser.parse(line)) ?? .null, run.error)
    }

    /// The server's memory map, read to its end (a /proc file has no size for a whole-file read).
    func maps(_ server: ServerProcess) throws -> String {
        let pid = server.process.process.processIdentifier
        let file = try #require(FileHandle(forReadingAtPath: "/proc/\(pid)/maps"))
        return String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
    }

    @Test func theServerLinksNeitherAndLoadsEachWithTheFirstImportThatNeedsIt() throws {
        let elf = try FindmyProcess.run(["-d", findmyExecutable()], executable: "/usr/bin/readelf")
        #expect(elf.status == 0, "readelf: \(elf.error)")
        let needed = elf.output.split(separator: "\n").filter { $0.contains("(NEEDED)") }
        #expect(!needed.isEmpty, "readelf found no NEEDED entries: \(elf.output)")
        #expect(!needed.contains { $0.contains("libxml2") || $0.contains("libarchive") }, "\(needed)")

        let data = ScratchDirectory("findmy-import-libraries")
        _ = try addUser("jane", data: data.path)
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let before = try maps(server)
        #expect(before.contains("libmicrohttpd"), "the maps were read")
        #expect(!before.contains("libxml2") && !before.contains("libarchive"))

        let gpx = try importOne(Self.fixtures + "/gpx/track-1.1.gpx", data: data.path)
        #expect(gpx.status == 0 && gpx.result["state"] == .string("done"), "\(gpx.result) \(gpx.error)")
        let afterGPX = try maps(server)
        #expect(afterGPX.contains("libxml2") && !afterGPX.contains("libarchive"))

        let kmz = try importOne(Self.fixtures + "/kmz/track.kmz", data: data.path)
        #expect(kmz.status == 0 && kmz.result["state"] == .string("done"), "\(kmz.result) \(kmz.error)")
        #expect(try maps(server).contains("libarchive"))
    }

    @Test func withoutTheLibrariesAnImportFailsNamingOneAndTheServerKeepsRunning() throws {
        let data = ScratchDirectory("findmy-import-no-libraries")
        _ = try addUser("jane", data: data.path)
        // An empty file by each name, found first on LD_LIBRARY_PATH: the dynamic loader refuses it
        // ("file too short") as it would a library that is not there.
        let libraries = data.path + "/lib"
        try FileManager.default.createDirectory(atPath: libraries, withIntermediateDirectories: true)
        for name in ["libxml2.so.2", "libarchive.so.13"] {
            #expect(FileManager.default.createFile(atPath: libraries + "/" + name, contents: Data()))
        }
        let server = try ServerProcess(data: data.path, environment: ["LD_LIBRARY_PATH": libraries])
        defer { server.stop() }

        let gpx = try importOne(Self.fixtures + "/gpx/track-1.1.gpx", data: data.path)
        #expect(gpx.status == 1 && gpx.result["state"] == .string("failed"), "\(gpx.result) \(gpx.error)")
        let gpxError = (try? gpx.result["error"]?.stringValue) ?? ""
        #expect(gpxError.contains("libxml2 could not be loaded"), "\(gpxError)")

        let kmz = try importOne(Self.fixtures + "/kmz/track.kmz", data: data.path)
        #expect(kmz.status == 1 && kmz.result["state"] == .string("failed"), "\(kmz.result) \(kmz.error)")
        let kmzError = (try? kmz.result["error"]?.stringValue) ?? ""
        #expect(kmzError.contains("libarchive could not be loaded"), "\(kmzError)")

        let csv = try importOne(Self.fixtures + "/csv/history.csv", data: data.path)
        #expect(csv.status == 0 && csv.result["state"] == .string("done"), "\(csv.result) \(csv.error)")
        #expect(try HTTPConnection(address: server.address).send("GET", "/healthz").status == 200)
        #expect(server.process.process.isRunning)
    }
}
