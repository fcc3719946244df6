import Foundation
import NATSSupport
import Testing
import Threads

/// Whether `pid` is gone: no such process, or a zombie nobody reaped yet (a container's init may
/// never reap an orphan; a zombie holds no port and runs nothing).
private func processGone(_ pid: pid_t) -> Bool {
    guard kill(pid, 0) == 0 else { return errno == ESRCH }
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return true }
    return stat[stat.index(close, offsetBy: 2)] == "Z"
}

/// A test process killed with SIGKILL takes its three nats-server nodes with it.
@Test func aClusterDiesWithTheTestProcessThatStartedItEvenOnKill9() async throws {
    let pidFile = NSTemporaryDirectory() + "findmy-nats-pids-\(UUID().uuidString.prefix(8))"
    defer { unlink(pidFile) }
    let killer = spawnThread { [pidFile] in
        let deadline = monotonicMicros() + 60_000_000
        while monotonicMicros() < deadline {
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8), text.hasSuffix("\n"),
                let child = pid_t(text.split(separator: " ")[0])
            {
                kill(child, SIGKILL)
                return
            }
            usleep(10_000)
        }
    }
    defer { pthread_join(killer, nil) }
    await #expect(processExitsWith: .signal(SIGKILL)) { [pidFile = pidFile as String] in
        let cluster = try NATSCluster()
        let nodes = (0..<3).map { "\(cluster.processID($0)!)" }.joined(separator: " ")
        let line = "\(getpid()) \(cluster.directory) \(nodes)\n"
        try line.write(toFile: pidFile + ".tmp", atomically: false, encoding: .utf8)
        rename(pidFile + ".tmp", pidFile)
        while true { pause() }
    }
    let fields = try String(contentsOfFile: pidFile, encoding: .utf8).dropLast().split(separator: " ")
    // The killed child never ran the cluster's deinit: its directory is ours to remove.
    defer { try? FileManager.default.removeItem(atPath: String(fields[1])) }
    let nodes = fields.dropFirst(2).compactMap { pid_t($0) }
    #expect(nodes.count == 3)
    let deadline = monotonicMicros() + 30_000_000
    while !nodes.allSatisfy(processGone) && monotonicMicros() < deadline { usleep(10_000) }
    for node in nodes {
        #expect(processGone(node), "nats-server (pid \(node)) outlived the test process that started it")
        if !processGone(node) { kill(node, SIGKILL) }
    }
}
