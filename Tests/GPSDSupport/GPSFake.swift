import Foundation
import Threads

/// A real Debian `gpsd` fed by `gpsfake` (gpsd-clients) from an NMEA file, on a free loopback
/// port: the one launcher of the agent's tests (AgentTests) and its end-to-end tests.
///
/// gpsfake starts its own gpsd (`-n`: reading the fake receiver at once, not when the first client
/// watches, since gpsd flushes the pseudo-terminal as it opens it and would drop what was written
/// before) and writes one sentence every `sentenceSeconds`. gpsfake runs under `setpriv --pdeathsig
/// TERM` (Threads' `spawnChild`), so a test process that dies takes it with it, and gpsfake's gpsd
/// with it (gpsfake stops its daemon on SIGTERM). `stop` kills the process group, gpsd included.
public final class GPSFake: @unchecked Sendable {
    /// gpsd's port on 127.0.0.1.
    public let port: UInt16
    public let logPath: String
    private var pid: pid_t?

    /// Starts gpsfake on `track` (a path) and returns once gpsd accepts connections. `once`: the
    /// track is played a single time (`-1`), after which gpsfake stops and gpsd with it; otherwise
    /// it starts again from the top whenever it ends.
    public init(track: String, once: Bool, sentenceSeconds: Double = 0.05, port: UInt16? = nil) throws {
        logPath = NSTemporaryDirectory() + "findmy-gpsfake-\(UUID().uuidString.prefix(8)).log"
        let gpsfake = try Self.executable("gpsfake")
        var lastError = ""
        for _ in 0..<5 {
            let candidate = try port ?? Self.freePort()
            let arguments =
                [setprivPath, "--pdeathsig", "TERM", "--", gpsfake, "-n", "-q"] + (once ? ["-1"] : [])
                + ["-c", String(sentenceSeconds), "-P", String(candidate), track]
            let started = try spawnChild(arguments, outputPath: logPath)
            if Self.waitForListener(port: candidate, pid: started) {
                pid = started
                self.port = candidate
                return
            }
            Foundation.kill(-started, SIGKILL)
            reapChild(started)
            lastError = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            if port != nil { break }
        }
        throw GPSFakeError("gpsfake did not start gpsd: \(lastError)")
    }

    deinit { stop() }

    /// Whether gpsfake still runs (false once a `once` track has ended and it stopped).
    public var isRunning: Bool {
        guard let running = pid else { return false }
        if childEnded(running) {
            pid = nil
            return false
        }
        return true
    }

    /// Kills gpsfake and its gpsd (their process group) and reaps gpsfake. Idempotent.
    public func stop() {
        guard let running = pid else { return }
        pid = nil
        Foundation.kill(-running, SIGKILL)
        reapChild(running)
        // gpsd is gpsfake's child, not ours: it is gone once nothing listens on its port any more.
        _ = Self.waitUntil(seconds: 30) { !Self.canConnect(self.port) }
    }

    /// What gpsfake and its gpsd wrote.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    private static func waitForListener(port: UInt16, pid: pid_t) -> Bool {
        waitUntil(seconds: 30) { canConnect(port) || childEnded(pid) } && canConnect(port)
    }

    private static func waitUntil(seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            if Date() > deadline { return false }
            usleep(10_000)
        }
        return true
    }

    public static func executable(_ name: String) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin"] {
            let candidate = directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw GPSFakeError("\(name) is not installed: run ops/install-deps.sh --test (gpsd, gpsd-clients)")
    }

    static func canConnect(_ port: UInt16) -> Bool {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A port nothing listens on now (the kernel's choice for port 0).
    public static func freePort() throws -> UInt16 {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        guard bound else { throw GPSFakeError("no free port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }
}

public struct GPSFakeError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
