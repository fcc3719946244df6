import Foundation
import HTTPClient
import Testing

/// `findmy serve` loads libcurl only when a request goes out (docs/configuration.md, "Memory"): a
/// server that has sent nothing maps neither it nor the libraries only it needs, although its ntfy
/// channel (which needs no configuration) has its client.
@Suite struct ServeLibrariesTests {
    @Test func aServerThatSentNothingHasNotLoadedLibcurl() throws {
        let data = ScratchDirectory("findmy-libraries")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let health = try HTTPConnection(address: server.address).send("GET", "/healthz")
        #expect(health.status == 200)
        let pid = server.process.process.processIdentifier
        // Read to its end: a /proc file has no size for a whole-file read to go by.
        let file = try #require(FileHandle(forReadingAtPath: "/proc/\(pid)/maps"))
        let maps = String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
        #expect(maps.contains("libmicrohttpd"), "the maps were read")
        #expect(!maps.contains("libcurl"))
        #expect(!maps.contains("librtmp"))
    }
}
