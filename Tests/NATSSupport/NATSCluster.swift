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
        /// nats-server's monitoring endpoint (/healthz, /jsz), for knowing when the cluster formed.
        public var monitorPort: UInt16
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
            // Holds every port until all are chosen, so that they are distinct.
            for _ in 0..<(3 * count) {
                let (socket, port) = try Self.reservePort()
                sockets.append(socket)
                ports.append(port)
            }
            for socket in sockets { close(socket) }
            let candidates = (0..<count).map {
                Node(
                    name: "n\($0 + 1)", clientPort: ports[3 * $0], routePort: ports[3 * $0 + 1],
                    monitorPort: ports[3 * $0 + 2])
            }
            nodes = candidates
            pids = Array(repeating: nil, count: count)
            do {
                for index in 0..<count { try start(index) }
                try waitUntilFormed()
                return
            } catch {
                lastError = "\(error)"
                stopAll()
                // A new try starts from empty stores: a half-formed cluster's peers must not linger.
                for node in candidates {
                    try? FileManager.default.removeItem(atPath: self.directory + "/\(node.name)-store")
                }
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
        ProcessInfo.processInfo.environment["FINDMY_TEST_NATS_CLUSTERS_MAX"].flatMap { Int($0) }.map {
            max(1, $0)
        }
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

    /// Waits until every node is back and the cluster can place replicas again (after `restart`s):
    /// a read or an append right after a restart otherwise races the election it causes.
    public func waitUntilWhole() throws { try waitUntilFormed() }

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
            http: 127.0.0.1:\(node.monitorPort)
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

    /// Waits until the cluster can place a stream of `count` replicas: every node runs and says
    /// it is healthy, all agree on one JetStream meta leader, and that leader counts every other
    /// node as a current peer. A node can come up and still never join: its route port taken
    /// between reservation and bind, or its client port answered by somebody else's listener.
    /// Opening a stream on such a cluster fails after minutes with "no suitable peers for
    /// placement"; here it fails fast, and the caller starts a new cluster on new ports.
    private func waitUntilFormed() throws {
        let deadline = Date().addingTimeInterval(90)
        var last = "nothing asked yet"
        while Date() < deadline {
            if let ended = pids.indices.first(where: { pids[$0].map(childEnded) ?? true }) {
                throw NATSClusterError("nats-server \(nodes[ended].name) ended: \(log(ended))")
            }
            switch formation() {
            case .formed: return
            case .notYet(let why): last = why
            }
            usleep(50_000)
        }
        throw NATSClusterError("the cluster did not form in 90 s: \(last)")
    }

    private enum Formation {
        case formed
        case notYet(String)
    }

    private func formation() -> Formation {
        var leaders: Set<String> = []
        var replicasSeen: [String: [[String: Any]]] = [:]
        for node in nodes {
            guard let health = Self.get(port: node.monitorPort, path: "/healthz"),
                health["status"] as? String == "ok"
            else { return .notYet("\(node.name) is not healthy yet") }
            guard let jsz = Self.get(port: node.monitorPort, path: "/jsz"),
                let meta = jsz["meta_cluster"] as? [String: Any],
                let leader = meta["leader"] as? String, !leader.isEmpty
            else { return .notYet("\(node.name) knows no meta leader yet") }
            guard (meta["cluster_size"] as? Int) == nodes.count else {
                return .notYet("\(node.name) counts \(meta["cluster_size"] ?? "no") nodes")
            }
            leaders.insert(leader)
            if let replicas = meta["replicas"] as? [[String: Any]] { replicasSeen[node.name] = replicas }
        }
        guard leaders.count == 1, let leader = leaders.first else {
            return .notYet("the nodes name different leaders: \(leaders.sorted())")
        }
        guard let replicas = replicasSeen[leader] else { return .notYet("\(leader) lists no peers yet") }
        let current = replicas.filter { ($0["current"] as? Bool) == true && ($0["offline"] as? Bool) != true }
        guard current.count == nodes.count - 1 else {
            return .notYet("\(leader) counts \(current.count) current peers of \(nodes.count - 1)")
        }
        return .formed
    }

    /// A monitoring endpoint's JSON answer, nil when it does not answer (yet) or answers otherwise.
    private static func get(port: UInt16, path: String) -> [String: Any]? {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return nil }
        defer { close(socket) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else { return nil }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(socket, $0.baseAddress, $0.count, 0) }) == request.count else {
            return nil
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            answer.append(contentsOf: buffer[0..<count])
        }
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let start = answer.indices.first(where: { answer[$0...].starts(with: separator) }) else {
            return nil
        }
        let body = Data(answer[(start + separator.count)...])
        return (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
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
