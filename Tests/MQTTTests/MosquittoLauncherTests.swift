import Foundation
import MosquittoSupport
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

/// A test process killed with SIGKILL takes the broker it started with it: nothing is left for
/// the machine's next tests to trip over.
@Test func aBrokerDiesWithTheTestProcessThatStartedItEvenOnKill9() async throws {
    let pidFile = NSTemporaryDirectory() + "findmy-broker-pids-\(UUID().uuidString.prefix(8))"
    defer { unlink(pidFile) }
    // The child writes "its pid, the broker's pid, its directory" and waits forever; this thread
    // kills it -9.
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
        let broker = try Mosquitto()
        let line = "\(getpid()) \(broker.processID!) \(broker.directory)\n"
        try line.write(toFile: pidFile + ".tmp", atomically: false, encoding: .utf8)
        rename(pidFile + ".tmp", pidFile)
        while true { pause() }
    }
    let text = try String(contentsOfFile: pidFile, encoding: .utf8)
    let fields = text.dropLast().split(separator: " ")
    let broker = try #require(pid_t(fields[1]))
    // The killed child never ran the launcher's deinit: its configuration directory is ours to remove.
    defer { try? FileManager.default.removeItem(atPath: String(fields[2])) }
    let deadline = monotonicMicros() + 30_000_000
    while !processGone(broker) && monotonicMicros() < deadline { usleep(10_000) }
    #expect(processGone(broker), "mosquitto (pid \(broker)) outlived the test process that started it")
    if !processGone(broker) { kill(broker, SIGKILL) }
}
