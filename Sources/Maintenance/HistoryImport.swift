import CLI
import Core
import Events
import HTTP
import Identity
import Import
import Importer
import Ingest
import JSON
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy import` once parsed (docs/import-export.md, "The command"): each file imported through
/// the running server's admin socket when one answers, otherwise by the same routes served in this
/// process over the log (`AdminCall.session`); its progress on standard error, a summary per file
/// on standard output. A directory is an OwnTracks Recorder store: one import per `.rec` file,
/// into the device of the store's name of the mapped user.
package enum HistoryImport {
    package enum Device: Equatable, Sendable {
        case id(Int64)
        case named(String)
    }

    package struct Arguments: Sendable {
        package var user: String
        package var device: Device?
        package var format: String?
        package var dryRun: Bool
        package var userMaps: [String]
        package var files: [String]
        /// The window the report path applies when no server runs (as `findmy serve`'s).
        package var retentionDays: Int
        package var json: Bool

        package init(
            user: String, device: Device?, format: String?, dryRun: Bool, userMaps: [String], files: [String],
            retentionDays: Int, json: Bool
        ) {
            self.user = user
            self.device = device
            self.format = format
            self.dryRun = dryRun
            self.userMaps = userMaps
            self.files = files
            self.retentionDays = retentionDays
            self.json = json
        }
    }

    /// One import to start: a file (or a Recorder store's `.rec` file) into one device.
    struct Planned {
        var path: String
        /// What the summary and the audit call it: the name given, or `USER/DEVICE/MONTH.rec`.
        var fileName: String
        var user: String
        var device: Device
        var format: String?
    }

    /// Imports every file; 0 only when every one was imported whole.
    package static func run(data: String, _ arguments: Arguments) throws -> Int32 {
        let plan = try self.plan(arguments)
        let statuses = try AdminCall.session(data: data) { log in
            try offlineRouter(log, data: data, retentionDays: arguments.retentionDays)
        } _: { call in
            try plan.map { planned in try importOne(planned, dryRun: arguments.dryRun, call) }
        }
        for status in statuses {
            if arguments.json {
                printLine(String(decoding: JSONWriter.encode(status), as: UTF8.self))
            } else {
                for line in ImportReport.summary(status) { printLine(line) }
            }
        }
        return statuses.allSatisfy { (try? $0["state"]?.stringValue) == "done" } ? 0 : 1
    }

    /// The admin routes over the log opened here, as the server serves them on its socket.
    static func offlineRouter(_ log: LogWriter, data: String, retentionDays: Int) throws -> (
        Router, () -> Void
    ) {
        var limits = IngestLimits()
        limits.retentionDays = retentionDays
        let service = try IngestService(
            log: log, limits: limits, snapshots: RegistrySnapshotStore(directory: data + "/snapshots"))
        let jobs = ImportJobs(ingest: service)
        var router = GuardedRouter(service: service, listener: .adminSocket)
        jobs.addAdminRoutes(to: &router)
        return (try router.build(), { jobs.stop(graceMicros: 0) })
    }

    /// The imports the arguments ask for, checked before any starts.
    static func plan(_ arguments: Arguments) throws -> [Planned] {
        var plan: [Planned] = []
        for file in arguments.files {
            let path = try absolutePath(file)
            if isDirectory(path) {
                plan += try recorderStore(path, arguments)
                continue
            }
            guard let device = arguments.device else {
                throw UsageError("give --device ID or --new-device NAME: which device \(file) goes to")
            }
            let name = String(file.split(separator: "/").last ?? Substring(file))
            plan.append(
                Planned(
                    path: path, fileName: name, user: arguments.user, device: device, format: arguments.format
                ))
        }
        guard !plan.isEmpty else { throw UsageError("name at least one FILE to import") }
        return plan
    }

    /// A Recorder store's `.rec` files, each into the device of its name of the mapped user.
    static func recorderStore(_ root: String, _ arguments: Arguments) throws -> [Planned] {
        do {
            let map = try RecorderUserMap(pairs: arguments.userMaps, defaultUser: arguments.user)
            return try map.targets(RecorderStore.files(root: root)).flatMap { target in
                target.files.map { file in
                    let month = String(file.path.split(separator: "/").last ?? "")
                    return Planned(
                        path: file.path, fileName: "\(file.user)/\(file.device)/\(month)",
                        user: target.findmyUser,
                        device: .named(target.deviceName), format: ImportFormat.owntracksRecorder.rawValue)
                }
            }
        } catch {
            throw UsageError(error.description)
        }
    }

    /// Starts one import and follows it to its end; its final status.
    static func importOne(_ planned: Planned, dryRun: Bool, _ call: AdminCall.Call) throws -> JSONValue {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("user")
        writer.string(planned.user)
        switch planned.device {
        case .id(let id):
            writer.key("device_id")
            writer.int64(id)
        case .named(let name):
            writer.key("new_device")
            writer.string(name)
        }
        writer.key("path")
        writer.string(planned.path)
        writer.key("file_name")
        writer.string(planned.fileName)
        if let format = planned.format {
            writer.key("format")
            writer.string(format)
        }
        writer.key("dry_run")
        writer.bool(dryRun)
        writer.endObject()
        let started = try AdminCall.check(try call("POST", "/admin/imports", writer.bytes))
        let id = try started["import_id"]?.stringValue ?? ""
        if (try? started["device_created"]?.boolValue) == true {
            writeStandardError(
                "findmy import: created device \((try? started["device_id"]?.int64Value) ?? 0) "
                    + "'\(planned.deviceName)' for user '\(planned.user)'")
        }
        return try follow(id: id, fileName: planned.fileName, call)
    }

    /// Long polls of the import's status, each well within one admin call's time, with the
    /// progress drawn between them.
    static func follow(id: String, fileName: String, _ call: AdminCall.Call) throws -> JSONValue {
        let waitMillis = min(500, max(100, AdminCall.timeoutSeconds * 1000 / 3))
        var progress = ImportProgressLine(fileName: fileName, terminal: isatty(STDERR_FILENO) == 1)
        while true {
            let status: JSONValue
            do {
                status = try AdminCall.check(
                    try call("GET", "/admin/imports/\(id)?wait_ms=\(waitMillis)", []))
            } catch AdminCall.ServerGone.gone {
                progress.finish()
                throw UsageError(
                    "the server stopped during the import of \(fileName); what it stored stays: run the same "
                        + "command again to store the rest (nothing is stored twice)")
            }
            let state = try? status["state"]?.stringValue
            if state == "done" || state == "failed" {
                progress.finish()
                return status
            }
            progress.show(status, nowMicros: monotonicMicros())
        }
    }

    static func absolutePath(_ path: String) throws -> String {
        guard let resolved = realpath(path, nil) else {
            throw UsageError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }
}

extension HistoryImport.Planned {
    var deviceName: String {
        switch device {
        case .id(let id): "\(id)"
        case .named(let name): name
        }
    }
}
