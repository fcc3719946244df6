import Foundation
import Threads

/// A real three-node Debian `nats-server` cluster with JetStream, on free loopback ports, its
/// configuration and file stores in a scratch directory: for NATSLogTests and the bench.
///
/// No node outlives the test process: each runs as `setpriv --pdeathsig TERM -- nats-server -c
/// FILE` through Threads' `spawnChild`, like Tests/MosquittoSupport's broker, so a test process
/// that dies in any way takes the cluster with it; releasing the cluster kills (SIGKILL) and
/// reaps every node and removes the directory.
public final class NATSCluster: @unchecked Sendable {
    public struct Node: Sendable {
        public var name: String
        public var clientPort: UInt16
        public var routePort: UInt16
    }

    public let directory: String
    /// nats-server's `sync_interval` (`always`: fsync each message before acknowledging it; a
    /// duration such as `2m`), nil for the server's default (docs/scale.md, "What the
    /// acknowledgement promises").
    public let syncInterval: String?
    public private(set) var nodes: [Node] = []
    private var pids: [pid_t?] = []

    /// Starts `count` nodes and returns once every one accepts client connections (JetStream's
    /// leaders are elected after that; `JetStreamLog` waits for them when it opens).
    public init(count: Int = 3, directory: String? = nil, syncInterval: String? = nil) throws {
        self.syncInterval = syncInterval
        clusterName = "findmy-test-\(UUID().uuidString.prefix(8))"
        self.directory = directory ?? NSTemporaryDirectory() + "findmy-nats-\(UUID().uuidString.prefix(8))"
        // Every stored property is set: from here a throw runs deinit, which gives the slot back.
        Self.slots.wait()
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        var lastError = ""
        for _ in 0..<5 {
            var ports: [UInt16] = []
            var sockets: [Int32] = []
            // Holds every port until all are chosen, so that the six are distinct.
            for _ in 0..<(2 * count) {
                let (socket, port) = try Self.reservePort()
                sockets.append(socket)
                ports.append(port)
            }
            for socket in sockets { close(socket) }
            let candidates = (0..<count).map {
                Node(name: "n\($0 + 1)", clientPort: ports[2 * $0], routePort: ports[2 * $0 + 1])
            }
            nodes = candidates
            pids = Array(repeating: nil, count: count)
            do {
                for index in 0..<count { try start(index) }
                return
            } catch {
                lastError = "\(error)"
                stopAll()
            }
        }
        try? FileManager.default.removeItem(atPath: self.directory)
        throw NATSClusterError("the nats-server cluster did not start: \(lastError)")
    }

    deinit {
        stopAll()
        try? FileManager.default.removeItem(atPath: directory)
        Self.slots.signal()
    }

    /// How many clusters one process runs at once (`FINDMY_TEST_NATS_CLUSTERS_MAX`, default 2); a
    /// further one waits, before starting any node, until one is released. Swift Testing runs the
    /// suites in parallel, and a dozen three-node clusters electing leaders at once on two cores
    /// took more than two minutes to form: nodes gave up with "no suitable peers for placement".
    /// A test must not hold two clusters at once while another waits for its second.
    public static let clustersAtOnceMax =
        ProcessInfo.processInfo.environment["FINDMY_TEST_NATS_CLUSTERS_MAX"].flatMap { Int($0) }.map { max(1, $0) }
        ?? 2
    private static let slots = DispatchSemaphore(value: clustersAtOnceMax)
    /// Its own name, so that a node can never join another test's cluster (a route port given again).
    private let clusterName: String

    /// The client URLs of every node, for `JetStreamLogConfiguration.servers`.
    public var urls: [String] { nodes.map { "nats://127.0.0.1:\($0.clientPort)" } }

    /// The cluster as findmy's `--log` takes it: nats://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C.
    public var logArgument: String {
        "nats://" + nodes.map { "127.0.0.1:\($0.clientPort)" }.joined(separator: ",")
    }

    /// The process id of node `index` while it runs.
    public func processID(_ index: Int) -> pid_t? { pids[index] }

    /// SIGKILL and reap node `index` (its file store stays). Idempotent.
    public func kill(_ index: Int) {
        guard let running = pids[index] else { return }
        pids[index] = nil
        Foundation.kill(running, SIGKILL)
        reapChild(running)
    }

