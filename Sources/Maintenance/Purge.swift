import CLI
import Events
import Postgres

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy purge` once parsed: removes everything findmy stored for DIR, wherever it is: the data
/// directory (log, cluster, secret, admin socket), a cluster an earlier findmy put in
/// /var/lib/findmy, a socket directory under /tmp, and the OS user findmy made for the cluster.
/// It deletes a directory only when findmy's own files say it is a data directory (`PurgePlan`).
package enum Purge {
    /// Lists what goes, asks on a terminal unless `confirmed`, deletes, and says what is left.
    package static func run(_ given: String, confirmed: Bool) throws -> Int32 {
        let plan = try PurgePlan(given)
        guard !plan.isEmpty else {
            printLine("nothing stored for \(plan.given)")
            return 0
        }
        if let data = plan.dataDirectory { try Backup.requireNoServer(data) }

        printLine("findmy purge deletes for good, with every location in it:\n\(plan.listing)")
        if !confirmed {
            guard isatty(0) != 0 else {
                throw UsageError("standard input is not a terminal: add --yes to confirm")
            }
            print("Type 'yes' to go on: ", terminator: "")
            fflush(nil)
            guard readLine()?.split(whereSeparator: \.isWhitespace) == ["yes"] else {
                printLine("nothing deleted")
                return 1
            }
        }

        plan.delete()
        let left = plan.remaining()
        for line in plan.lines where !left.contains(line) { printLine("deleted " + line) }
        guard left.isEmpty else {
            for line in left { writeStandardError("findmy purge: not deleted: \(line)") }
            return 1
        }
        return 0
    }
}

/// What `findmy purge` deletes for one data directory, decided once from the path resolved once,
/// before anything is listed, asked or deleted. Every refusal happens here.
struct PurgePlan {
    /// The path as given, absolute.
    let given: String
    /// The data directory with every symbolic link resolved; nil when nothing is at the path
    /// (then only what findmy kept elsewhere for it is deleted).
    let dataDirectory: String?
    /// The path as given when it is itself a symbolic link: deleted after what it points to.
    let link: String?
    /// Directories findmy kept for the data directory outside it: an earlier findmy's cluster in
    /// /var/lib/findmy, the cluster's socket directory under /tmp.
    let outside: [String]
    /// OS users findmy made for the cluster (root only).
    let osUsers: [String]

    init(_ path: String) throws {
        given = LocalFiles.absolutePath(path)
        var info = stat()
        guard lstat(given, &info) == 0 else {
            // Nothing there: a data directory deleted by hand leaves its OS user and an old outside
            // cluster, both under names findmy derives from the path.
            dataDirectory = nil
            link = nil
            outside = [outsideClusterDirectory(given)].filter(Self.exists)
            osUsers = Self.existingUsers([instanceOSUserName(given)])
            return
        }
        guard let resolved = Self.realPath(given) else {
            throw UsageError(
                "refuses \(given): it cannot be resolved (\(String(cString: strerror(errno)))); nothing deleted"
            )
        }
        try Self.refuseUnlessDataDirectory(resolved, given: given)
        dataDirectory = resolved
        link = info.st_mode & S_IFMT == S_IFLNK ? given : nil

        var outside: [String] = []
        let clusterLink = resolved + "/postgres"
        if let target = LocalFiles.linkTarget(clusterLink) {
            // An earlier findmy linked DATA_DIR/postgres to its cluster in /var/lib/findmy; a link
            // to anywhere else is not findmy's doing, and what it points to is not deleted.
            let absolute = LocalFiles.absolutePath(target, relativeTo: resolved)
            guard absolute.hasPrefix("/var/lib/findmy/postgres-") else {
                throw UsageError(
                    "refuses \(given): \(clusterLink) points to \(absolute), which is not where findmy keeps a "
                        + "cluster; remove that link yourself if the cluster there is this data directory's")
            }
            outside.append(absolute)
        }
        for candidate in [outsideClusterDirectory(given), outsideClusterDirectory(resolved)]
        where Self.exists(candidate) && !outside.contains(candidate) {
            outside.append(candidate)
        }
        if Self.exists(clusterLink), let cluster = Self.cluster(resolved),
            cluster.socketDirectory.hasPrefix("/tmp/findmy-pg-"), Self.exists(cluster.socketDirectory)
        {
            outside.append(cluster.socketDirectory)
        }
        self.outside = outside
        // The cluster's OS user is named after the path the server was given: the link's or the
        // directory's own.
        osUsers = Self.existingUsers([instanceOSUserName(given), instanceOSUserName(resolved)])
    }

    var isEmpty: Bool { dataDirectory == nil && outside.isEmpty && osUsers.isEmpty }

    /// One line per thing deleted, in the order of deletion.
    var lines: [String] {
        [dataDirectory].compactMap { $0 } + outside + [link].compactMap { $0 }
            + osUsers.map { "OS user " + $0 }
    }

    var listing: String { lines.map { "  " + $0 }.joined(separator: "\n") }

    /// Stops and deletes the cluster, then every path, the link last, then the OS users. Failures
    /// are not thrown: `remaining` says what is left, and the command says it and fails.
    func delete() {
        if let data = dataDirectory, Self.exists(data + "/postgres") {
            do {
                try EmbeddedPostgres(Self.quietConfiguration(data)).destroy()
            } catch {
                // A cluster findmy cannot manage (a refused data directory, missing binaries):
                // its files still go below, with the rest.
                writeStandardError("findmy purge: \(error); deleting its files anyway")
            }
        }
        for path in [dataDirectory].compactMap({ $0 }) + outside + [link].compactMap({ $0 })
        where Self.exists(path) {
            do {
                try LocalFiles.removeTree(path)
            } catch {
                writeStandardError("findmy purge: cannot delete \(path): \(error)")
            }
        }
        if getuid() == 0 {
            for user in osUsers where LocalFiles.account(named: user) != nil {
                do {
                    try removeOSUser(user)
                } catch {
                    writeStandardError("findmy purge: \(error)")
                }
            }
        }
    }

    /// The lines of `lines` whose thing is still there.
    func remaining() -> [String] {
        let paths = [dataDirectory].compactMap { $0 } + outside + [link].compactMap { $0 }
        return paths.filter(Self.exists)
            + osUsers.filter { LocalFiles.account(named: $0) != nil }.map { "OS user " + $0 }
    }

    // MARK: refusals

    static func refuseUnlessDataDirectory(_ resolved: String, given: String) throws {
        let named = resolved == given ? resolved : "\(given) (\(resolved))"
        if resolved == "/" {
            throw UsageError("refuses \(named): it is the root directory; nothing deleted")
        }
        if homeDirectories().contains(resolved) {
            throw UsageError("refuses \(named): it is a home directory; nothing deleted")
        }
        if isMountPoint(resolved) {
            throw UsageError(
                "refuses \(named): it is a mount point (a file system of its own), which findmy never deletes; "
                    + "keep data directories below a mount point; nothing deleted")
        }
        guard holdsFindmyLog(resolved) else {
            throw UsageError(
                "refuses \(named): it is not a findmy data directory (findmy writes log/LOCK there, and segment "
                    + "files in log/ with its header and log id); nothing deleted")
        }
    }

    /// The lock file findmy's log writer creates, and a segment whose header findmy wrote: its magic
    /// and checksum hold and it names its log.
    static func holdsFindmyLog(_ directory: String) -> Bool {
        var info = stat()
        guard lstat(directory + "/log/LOCK", &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            return false
        }
        let logID = try? LogReader(directory: directory + "/log").logID()
        return logID != nil
    }

    /// `/root`, every directory straight under `/home`, `$HOME`, and every user's home in the
    /// password database, each resolved.
    static func homeDirectories() -> Set<String> {
        var homes: Set<String> = ["/root"]
        if let home = LocalFiles.environment("HOME"), let resolved = realPath(home) {
            homes.insert(resolved)
        }
        if let entries = LocalFiles.entries("/home") {
            for entry in entries { homes.insert(realPath("/home/" + entry) ?? "/home/" + entry) }
        }
        setpwent()
        while let entry = getpwent() {
            let home = String(cString: entry.pointee.pw_dir)
            if let resolved = realPath(home) { homes.insert(resolved) }
        }
        endpwent()
        return homes
    }

    /// On another device than its parent, or listed in /proc/self/mountinfo (a bind mount of the
    /// same device).
    static func isMountPoint(_ path: String) -> Bool {
        var own = stat()
        var parent = stat()
        guard stat(path, &own) == 0, stat(path + "/..", &parent) == 0 else { return false }
        if own.st_dev != parent.st_dev || own.st_ino == parent.st_ino { return true }
        guard let table = LocalFiles.readText("/proc/self/mountinfo") else {
            return false
        }
        return table.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 4 && unescapeMountPath(fields[4]) == path
        }
    }

    /// mountinfo writes a space, tab, newline and backslash in a path as `\ooo` (octal).
    static func unescapeMountPath(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "\\"), utf8.count >= 3,
                let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8)
            {
                bytes.append(value)
                utf8 = utf8.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func quietConfiguration(_ data: String) -> EmbeddedPostgres.Configuration {
        var configuration = EmbeddedPostgres.Configuration(dataDirectory: data)
        configuration.log = { _ in }
        return configuration
    }

    /// The cluster as findmy would run it (nothing started), nil when findmy could not run it.
    static func cluster(_ data: String) -> EmbeddedPostgres? {
        try? EmbeddedPostgres(quietConfiguration(data))
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    static func existingUsers(_ names: [String]) -> [String] {
        guard getuid() == 0 else { return [] }
        var users: [String] = []
        for name in names where LocalFiles.account(named: name) != nil && !users.contains(name) {
            users.append(name)
        }
        return users
    }
}
