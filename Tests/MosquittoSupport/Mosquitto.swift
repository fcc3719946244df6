import Foundation
import Threads

/// A real Debian `mosquitto` on a free loopback port, its configuration in a temporary directory,
/// for the tests of MQTTTests and EndToEndTests (the one launcher both use).
///
/// The broker never outlives the test process: it is started as `setpriv --pdeathsig TERM --
/// mosquitto -c FILE` through Threads' `spawnChild` (the way findmy starts its embedded
/// PostgreSQL), so a test process that dies in any way, `kill -9` included, takes its brokers
/// with it. A broker released or `kill`ed is stopped with SIGKILL and reaped at once.
public final class Mosquitto: @unchecked Sendable {
    /// A second listener speaking TLS with this certificate chain and key (PEM files).
    public struct TLSListener: Sendable {
        public var certificateFile: String
        public var keyFile: String
        public init(certificateFile: String, keyFile: String) {
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    /// The plain listener (127.0.0.1).
    public let port: UInt16
    /// The TLS listener's port (127.0.0.1), when the broker has one.
    public let tlsPort: UInt16?
    public let directory: String
    private let access: String
    private let tls: TLSListener?
    private var pid: pid_t?

    /// Sessions kept in memory for as long as the broker runs. Without `logins`, anonymous clients
    /// may do anything; with them, only those logins may connect, under the ACL `acl`.
    public init(
        port: UInt16? = nil, logins: [String: String] = [:], acl: String = "", tls: TLSListener? = nil
    ) throws {
        directory = NSTemporaryDirectory() + "findmy-mosquitto-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.tls = tls
        if logins.isEmpty {
            access = "allow_anonymous true\n"
        } else {
            for (index, (user, password)) in logins.sorted(by: { $0.key < $1.key }).enumerated() {
                try Self.run(
                    "mosquitto_passwd",
                    (index == 0 ? ["-c"] : []) + ["-b", directory + "/passwd", user, password])
            }
            try acl.write(toFile: directory + "/acl", atomically: true, encoding: .utf8)
            access = "allow_anonymous false\npassword_file \(directory)/passwd\nacl_file \(directory)/acl\n"
        }
        var lastError = ""
        for _ in 0..<5 {
            let candidate = try port ?? Self.freePort()
            let tlsCandidate = try tls.map { _ in try Self.freePort() }
            do {
                pid = try Self.launch(
                    directory: directory, port: candidate, tlsPort: tlsCandidate, tls: tls, access: access)
                self.port = candidate
                self.tlsPort = tlsCandidate
                return
            } catch {
                lastError = "\(error)"
                if port != nil { break }
            }
        }
        try? FileManager.default.removeItem(atPath: directory)
        throw BrokerError("mosquitto did not start: \(lastError)")
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The broker's process id while it runs.
    public var processID: pid_t? { pid }

    /// SIGKILL and reap. Idempotent.
    public func kill() {
        guard let running = pid else { return }
        pid = nil
        Foundation.kill(running, SIGKILL)
        reapChild(running)
    }

    /// Starts the broker again on the same ports (after `kill`), with empty sessions.
    public func restart() throws {
        kill()
        pid = try Self.launch(directory: directory, port: port, tlsPort: tlsPort, tls: tls, access: access)
    }

    /// Publishes one message on the plain listener with Debian's `mosquitto_pub`, which returns
    /// once the broker has acknowledged it (QoS 1).
    public func publish(topic: String, _ message: String, qos: Int = 1, login: (String, String)? = nil) throws
    {
        var arguments = [
            "-h", "127.0.0.1", "-p", String(port), "-q", String(qos), "-t", topic, "-m", message,
        ]
        if let (user, password) = login { arguments += ["-u", user, "-P", password] }
        try Self.run("mosquitto_pub", arguments)
    }

    /// Publishes the bytes of `file` as one message (`mosquitto_pub -f`): a message larger than a
    /// command line may hold.
    public func publish(topic: String, file: String, qos: Int = 1) throws {
        try Self.run(
            "mosquitto_pub",
            ["-h", "127.0.0.1", "-p", String(port), "-q", String(qos), "-t", topic, "-f", file])
    }

    /// Starts Debian's `mosquitto_sub` on `topic` at QoS 1 (the plain listener), and returns once
    /// the broker granted its subscription; it exits after `count` messages.
    public func subscribe(topic: String, count: Int) throws -> Subscriber {
        let output = directory + "/sub-\(UUID().uuidString.prefix(8)).out"
        let arguments = [
            "-h", "127.0.0.1", "-p", String(port), "-q", "1", "-t", topic, "-C", String(count), "-d",
            "-F", "message %t %p",
        ]
        let subscriber = Subscriber(
            pid: try spawnChild(
                // Line-buffered (stdbuf): its output is a file, which would hold "received SUBACK" back.
                [setprivPath, "--pdeathsig", "TERM", "--", try Self.executable("stdbuf"), "-oL"]
                    + [try Self.executable("mosquitto_sub")] + arguments,
                outputPath: output),
            output: output)
        let deadline = Date().addingTimeInterval(30)
        while !subscriber.text.contains("received SUBACK") {
            guard Date() < deadline, !subscriber.ended else {
                throw BrokerError("mosquitto_sub did not subscribe: \(subscriber.text)")
            }
            usleep(10_000)
        }
        return subscriber
    }

    /// A running `mosquitto_sub`; stopped (SIGKILL, reaped) when released.
    public final class Subscriber: @unchecked Sendable {
        private var pid: pid_t?
        private let output: String

        init(pid: pid_t, output: String) {
            self.pid = pid
            self.output = output
        }

        deinit {
            if let pid {
                Foundation.kill(pid, SIGKILL)
                reapChild(pid)
            }
        }

        var text: String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }

        var ended: Bool {
            guard let running = pid else { return true }
            if childEnded(running) { pid = nil }
            return pid == nil
        }

        /// The messages received so far, as `TOPIC PAYLOAD`.
        public var messages: [String] {
            text.split(separator: "\n").filter { $0.hasPrefix("message ") }.map { String($0.dropFirst(8)) }
        }
    }

    private static func launch(
        directory: String, port: UInt16, tlsPort: UInt16?, tls: TLSListener?, access: String
    ) throws -> pid_t {
        let configuration = directory + "/mosquitto.conf"
        var text = """
            listener \(port) 127.0.0.1
            \(access)persistence false
            user \(NSUserName())
            log_dest stderr
            log_type error
            log_type warning

            """
        if let tlsPort, let tls {
            text += "listener \(tlsPort) 127.0.0.1\ncertfile \(tls.certificateFile)\nkeyfile \(tls.keyFile)\n"
        }
        try text.write(toFile: configuration, atomically: true, encoding: .utf8)
        let log = directory + "/mosquitto.log"
        let pid = try spawnChild(
            [setprivPath, "--pdeathsig", "TERM", "--", try executable("mosquitto"), "-c", configuration],
            outputPath: log)
        // Ready once it accepts connections; an exit (a port taken meanwhile) is a failure.
        let deadline = Date().addingTimeInterval(30)
        while !canConnect(port) || !(tlsPort.map(canConnect) ?? true) {
            guard !childEnded(pid), Date() < deadline else {
                Foundation.kill(pid, SIGKILL)
                reapChild(pid)
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                throw BrokerError("mosquitto on port \(port) did not come up: \(text)")
            }
            usleep(10_000)
        }
        return pid
    }

    /// Runs a mosquitto tool to its end (under the same parent-death signal as the broker).
    private static func run(_ name: String, _ arguments: [String]) throws {
        let output = NSTemporaryDirectory() + "findmy-mosquitto-tool-\(UUID().uuidString.prefix(8))"
        defer { unlink(output) }
        let pid = try spawnChild(
            [setprivPath, "--pdeathsig", "TERM", "--", try executable(name)] + arguments, outputPath: output)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        guard status == 0 else {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            throw BrokerError("\(name) ended with wait status \(status): \(text)")
        }
    }

    public static func executable(_ name: String) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin"] {
            let candidate = directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw BrokerError("\(name) is not installed: run ops/install-deps.sh --test (Debian mosquitto)")
    }

    private static func canConnect(_ port: UInt16) -> Bool {
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

    private static func freePort() throws -> UInt16 {
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
        guard bound else { throw BrokerError("no free port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }
}

public struct BrokerError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
