import Foundation

/// A real Debian `mosquitto` on a free loopback port, its configuration in a temporary directory,
/// stopped (SIGKILL, then reaped) when released or by `kill`, so that a failing test leaves no
/// broker behind. (MQTTTests has the same helper without logins: test targets cannot share code.)
final class Mosquitto: @unchecked Sendable {
    let port: UInt16
    let directory: String
    private var process: Process?

    private let access: String

    /// Sessions kept in memory for as long as the broker runs. Without `logins`, anonymous clients
    /// may do anything; with them, only those logins may connect, under the ACL `acl`.
    init(port: UInt16? = nil, logins: [String: String] = [:], acl: String = "") throws {
        directory = NSTemporaryDirectory() + "/findmy-mosquitto-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if logins.isEmpty {
            access = "allow_anonymous true\n"
        } else {
            for (index, (user, password)) in logins.sorted(by: { $0.key < $1.key }).enumerated() {
                try Self.run(
                    "mosquitto_passwd",
                    (index == 0 ? ["-c"] : []) + ["-b", directory + "/passwd", user, password])
            }
            try acl.write(toFile: directory + "/acl", atomically: true, encoding: .utf8)
            access =
                "allow_anonymous false\npassword_file \(directory)/passwd\nacl_file \(directory)/acl\n"
        }
        var lastError = ""
        for _ in 0..<5 {
            let candidate = try port ?? Self.freePort()
            do {
                process = try Self.launch(directory: directory, port: candidate, access: access)
                self.port = candidate
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

    /// SIGKILL and reap. Idempotent.
    func kill() {
        guard let running = process else { return }
        process = nil
        if running.isRunning { Foundation.kill(running.processIdentifier, SIGKILL) }
        running.waitUntilExit()
    }

    /// Starts the broker again on the same port (after `kill`), with empty sessions.
    func restart() throws {
        kill()
        process = try Self.launch(directory: directory, port: port, access: access)
    }

    /// Publishes one message with Debian's `mosquitto_pub`, which returns once the broker has
    /// acknowledged it (QoS 1).
    func publish(topic: String, _ message: String, qos: Int = 1, login: (String, String)? = nil) throws {
        var arguments = [
            "-h", "127.0.0.1", "-p", String(port), "-q", String(qos), "-t", topic, "-m", message,
        ]
        if let (user, password) = login { arguments += ["-u", user, "-P", password] }
        try Self.run("mosquitto_pub", arguments)
    }

    private static func run(_ name: String, _ arguments: [String]) throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: try executable(name))
        child.arguments = arguments
        let errors = Pipe()
        child.standardError = errors
        child.standardOutput = FileHandle.nullDevice
        try child.run()
        child.waitUntilExit()
        guard child.terminationStatus == 0 else {
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw BrokerError("\(name) exited with \(child.terminationStatus): \(text)")
        }
    }

    private static func launch(directory: String, port: UInt16, access: String) throws -> Process {
        let configuration = directory + "/mosquitto.conf"
        try """
        listener \(port) 127.0.0.1
        \(access)persistence false
        user \(NSUserName())
        log_dest stderr
        log_type error
        log_type warning

        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try executable("mosquitto"))
        process.arguments = ["-c", configuration]
        _ = FileManager.default.createFile(atPath: directory + "/mosquitto.log", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/mosquitto.log"))
        try log.seekToEnd()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        // Ready once it accepts a connection; an exit (the port taken meanwhile) is a failure.
        let deadline = Date().addingTimeInterval(30)
        while !canConnect(port) {
            guard process.isRunning, Date() < deadline else {
                if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
                process.waitUntilExit()
                let text = (try? String(contentsOfFile: directory + "/mosquitto.log", encoding: .utf8)) ?? ""
                throw BrokerError("mosquitto on port \(port) did not come up: \(text)")
            }
            usleep(10_000)
        }
        return process
    }

    static func executable(_ name: String) throws -> String {
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

struct BrokerError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
