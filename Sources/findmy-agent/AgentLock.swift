// One agent per state directory: `agent.lock` held with flock while it runs, and `agent.pid` for
// stop-sound and status.
#if canImport(Glibc)
    import Glibc
#endif

struct AgentLock {
    let fd: Int32
    let pidPath: String

    init(stateDirectory: String) throws {
        try Agent.makeStateDirectory(stateDirectory)
        let path = stateDirectory + "/agent.lock"
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw AgentError("cannot open \(path): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            let pid = Self.runningAgent(stateDirectory: stateDirectory).map { " (pid \($0))" } ?? ""
            throw AgentError("another findmy-agent\(pid) runs with the state directory \(stateDirectory)")
        }
        pidPath = stateDirectory + "/agent.pid"
        var text = Array("\(getpid())\n".utf8)
        let pidFD = open(pidPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        if pidFD >= 0 {
            _ = write(pidFD, &text, text.count)
            close(pidFD)
        }
    }

    func release() {
        unlink(pidPath)
        close(fd)
    }

    /// The pid of the agent holding the lock of `stateDirectory`, nil when none does.
    static func runningAgent(stateDirectory: String) -> pid_t? {
        let fd = open(stateDirectory + "/agent.lock", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        let pidFD = open(stateDirectory + "/agent.pid", O_RDONLY | O_CLOEXEC)
        guard pidFD >= 0 else { return nil }
        defer { close(pidFD) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = read(pidFD, &buffer, buffer.count)
        guard count > 0 else { return nil }
        return pid_t(String(decoding: buffer[..<count], as: UTF8.self).trimmingNewline())
    }
}

extension String {
    fileprivate func trimmingNewline() -> String {
        var text = self
        while text.last == "\n" || text.last == " " { text.removeLast() }
        return text
    }
}
