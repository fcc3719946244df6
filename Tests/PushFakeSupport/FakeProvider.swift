import Foundation
import JSON
import Threads

/// A fake provider (ops/tests/fake_push.py) as a child process: started with
/// `setpriv --pdeathsig KILL` so it dies with the test process, stopped by `stop()` (and by
/// deinit) even when the test fails. Its stdout lines are collected by a reader thread; tests wait
/// on them with a generous deadline, never a sleep.
public final class FakeProvider: @unchecked Sendable {
    public let directory: String
    public let process = Process()
    let input = Pipe()
    let output = Pipe()
    private let lines = Locked<[String]>([])
    private let arrived = ConditionLock()
    public private(set) var port = 0

    /// `ops/tests/NAME` of this checkout.
    static func script(_ name: String) -> String {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appendingPathComponent("ops/tests/" + name).path
    }

    /// `script`: fake_push.py, or fake_headscale.py (the headscale fake, same conventions).
    public init(_ mode: String, _ arguments: [String] = [], script: String = "fake_push.py") throws {
        directory = NSTemporaryDirectory() + "findmy-fake-\(mode)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        // Debian's python3, which python3-h2 and python3-cryptography are installed for.
        process.arguments =
            ["--pdeathsig", "KILL", "/usr/bin/python3", Self.script(script), mode, "--dir", directory]
            + arguments
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let handle = output.fileHandleForReading
        let lines = self.lines
        let arrived = self.arrived
        _ = spawnThread {
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex...newline)
                    arrived.withLock {
                        lines.withLock { $0.append(line) }
                        arrived.broadcast()
                    }
                }
            }
            arrived.withLock {
                lines.withLock { $0.append("EXIT") }
                arrived.broadcast()
            }
        }
        guard let ready = waitForLine({ $0.hasPrefix("READY ") || $0 == "EXIT" }), ready != "EXIT",
            let port = Int(ready.dropFirst(6))
        else {
            stop()
            throw FakeFailure("the fake \(mode) provider did not start")
        }
        self.port = port
    }

    deinit { stop() }

    public var baseURL: String { "https://127.0.0.1:\(port)" }
    /// The plain-HTTP address of a fake without TLS (fake_headscale.py).
    public var plainURL: String { "http://127.0.0.1:\(port)" }
    public var caFile: String { directory + "/ca.pem" }

    public func stop() {
        if process.isRunning {
            try? input.fileHandleForWriting.close()
            process.terminate()
        }
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The first line (from the start) matching `predicate`, waiting up to `seconds` for it.
    public func waitForLine(seconds: Int64 = 60, _ predicate: (String) -> Bool) -> String? {
        let deadline = monotonicMicros() + seconds * 1_000_000
        return arrived.withLock {
            while true {
                if let line = lines.withLock({ $0.first(where: predicate) }) { return line }
                if !arrived.wait(0, untilMonotonicMicros: deadline) {
                    return lines.withLock { $0.first(where: predicate) }
                }
            }
        }
    }

    public var allLines: [String] { lines.withLock { $0 } }

    /// The requests it accepted, as it printed them.
    public var requests: [JSONObject] {
        allLines.filter { $0.hasPrefix("REQ ") }.compactMap {
            guard case .object(let object)? = try? JSONParser.parse(String($0.dropFirst(4))) else {
                return nil
            }
            return object
        }
    }

    /// The accepted requests matching `predicate`, once at least `count` of them are in: the fake
    /// prints a request before it answers, but our reader may see the line after the answer.
    public func requests(atLeast count: Int = 1, _ predicate: (JSONObject) -> Bool) -> [JSONObject] {
        func matching() -> [JSONObject] { requests.filter(predicate) }
        let deadline = monotonicMicros() + 60_000_000
        return arrived.withLock {
            while matching().count < count {
                if !arrived.wait(0, untilMonotonicMicros: deadline) { break }
            }
            return matching()
        }
    }

    /// Sends a command on stdin and waits for its acknowledgement.
    public func command(_ text: String) throws {
        input.fileHandleForWriting.write(Data((text + "\n").utf8))
        guard waitForLine({ $0 == "OK " + text }) != nil else { throw FakeFailure("no OK for \(text)") }
    }
}

public struct FakeFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