    /// Starts node `index` again on its ports with its file store (after `kill`).
    public func restart(_ index: Int) throws {
        kill(index)
        try start(index)
    }

    public func stopAll() {
        for index in pids.indices { kill(index) }
    }

    /// The last lines a node logged, for a failing test's message.
    public func log(_ index: Int) -> String {
        let text =
            (try? String(contentsOfFile: directory + "/\(nodes[index].name).log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(20).joined(separator: "\n")
    }

    private func start(_ index: Int) throws {
        let node = nodes[index]
        let configuration = directory + "/\(node.name).conf"
        let routes = nodes.map { "nats-route://127.0.0.1:\($0.routePort)" }.joined(separator: ", ")
        let text = """
            server_name: \(node.name)
            listen: 127.0.0.1:\(node.clientPort)
            jetstream {
              store_dir: "\(directory)/\(node.name)-store"
              max_memory_store: 64MB
              max_file_store: 1GB\(syncInterval.map { "\n  sync_interval: \($0)" } ?? "")
            }
            cluster {
              name: \(clusterName)
              listen: 127.0.0.1:\(node.routePort)
              routes: [\(routes)]
            }

            """
        try text.write(toFile: configuration, atomically: true, encoding: .utf8)
        let logPath = directory + "/\(node.name).log"
        let pid = try spawnChild(
            [
                setprivPath, "--pdeathsig", "TERM", "--", try Self.executable(), "-c", configuration, "-l",
                logPath,
            ],
            outputPath: directory + "/\(node.name).out")
        pids[index] = pid
        let deadline = Date().addingTimeInterval(30)
        while !Self.canConnect(node.clientPort) {
            guard !childEnded(pid), Date() < deadline else {
                kill(index)
                throw NATSClusterError("nats-server \(node.name) did not come up: \(log(index))")
            }
            usleep(10_000)
        }
    }

    /// The oldest nats-server the tests run on: Debian 12's 2.9.10 lets a stream's replicas store
    /// messages at different sequences after leader changes (docs/scale.md, "Versions"), so a test
    /// on it fails for nats-server's reason, about one combined failure run in twenty.
    public static let versionMinimum = [2, 10]

    public static func executable() throws -> String { try checkedExecutable.get() }

    private static let checkedExecutable = Result { () throws(NATSClusterError) -> String in
        guard
            let path = ["/usr/sbin/nats-server", "/usr/bin/nats-server"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            throw NATSClusterError(
                "nats-server is not installed: run ops/install-deps.sh --test (Debian nats-server)")
        }
        let version = try NATSCluster.version(of: path)
        guard !version.lexicographicallyPrecedes(versionMinimum) else {
            throw NATSClusterError(
                "\(path) is nats-server \(version.map(String.init).joined(separator: ".")), older than "
                    + "\(versionMinimum.map(String.init).joined(separator: ".")): run ops/install-deps.sh --test "
                    + "(it installs Debian 13's nats-server, docs/scale.md \"Versions\")")
        }
        return path
    }

    /// The version `nats-server --version` prints ("nats-server: v2.10.27"), as numbers.
    private static func version(of path: String) throws(NATSClusterError) -> [Int] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["--version"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        do {
            try process.run()
        } catch {
            throw NATSClusterError("cannot run \(path) --version: \(error)")
        }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard let word = text.split(whereSeparator: \.isWhitespace).last, word.hasPrefix("v") else {
            throw NATSClusterError("\(path) --version printed no version: \(text)")
        }
        let numbers = word.dropFirst().split(separator: ".").compactMap { Int($0.prefix { $0.isNumber }) }
        guard numbers.count >= 2 else { throw NATSClusterError("\(path) --version: \(text)") }
        return numbers
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

    /// A bound socket on a free port; closed by the caller once every port is chosen.
    private static func reservePort() throws -> (Int32, UInt16) {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
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
        guard bound else {
            close(socket)
            throw NATSClusterError("no free port: errno \(errno)")
        }
        return (socket, UInt16(bigEndian: address.sin_port))
    }
}

public struct NATSClusterError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
