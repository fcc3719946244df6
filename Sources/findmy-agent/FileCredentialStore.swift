// The agent's CredentialStore: `credentials.json` in the state directory, mode 0600 (it holds the
// device token, which lets anyone report as this device), written whole and renamed into place.
import FindMyClient

#if canImport(Glibc)
    import Glibc
#endif

struct FileCredentialStore: CredentialStore {
    let path: String

    init(stateDirectory: String) {
        path = stateDirectory + "/credentials.json"
    }

    func load() throws -> DeviceCredentials? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw AgentError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        // Someone else reading it could report as this device.
        if info.st_mode & 0o077 != 0 {
            throw AgentError(
                "\(path) may be read by others (mode \(String(info.st_mode & 0o777, radix: 8))); run chmod 600 \(path)"
            )
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw AgentError("cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &buffer, buffer.count)
            guard count >= 0 else {
                throw AgentError("cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes += buffer[..<count]
        }
        do {
            return try DeviceCredentials(jsonBytes: bytes)
        } catch {
            throw AgentError("\(path) is not a credentials file this agent wrote: \(error)")
        }
    }

    func save(_ credentials: DeviceCredentials) throws {
        let bytes = credentials.jsonBytes + [UInt8(ascii: "\n")]
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw AgentError("cannot write \(temporary): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        // A file left by an earlier umask keeps its mode through O_TRUNC: set it.
        fchmod(fd, 0o600)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0, rename(temporary, path) == 0 else {
            throw AgentError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}

struct AgentError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
