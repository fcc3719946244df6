#if canImport(Glibc)
    import Glibc
#endif

/// The few file and path operations the embedded cluster and `findmy purge` need, as POSIX calls.
///
/// Not Foundation's FileManager and URL: importing Foundation links libFoundation, its
/// internationalization library and ICU into findmy (about 6 MB of every server's resident
/// memory, docs/benchmarks.md), for a handful of calls. Paths are plain strings; a failed call
/// says which call failed and why, in words from `strerror`.
package enum LocalFiles {
    /// Whether something is at `path`, following symbolic links (a dangling link is not).
    package static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// Whether `path` is a directory, following symbolic links.
    package static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    /// Whether `path` is a regular file this process may execute.
    package static func isExecutableFile(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && access(path, X_OK) == 0
    }

    /// The size in bytes of the file at `path`, nil when it cannot be read.
    package static func size(_ path: String) -> UInt64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return UInt64(info.st_size)
    }

    /// What the symbolic link at `path` points to, as written in it; nil when `path` is not a link.
    package static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The names in `directory`, without `.` and `..`, in no particular order; nil when it cannot
    /// be listed.
    package static func entries(_ directory: String) -> [String]? {
        guard let stream = opendir(directory) else { return nil }
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

    /// The bytes of the file at `path` from `offset` on, as UTF-8 text (invalid sequences
    /// replaced); nil when it cannot be opened.
    package static func readText(_ path: String, from offset: UInt64 = 0) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        if offset > 0, lseek(descriptor, off_t(offset), SEEK_SET) < 0 { return nil }
        var bytes: [UInt8] = []
        var piece = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = read(descriptor, &piece, piece.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes.append(contentsOf: piece[..<count])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `text` to the existing file at `path`; false when it cannot be opened or written.
    package static func append(_ text: String, to path: String) -> Bool {
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) } == bytes.count
    }

    /// Creates the directory `path` with `mode` (less the umask), and with `intermediate` every
    /// missing directory above it too (with the same mode). An existing directory is success.
    package static func makeDirectory(_ path: String, mode: mode_t, intermediate: Bool) throws(LocalFileError)
    {
        if intermediate {
            let parent = parentDirectory(path)
            if !parent.isEmpty, parent != path, !isDirectory(parent) {
                try makeDirectory(parent, mode: mode, intermediate: true)
            }
        }
        guard mkdir(path, mode) == 0 else {
            let error = errno
            if isDirectory(path) { return }
            throw LocalFileError("mkdir", path, error)
        }
    }

    /// Deletes whatever is at `path`: a file or a link (not what it points to), or a directory with
    /// everything in it (links inside it are deleted, never followed). Stops at the first failure.
    package static func removeTree(_ path: String) throws(LocalFileError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw LocalFileError("lstat", path, errno) }
        if info.st_mode & S_IFMT == S_IFDIR {
            guard let names = entries(path) else { throw LocalFileError("opendir", path, errno) }
            for name in names { try removeTree(path + "/" + name) }
            guard rmdir(path) == 0 else { throw LocalFileError("rmdir", path, errno) }
        } else {
            guard unlink(path) == 0 else { throw LocalFileError("unlink", path, errno) }
        }
    }

    /// `path` made absolute (against the working directory) with `.` and `..` components and
    /// repeated or trailing slashes removed, without looking at the disk: symbolic links stay as
    /// they are (what Foundation's `URL(fileURLWithPath:).standardizedFileURL.path` gives).
    package static func absolutePath(_ path: String, relativeTo base: String? = nil) -> String {
        var full = path
        if !path.hasPrefix("/") {
            full = (base ?? workingDirectory()) + "/" + path
        }
        var components: [Substring] = []
        for component in full.split(separator: "/", omittingEmptySubsequences: true) {
            switch component {
            case ".": continue
            case "..": _ = components.popLast()
            default: components.append(component)
            }
        }
        return "/" + components.joined(separator: "/")
    }

    /// `path` without its last component: `/a/b` gives `/a`, `/a` gives `/`, `a` gives the empty
    /// string (as NSString's `deletingLastPathComponent`).
    package static func parentDirectory(_ path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        var parent = trimmed[..<slash]
        while parent.count > 1, parent.hasSuffix("/") { parent.removeLast() }
        return String(parent)
    }

    /// The process's working directory; `/` when it cannot be read (it was deleted).
    package static func workingDirectory() -> String {
        guard let directory = getcwd(nil, 0) else { return "/" }
        defer { free(directory) }
        return String(cString: directory)
    }

    /// The name of the user this process runs as (its effective uid), or the uid when the
    /// password database has no entry for it.
    package static func processUserName() -> String {
        accountName(uid: geteuid()) ?? String(geteuid())
    }

    /// The uid and gid of the OS user `name`, nil when the password database has none.
    /// getpwnam_r, never getpwnam: clusters are set up on several threads at once (the tests do),
    /// and getpwnam's one static entry, overwritten by another thread's call between the lookup
    /// and the read, gave a cluster's file to another cluster's user.
    package static func account(named name: String) -> (uid: uid_t, gid: gid_t)? {
        lookUpAccount { entry, buffer, count, result in getpwnam_r(name, &entry, buffer, count, &result) }
            .map { ($0.pw_uid, $0.pw_gid) }
    }

    /// The name of the OS user `uid`, nil when the password database has none (getpwuid_r).
    package static func accountName(uid: uid_t) -> String? {
        var name: String?
        _ = lookUpAccount { entry, buffer, count, result in
            let status = getpwuid_r(uid, &entry, buffer, count, &result)
            // pw_name points into `buffer`: read while it lives.
            if status == 0, result != nil { name = String(cString: entry.pw_name) }
            return status
        }
        return name
    }

    /// Runs a reentrant password-database lookup with a buffer grown while it says ERANGE.
    private static func lookUpAccount(
        _ call: (inout passwd, UnsafeMutablePointer<CChar>, Int, inout UnsafeMutablePointer<passwd>?) -> Int32
    ) -> passwd? {
        var size = 4096
        while size <= 1 << 20 {
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            let status = call(&entry, buffer, size, &result)
            if status == ERANGE {
                size *= 2
                continue
            }
            return status == 0 && result != nil ? entry : nil
        }
        return nil
    }

    /// One line to standard error in one write (so lines from several threads do not interleave).
    package static func writeStandardError(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }

    /// The environment variable `name`, nil when unset.
    package static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}

/// A failed file call: which call, on which path, and why.
package struct LocalFileError: Error, Sendable, CustomStringConvertible {
    package let call: String
    package let path: String
    package let code: Int32

    package init(_ call: String, _ path: String, _ code: Int32) {
        self.call = call
        self.path = path
        self.code = code
    }

    package var description: String { "\(call) \(path): \(String(cString: strerror(code)))" }
}
