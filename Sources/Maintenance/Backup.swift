import CLI
import Events
import JSON
import Postgres
import Projector

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy backup` and `findmy restore` once parsed (docs/backup.md). A backup is the event log
/// and nothing else: the log is the truth, and the PostgreSQL projection is rebuilt from it
/// (`findmy replay`).
package enum Backup {
    /// Writes `target` (which must not exist) with a consistent copy of DIR's log and a manifest.
    package static func write(data: String, to target: String, json: Bool) throws -> Int32 {
        try LogInspection.requireLog(data + "/log")
        guard !exists(target) else { throw UsageError("\(target) exists: a backup is written to a new path") }
        // Written beside the target and renamed at the end: PATH exists only once it is complete.
        let partial = target + ".partial"
        guard !exists(partial) else {
            throw UsageError("\(partial) exists: an earlier backup was interrupted; remove it and try again")
        }
        let io = PosixFileIO()
        try io.makeDirectory(partial)
        try io.makeDirectory(partial + "/log")
        let started = wallClockMicros()
        let report = try LogBackup(io: io).copy(from: data + "/log", to: partial + "/log")
        let manifest = manifestJSON(report, createdAtMicros: started, source: data)
        let manifestPath = partial + "/BACKUP.json"
        let fd = try io.open(manifestPath, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
        try io.writeAll(fd, manifest + [0x0A], at: 0, path: manifestPath)
        try io.fsync(fd, path: manifestPath)
        io.close(fd)
        try io.syncDirectory(partial)
        try io.rename(partial, target)
        try io.syncDirectory(parent(of: target))
        if json {
            printLine(String(decoding: manifest, as: UTF8.self))
        } else {
            printLine(
                "backup: \(report.segments) segments, \(report.bytes) bytes, offsets \(report.firstOffset)..<\(report.durableEnd) in \(target)/log"
            )
            printLine("the PostgreSQL projection is not in it: it is rebuilt from the log after a restore")
        }
        return 0
    }

    static func manifestJSON(_ report: LogBackup.Report, createdAtMicros: Int64, source: String) -> [UInt8] {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("format")
        writer.string("findmy-backup-1")
        writer.key("created_at")
        writer.string(RFC3339.formatMicros(createdAtMicros))
        writer.key("source")
        writer.string(source)
        for (key, value) in [
            ("segments", Int64(report.segments)), ("bytes", Int64(report.bytes)),
            ("first_offset", Int64(report.firstOffset)), ("durable_end", Int64(report.durableEnd)),
            ("source_durable_end", Int64(report.sourceDurableEnd)),
            ("segments_gone_meanwhile", Int64(report.segmentsGoneMeanwhile)),
        ] {
            writer.key(key)
            writer.int64(value)
        }
        writer.key("log_id")
        if let logID = report.logID { writer.string(logID.description) } else { writer.null() }
        writer.key("projection")
        writer.string("not included: rebuilt from the log (findmy replay, or at the first start)")
        writer.endObject()
        return writer.bytes
    }

    /// Copies the backup at `source` into DIR/log and verifies it; `rebuild` folds it into PostgreSQL now.
    package static func restore(
        from source: String, data: String, force: Bool, rebuild: Bool, json: Bool, databaseURL: String?
    ) throws -> Int32 {
        let io = PosixFileIO()
        guard exists(source + "/log") else {
            throw UsageError("no backup at \(source): \(source)/log is missing")
        }
        var movedAside: String?
        if exists(data), !(try io.list(data).isEmpty) {
            guard force else {
                throw UsageError("\(data) is not empty; --force moves it aside (nothing is deleted)")
            }
            try requireStopped(data)
            let aside = data + ".before-restore-\(wallClockMicros() / 1_000_000)"
            try io.rename(data, aside)
            try io.syncDirectory(parent(of: data))
            movedAside = aside
        }
        try io.makeDirectory(data)
        let staging = data + "/log.restoring"
        try io.makeDirectory(staging)
        let backup = LogBackup(io: io)
        for name in try io.list(source + "/log") where name.hasSuffix(".seg") || name == "durable" {
            _ = try backup.copyFile(source + "/log/" + name, to: staging + "/" + name)
        }
        try io.syncDirectory(staging)
        let verify = try LogInspector(directory: staging).verify()
        guard verify.ok else {
            let problem = verify.problems[0]
            throw UsageError(
                "the backup does not verify: \(problem.file) at byte \(problem.position): \(problem.reason); "
                    + "nothing was restored (the copy is in \(staging))")
        }
        try io.rename(staging, data + "/log")
        try io.syncDirectory(data)
        var rebuilt: RebuildProgress?
        if rebuild {
            let database = try Database.open(dataDirectory: data, url: databaseURL)
            defer { database.close() }
            rebuilt = try Rebuild.run(client: database.client, reader: LogReader(directory: data + "/log")) {
                _ in
            }
        }
        let end = verify.lastOffset.map { $0 + 1 } ?? verify.firstOffset ?? 0
        if json {
            var writer = JSONWriter(capacity: 256)
            writer.beginObject()
            writer.key("restored")
            writer.string(data + "/log")
            writer.key("records")
            writer.int64(Int64(verify.records))
            writer.key("fixes")
            writer.int64(Int64(verify.fixes))
            writer.key("end_offset")
            writer.int64(Int64(end))
            writer.key("verified")
            writer.bool(true)
            writer.key("moved_aside")
            if let movedAside { writer.string(movedAside) } else { writer.null() }
            writer.key("projection")
            writer.string(rebuilt == nil ? "rebuilt at the next start" : "rebuilt")
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            if let movedAside { printLine("moved the previous \(data) aside to \(movedAside)") }
            printLine(
                "restored \(verify.records) records (\(verify.fixes) fixes) into \(data)/log; the log verifies"
            )
            if let rebuilt {
                printLine("rebuilt the projection up to offset \(rebuilt.checkpoint)")
            } else {
                printLine(
                    "the PostgreSQL projection will be rebuilt from the log when `findmy serve --data-dir \(data)` "
                        + "starts (with an external --database-url, run `findmy replay` first)")
            }
        }
        return 0
    }

    /// Refuses when a server (or any writer) holds DIR's log, or its embedded cluster runs.
    static func requireStopped(_ data: String) throws {
        try requireNoServer(data)
        if exists(data + "/postgres/data/postmaster.pid") {
            throw UsageError(
                "the embedded PostgreSQL of \(data) is running: stop the server before restoring over it")
        }
    }

    /// Refuses when a server (or any writer) holds DIR's log.
    package static func requireNoServer(_ data: String) throws {
        let lock = data + "/log/LOCK"
        let io = PosixFileIO()
        if exists(lock), let fd = try? io.open(lock, flags: O_RDONLY, mode: 0) {
            // Taking the lock and closing at once releases it: only whether it was free matters.
            defer { io.close(fd) }
            if (try? io.lockExclusive(fd, path: lock)) != true {
                throw UsageError("a server holds the log in \(data): stop it first")
            }
        }
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
