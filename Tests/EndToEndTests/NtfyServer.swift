import Foundation
import HTTPClient
import JSON
import Threads

/// A real Debian `ntfy serve` on a free loopback port, with its own empty configuration and message
/// cache in a temporary directory (never /etc/ntfy). Started under `setpriv --pdeathsig TERM`
/// through Threads' `spawnChild`, so a test process that dies in any way takes it along; `stop()`
/// (SIGKILL, reaped) and the deinit end it otherwise.
final class NtfyServer: @unchecked Sendable {
    let port: UInt16
    let directory: String
    private var pid: pid_t?

    init() throws {
        directory = NSTemporaryDirectory() + "findmy-ntfy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try "".write(toFile: directory + "/server.yml", atomically: true, encoding: .utf8)
        var lastError = ""
        // A free port may be taken by someone else before ntfy binds it: a few candidates.
        for _ in 0..<5 {
            let candidate = try Self.freePort()
            do {
                pid = try Self.launch(directory: directory, port: candidate)
                port = candidate
                return
            } catch {
                lastError = "\(error)"
            }
        }
        try? FileManager.default.removeItem(atPath: directory)
        throw TestFailure("ntfy serve did not start: \(lastError)")
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// SIGKILL and reap. Idempotent.
    func stop() {
        guard let running = pid else { return }
        pid = nil
        kill(running, SIGKILL)
        reapChild(running)
    }

    /// The messages ntfy holds for `topic`, oldest first, as its subscribe API gives them
    /// (`GET /TOPIC/json?poll=1`: one JSON object per line).
    func messages(topic: String) throws -> [JSONValue] {
        let response = try HTTPConnection(address: "127.0.0.1:\(port)").send(
            "GET", "/\(topic)/json?poll=1", headers: [], body: [])
        guard response.status == 200 else { throw TestFailure("ntfy poll answered \(response.status)") }
        return try String(decoding: response.body, as: UTF8.self).split(separator: "\n").map {
            try JSONParser.parse(Array($0.utf8))
        }.filter { (try? $0["event"]?.stringValue) == "message" }
    }

    private static func launch(directory: String, port: UInt16) throws -> pid_t {
        let log = directory + "/ntfy.log"
        let pid = try spawnChild(
            [
                setprivPath, "--pdeathsig", "TERM", "--", try executable("ntfy"), "serve",
                "--config", directory + "/server.yml", "--listen-http", "127.0.0.1:\(port)",
                "--cache-file", directory + "/cache.db", "--base-url", "http://127.0.0.1:\(port)",
            ], outputPath: log)
        // Ready once its health endpoint answers; an exit (the port taken meanwhile) is a failure.
        let health = HTTPConnection(address: "127.0.0.1:\(port)")
        let deadline = Date().addingTimeInterval(30)
        while (try? health.send("GET", "/v1/health", headers: [], body: []).status) != 200 {
            guard !childEnded(pid), Date() < deadline else {
                kill(pid, SIGKILL)
                reapChild(pid)
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                throw TestFailure("ntfy on port \(port) did not come up: \(text)")
            }
            usleep(10_000)
        }
        return pid
    }

    static func executable(_ name: String) throws -> String {
        for directory in ["/usr/bin", "/usr/local/bin"] {
            let candidate = directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw TestFailure("\(name) is not installed: run ops/install-deps.sh --test (Debian 13's ntfy)")
    }

    private static func freePort() throws -> UInt16 {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        guard bound else { throw TestFailure("no free port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }
}
