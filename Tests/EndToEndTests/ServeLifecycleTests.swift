import Foundation
import HTTPClient
import Postgres
import Testing

/// A TCP listener on a loopback port of its own; the port stays taken until it is released.
private final class TakenPort {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw TestFailure("cannot take a loopback port: errno \(errno)")
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(fd) }
}

/// `findmy serve`'s services start in order and stop in reverse on every path out: here, an API
/// port already taken after PostgreSQL, the projector, the compactor and the admin socket started.
@Suite(.serialized) struct ServeLifecycleTests {
    @Test func aPortInUseStopsEveryServiceStartedBeforeIt() throws {
        let scratch = ScratchDirectory()
        let data = scratch.path + "/data"
        let taken = try TakenPort()
        let failed = try FindmyProcess.run([
            "serve", "--data-dir", data, "--listen", "127.0.0.1:\(taken.port)",
        ])
        #expect(failed.status != 0)
        #expect(failed.output.isEmpty, "no URL is printed by a server that does not serve")
        #expect(failed.error.contains("127.0.0.1:\(taken.port)"), "\(failed.error)")

        // PostgreSQL was started (its cluster exists) and stopped again: no postmaster is left.
        let cluster = try EmbeddedPostgres(dataDirectory: data)
        #expect(FileManager.default.fileExists(atPath: cluster.pgData + "/PG_VERSION"))
        #expect(cluster.postmasterPID() == nil, "PostgreSQL still runs after a failed start")
        #expect(!FileManager.default.fileExists(atPath: cluster.pgData + "/postmaster.pid"))
        // The admin socket started and was closed; the log's lock is free for the next server.
        #expect(!FileManager.default.fileExists(atPath: data + "/admin.sock"))

        let server = try ServerProcess(data: data, extraArguments: ["--projector", "on"])
        let health = HTTPConnection(address: server.address)
        #expect(try health.send("GET", "/healthz").status == 200)
        #expect(server.stop() == 0)
        #expect(cluster.postmasterPID() == nil, "PostgreSQL still runs after SIGTERM")
        #expect(!FileManager.default.fileExists(atPath: data + "/admin.sock"))
    }
}
