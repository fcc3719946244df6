import CLI
import HTTPClient
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// The `findmy` the drivers start and call: `FINDMY_BIN`, else the one beside this executable
/// (every build puts `findmy` and `findmy-bench` in the same bin path).
func findmyExecutable() throws -> String {
    if let raw = getenv("FINDMY_BIN"), raw.pointee != 0 { return String(cString: raw) }
    let path = executableDirectory() + "/findmy"
    guard access(path, X_OK) == 0 else {
        throw UsageError(
            "cannot find findmy at \(path); build it beside findmy-bench (`swift build -c release`) or set "
                + "FINDMY_BIN")
    }
    return path
}

func executableDirectory() -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard count > 0 else { return "." }
    let path = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
}

/// A user made with `findmy user add NAME --json` on a data directory no server holds: the
/// drivers make their users the way an operator would.
func addUser(_ dataDirectory: String, name: String) throws -> (userID: UInt64, token: String) {
    let output = try runCapturing(
        try findmyExecutable(), ["findmy", "user", "add", name, "--json", "--data-dir", dataDirectory])
    guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("{") }) else {
        throw UsageError("findmy user add printed no JSON: \(output)")
    }
    let created = try JSONParser.parse(Array(line.utf8))
    return (UInt64(try created["user_id"]!.int64Value), try created["token"]!.stringValue)
}

/// `count` devices of the user (UUIDs ...0001, ...0002, ...), enrolled through `address`; their
/// device tokens.
func enrolDevices(_ count: Int, address: String, userToken: String) throws -> [String] {
    let connection = HTTPConnection(address: address)
    defer { connection.close() }
    return try (0..<count).map { index in
        let body =
            "{\"device_uuid\": \"00000000-0000-4000-8000-\(String(index + 1).leftPadded(12))\", \"name\": \"bench \(index)\", \"platform\": \"linux\"}"
        let response = try connection.send(
            "POST", "/api/find-my/devices", headers: [("Authorization", "Bearer \(userToken)")],
            body: Array(body.utf8))
        guard response.status == 201 else {
            throw UsageError("enrolment through \(address) failed: \(response.bodyText)")
        }
        return try JSONParser.parse(response.body)["device_token"]!.stringValue
    }
}

/// Starts `executable` with its standard output on a pipe, whose reading end is returned, and its
/// standard error in `standardErrorPath` if given (else ours); `environment` is added to ours.
func spawn(
    _ executable: String, _ arguments: [String], environment: [String] = [], standardErrorPath: String? = nil
) throws -> (pid: pid_t, output: Int32) {
    var pipeFDs: [Int32] = [0, 0]
    guard pipe(&pipeFDs) == 0 else { throw UsageError("pipe failed") }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
    posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
    if let standardErrorPath {
        posix_spawn_file_actions_addopen(&actions, 2, standardErrorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    }
    var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var inherited: [String] = []
    var entry = environ
    while let pointer = entry.pointee {
        inherited.append(String(cString: pointer))
        entry += 1
    }
    var envp: [UnsafeMutablePointer<CChar>?] = (inherited + environment).map { strdup($0) } + [nil]
    defer { for pointer in envp { free(pointer) } }
    var child: pid_t = 0
    let status = posix_spawn(&child, executable, &actions, nil, &argv, &envp)
    close(pipeFDs[1])
    guard status == 0 else {
        close(pipeFDs[0])
        throw UsageError("cannot start \(executable): \(String(cString: strerror(status)))")
    }
    return (child, pipeFDs[0])
}

/// Runs `executable` to its end and returns its standard output; its standard error goes to ours.
func runCapturing(_ executable: String, _ arguments: [String], environment: [String] = []) throws -> String {
    let child = try spawn(executable, arguments, environment: environment)
    let output = readToEnd(child.output)
    var exitStatus: Int32 = 0
    waitpid(child.pid, &exitStatus, 0)
    guard exitStatus == 0 else {
        throw UsageError(
            "\(arguments.first ?? executable) failed (status \(exitStatus)):\n"
                + String(decoding: output, as: UTF8.self))
    }
    return String(decoding: output, as: UTF8.self)
}

/// `findmy serve` started by a driver, its URL read from its first line of output.
final class ChildServer {
    let pid: pid_t
    let address: String

    /// `projector: false` measures ingest alone: a projector and its database would take CPU from
    /// the path being measured. The read bench needs both.
    /// `listen`: the address to listen on; a port of the kernel's choice unless a driver starts
    /// the server again where its clients know it.
    init(
        dataDirectory: String, logPath: String, projector: Bool = false, listen: String = "127.0.0.1:0",
        arguments more: [String] = []
    ) throws {
        let arguments =
            [
                "findmy", "serve", "--data-dir", dataDirectory, "--listen", listen, "--projector",
                projector ? "on" : "off",
            ] + more
        let child = try spawn(try findmyExecutable(), arguments, standardErrorPath: logPath)
        pid = child.pid
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while read(child.output, &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
        close(child.output)
        let url = String(decoding: line, as: UTF8.self)
        guard url.hasPrefix("http://") else { throw UsageError("findmy serve did not start; see \(logPath)") }
        address = String(url.dropFirst("http://".count))
    }

    /// VmHWM of the child: its peak resident set so far.
    func peakResidentBytes() -> Int64 { statusBytes("VmHWM:") }

    /// VmRSS of the child: its resident set now.
    func residentBytes() -> Int64 { statusBytes("VmRSS:") }

    private func statusBytes(_ field: String) -> Int64 { processStatusBytes(pid, field) }

    func metric(_ name: String, _ connection: HTTPConnection) throws -> Double {
        let text = try connection.send("GET", "/metrics").bodyText
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.split(separator: " ").last ?? "") ?? 0
        }
        return 0
    }

    func stop() {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }
}

/// A line of /proc/PID/status given in kB (`VmRSS:`, `VmHWM:`), in bytes; -1 when it cannot be read.
func processStatusBytes(_ pid: pid_t, _ field: String) -> Int64 {
    guard let file = fopen("/proc/\(pid)/status", "r") else { return -1 }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 256)
    while fgets(&buffer, 256, file) != nil {
        let line = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if line.hasPrefix(field) {
            let kilobytes = line.split(separator: " ").compactMap { Int64($0) }.first ?? -1
            return kilobytes * 1024
        }
    }
    return -1
}

/// When a driver runs as root the embedded cluster runs as an unprivileged user, who must be able
/// to pass through `directory` to reach its cluster (findmy's own commands do the same).
func allowTraversal(_ directory: String) {
    var info = stat()
    if getuid() == 0, stat(directory, &info) == 0 { chmod(directory, (info.st_mode & 0o7777) | S_IXOTH) }
}

/// Everything a child writes to the pipe `descriptor` until it closes it; then closes our end.
func readToEnd(_ descriptor: Int32) -> [UInt8] {
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = read(descriptor, &buffer, buffer.count)
        if count <= 0 { break }
        output += buffer.prefix(count)
    }
    close(descriptor)
    return output
}
