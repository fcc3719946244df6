import Foundation
import Postgres
import Synchronization
@_exported import TestSupport

/// The `findmy` executable the end-to-end tests start as a real process: `FINDMY_BIN` (set by
/// `make test`), else the one beside this test bundle in the build directory.
func findmyExecutable() -> String {
    if let path = ProcessInfo.processInfo.environment["FINDMY_BIN"], !path.isEmpty { return path }
    let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var directory = bundle.deletingLastPathComponent()
    while directory.path != "/" {
        let candidate = directory.appendingPathComponent("findmy").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory = directory.deletingLastPathComponent()
    }
    fatalError("cannot find the findmy executable: run `swift build` first or set FINDMY_BIN")
}

/// The `findmy-bench` executable (benchmark and load drivers): `FINDMY_BENCH_BIN`, else the one
/// beside `findmyExecutable()`, where every build puts it.
func benchExecutable() -> String {
    if let path = ProcessInfo.processInfo.environment["FINDMY_BENCH_BIN"], !path.isEmpty { return path }
    return URL(fileURLWithPath: findmyExecutable()).deletingLastPathComponent()
        .appendingPathComponent("findmy-bench").path
}

/// A started `findmy` process whose standard output is collected line by line as it arrives.
final class FindmyProcess: @unchecked Sendable {
    let process = Process()
    private let lines = Mutex<[String]>([])
    private let errorText = Mutex<String>("")
    private let outputPipe = Pipe()
    private let errorPipe = Pipe()
    private let finished = DispatchSemaphore(value: 0)
    private let readersDone = DispatchGroup()

    /// `workingDirectory`: the child's, for relative paths in its arguments (the test's own if nil).
    init(
        _ arguments: [String], environment: [String: String] = [:], executable: String = findmyExecutable(),
        workingDirectory: String? = nil
    ) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }
        process.environment = merged
        process.standardOutput = outputPipe
        process.standardError = errorPipe
        process.standardInput = FileHandle.nullDevice
        process.terminationHandler = { [finished] _ in finished.signal() }
        try process.run()
        collect(outputPipe.fileHandleForReading) { [self] text in
            self.lines.withLock { $0.append(contentsOf: text) }
        }
        collect(errorPipe.fileHandleForReading) { [self] text in
            self.errorText.withLock { $0 += text.joined(separator: "\n") + "\n" }
        }
    }

    private func collect(_ handle: FileHandle, _ add: @escaping @Sendable ([String]) -> Void) {
        readersDone.enter()
        Thread { [readersDone] in
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                if let last = pending.lastIndex(of: 0x0A) {
                    let complete = pending[..<last]
                    pending = Data(pending[(last + 1)...])
                    add(String(decoding: complete, as: UTF8.self).components(separatedBy: "\n"))
                }
            }
            if !pending.isEmpty { add([String(decoding: pending, as: UTF8.self)]) }
            readersDone.leave()
        }.start()
    }

    var outputLines: [String] { lines.withLock { $0 } }
    var standardError: String { errorText.withLock { $0 } }

    func kill(_ signal: Int32 = SIGKILL) { Foundation.kill(process.processIdentifier, signal) }

    /// Waits for the process to exit and for its output to be read; returns the exit status.
    @discardableResult
    func wait(timeoutSeconds: Double = 60) -> Int32? {
        guard finished.wait(timeout: .now() + timeoutSeconds) == .success else { return nil }
        _ = readersDone.wait(timeout: .now() + 5)
        return process.terminationStatus
    }

    /// Runs findmy (or `executable`) to completion and returns (status, stdout, stderr).
    static func run(
        _ arguments: [String], environment: [String: String] = [:], timeoutSeconds: Double = 120,
        executable: String = findmyExecutable(), workingDirectory: String? = nil
    ) throws -> (status: Int32, output: String, error: String) {
        let child = try FindmyProcess(
            arguments, environment: environment, executable: executable, workingDirectory: workingDirectory)
        guard let status = child.wait(timeoutSeconds: timeoutSeconds) else {
            child.kill()
            child.wait()
            return (-1, child.outputLines.joined(separator: "\n"), "timed out\n" + child.standardError)
        }
        return (status, child.outputLines.joined(separator: "\n"), child.standardError)
    }
}

/// A fresh directory, removed when released, with its embedded cluster, which may live elsewhere
/// (/var/lib/findmy) and run as an OS user made for it (removed too).
final class ScratchDirectory: @unchecked Sendable {
    let path: String

    init(_ label: String = "findmy-e2e") {
        path = NSTemporaryDirectory() + "/\(label)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        // Data directories of the test: this one and those made inside it (a restore target).
        let inside = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for data in [path] + inside.map({ path + "/" + $0 })
        where FileManager.default.fileExists(atPath: data + "/postgres") {
            if let cluster = try? EmbeddedPostgres(dataDirectory: data) { try? cluster.destroy() }
        }
        try? FileManager.default.removeItem(atPath: path)
    }
}
