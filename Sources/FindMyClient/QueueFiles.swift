// The POSIX file calls of the client's files: appending with O_APPEND, fsync of a file and of its
// directory (so that a created, renamed or removed name survives a power cut), truncation of a torn
// tail, whole-file reads, directories made and listed. POSIX on every platform an app or the agent
// runs on (Darwin and Glibc alike): nothing Linux-specific, and no Foundation.
#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A failed file operation: what was done to which path, and the system's reason.
public struct QueueFileError: Error, Equatable, CustomStringConvertible {
    public var operation: String
    public var path: String
    public var errno: Int32

    public var description: String {
        "\(operation) \(path): \(String(cString: strerror(errno)))"
    }
}

enum QueueFiles {
    /// Opens `path` for appending (created 0600 if absent).
    static func openForAppend(_ path: String) throws(QueueFileError) -> Int32 {
        let fd = retryingEINTR { open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw QueueFileError(operation: "open", path: path, errno: errno) }
        return fd
    }

    /// Writes all of `bytes` at the end of `fd`'s file, then fsyncs it.
    static func appendAndSync(_ fd: Int32, _ bytes: [UInt8], path: String) throws(QueueFileError) {
        var done = 0
        while done < bytes.count {
            let written = bytes.withUnsafeBytes { raw in
                retryingEINTR { write(fd, raw.baseAddress! + done, raw.count - done) }
            }
            guard written > 0 else { throw QueueFileError(operation: "write", path: path, errno: errno) }
            done += written
        }
        guard retryingEINTR({ fsync(fd) }) == 0 else {
            throw QueueFileError(operation: "fsync", path: path, errno: errno)
        }
    }

    /// Writes a whole new file under `temporary`, fsyncs it, renames it to `path` and fsyncs the
    /// directory: `path` then holds all of `bytes` or (after a crash) does not exist.
    static func writeDurably(_ bytes: [UInt8], to path: String, temporary: String) throws(QueueFileError) {
        let fd = retryingEINTR { open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw QueueFileError(operation: "create", path: temporary, errno: errno) }
        do {
            try appendAndSync(fd, bytes, path: temporary)
        } catch {
            close(fd)
            throw error
        }
        close(fd)
        try rename(temporary, to: path)
    }

    /// Renames and fsyncs the directory.
    static func rename(_ from: String, to: String) throws(QueueFileError) {
        guard posixRename(from, to) == 0 else {
            throw QueueFileError(operation: "rename", path: from, errno: errno)
        }
        try syncDirectory(of: to)
    }

    /// Removes `path` and fsyncs its directory.
    static func remove(_ path: String) throws(QueueFileError) {
        guard unlink(path) == 0 || errno == ENOENT else {
            throw QueueFileError(operation: "unlink", path: path, errno: errno)
        }
        try syncDirectory(of: path)
    }

    static func truncate(_ path: String, to length: Int) throws(QueueFileError) {
        guard posixTruncate(path, length) == 0 else {
            throw QueueFileError(operation: "truncate", path: path, errno: errno)
        }
    }

    static func syncDirectory(of path: String) throws(QueueFileError) {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let fd = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw QueueFileError(operation: "open", path: directory, errno: errno) }
        defer { close(fd) }
        guard retryingEINTR({ fsync(fd) }) == 0 else {
            throw QueueFileError(operation: "fsync", path: directory, errno: errno)
        }
    }

    /// The whole file, or nil when it does not exist.
    static func read(_ path: String) throws(QueueFileError) -> [UInt8]? {
        let fd = retryingEINTR { open(path, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw QueueFileError(operation: "open", path: path, errno: errno)
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { raw in
                retryingEINTR { posixRead(fd, raw.baseAddress!, raw.count) }
            }
            guard count >= 0 else { throw QueueFileError(operation: "read", path: path, errno: errno) }
            if count == 0 { return bytes }
            bytes.append(contentsOf: buffer[..<count])
        }
    }

    static func close(_ fd: Int32) {
        _ = posixClose(fd)
    }

    /// Makes `path` and the directories above it that are missing, each with `mode` (less the umask).
    static func makeDirectories(_ path: String, mode: UInt32 = 0o777) throws(QueueFileError) {
        var made = ""
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            made += (made.isEmpty && !path.hasPrefix("/") ? "" : "/") + part
            guard mkdir(made, mode_t(mode)) == 0 || errno == EEXIST else {
                throw QueueFileError(operation: "mkdir", path: made, errno: errno)
            }
        }
    }

    /// The names in a directory, without `.` and `..`.
    static func names(in directory: String) throws(QueueFileError) -> [String] {
        guard let stream = opendir(directory) else {
            throw QueueFileError(operation: "opendir", path: directory, errno: errno)
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}

private func retryingEINTR<T: BinaryInteger>(_ call: () -> T) -> T {
    while true {
        let result = call()
        if result >= 0 || errno != EINTR { return result }
    }
}

// The C calls whose Swift names the enum's own methods shadow.
private func posixRename(_ from: String, _ to: String) -> Int32 { rename(from, to) }
private func posixTruncate(_ path: String, _ length: Int) -> Int32 { truncate(path, off_t(length)) }
private func posixRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(fd, buffer, count)
}
private func posixClose(_ fd: Int32) -> Int32 { close(fd) }
