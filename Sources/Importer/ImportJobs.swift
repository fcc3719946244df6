import Events
import Identity
import Import
import Ingest
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The server's book of imports, by import id (docs/import-export.md, "How an import is stored"):
/// each started on a thread of its own (a `StoppableThread`), its status kept after it ends for
/// its owner to fetch. A service: its stop asks every running import to stop at its next chunk
/// and waits for it, so that no import outlives the log it appends to.
public final class ImportJobs: Service {
    /// Imports running at once, at most: each reads a file at disk speed and keeps a few chunks in
    /// flight; more would only share the same disk and fdatasyncs.
    public static let runningMax = 4
    /// The statuses of this many finished imports are kept for their owners to fetch.
    public static let finishedKeptMax = 64
    /// The largest upload by default (`--import-bytes-max`): above a decade's Records.json (a few
    /// GB), and twice the 2 GB Google Takeout cuts its archives at by default.
    public static let uploadBytesMaxDefault: Int64 = 4 << 30

    public let name = "imports"
    let ingest: IngestService
    private let lock = ConditionLock()
    private struct Job {
        var status: ImportStatus
        var progress: ByteCounter
        var thread: StoppableThread
        var finishedOrder = 0
    }
    private nonisolated(unsafe) var jobs: [UUID128: Job] = [:]
    private nonisolated(unsafe) var finishedCount = 0
    private nonisolated(unsafe) var stopping = false
    /// Where uploads are streamed to (the network API's), nil for an importer without them.
    public let uploadDirectory: String?

    public init(ingest: IngestService, uploadDirectory: String? = nil) {
        self.ingest = ingest
        self.uploadDirectory = uploadDirectory
    }

    public var state: ServiceState { lock.withLock { stopping ? .stopped : .running } }

    /// Makes the upload directory (0700: the files are people's location history) and removes what
    /// an earlier run left in it: uploads of imports that ended with a killed server (a stopped one
    /// removes its own).
    public func start() throws {
        guard let directory = uploadDirectory else { return }
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw ImportDirectoryError(
                message: "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        guard chmod(directory, 0o700) == 0, let listing = opendir(directory) else {
            throw ImportDirectoryError(
                message: "cannot use \(directory): \(String(cString: strerror(errno)))")
        }
        defer { closedir(listing) }
        while let entry = readdir(listing) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { unlink(directory + "/" + name) }
        }
    }

    /// Asks every running import to stop at its next chunk (it ends `failed`, what it stored kept)
    /// and waits for them; later `start`s are refused.
    public func stop(graceMicros: Int64) {
        let threads = lock.withLock {
            stopping = true
            return jobs.values.map(\.thread)
        }
        for thread in threads { thread.stop() }
    }

    /// Starts `request` on a thread of its own and returns its id at once (`status` follows it).
    /// 503 while `runningMax` imports run or the server stops.
    public func start(_ request: ImportRequest) throws(APIError) -> UUID128 {
        let id = UUID128.random()
        let thread = StoppableThread()
        let progress = ByteCounter()
        let refusal = lock.withLock { () -> APIError? in
            guard !stopping else {
                return APIError(
                    status: 503, code: .busy,
                    message: "the server is stopping; start the import once it is up again")
            }
            let running = jobs.values.filter { !$0.status.isFinished }.count
            guard running < Self.runningMax else {
                return APIError(
                    status: 503, code: .busy,
                    message:
                        "\(running) imports are running, the most at once; start this one when one has ended")
            }
            jobs[id] = Job(
                status: ImportStatus(importID: id, request: request), progress: progress, thread: thread)
            return nil
        }
        if let refusal { throw refusal }
        let run = ImportRun(
            ingest: ingest, importID: id, request: request, stop: thread.stopSignal, progress: progress,
            update: { [self] change in lock.withLock { change(&jobs[id]!.status) } })
        thread.start { [self] _ in
            run.run()
            let (status, forgotten) = lock.withLock { () -> (ImportStatus, [StoppableThread]) in
                jobs[id]!.status.bytesRead = progress.bytes
                finishedCount += 1
                jobs[id]!.finishedOrder = finishedCount
                lock.broadcast()
                return (jobs[id]!.status, forgetOldFinished())
            }
            // Ended (or removing its upload): joined at once, outside the lock.
            for old in forgotten { old.stop() }
            StructuredLog.info(
                "import_ended",
                [
                    "import_id": .string(id.description), "device_id": .int(Int64(request.deviceID)),
                    "state": .string(status.state.rawValue), "accepted": .int(Int64(status.accepted)),
                    "duplicate": .int(Int64(status.duplicate)), "rejected": .int(Int64(status.rejected)),
                ])
            if request.ownsFile { unlink(request.path) }
        }
        return id
    }

    /// The import's status once it has ended or `waitMicros` passed, whichever comes first; nil for
    /// an id this server does not know (never started here, long forgotten, or before a restart).
    public func status(_ id: UUID128, waitMicros: Int64 = 0) -> ImportStatus? {
        let deadline = monotonicMicros() + max(0, waitMicros)
        return lock.withLock {
            while let job = jobs[id], !job.status.isFinished {
                if !lock.wait(0, untilMonotonicMicros: deadline) { break }
            }
            guard let job = jobs[id] else { return nil }
            var status = job.status
            if !status.isFinished { status.bytesRead = job.progress.bytes }
            return status
        }
    }

    /// Under the lock: the oldest finished jobs beyond `finishedKeptMax` go; their threads, for
    /// the caller to join.
    private func forgetOldFinished() -> [StoppableThread] {
        let finished = jobs.filter { $0.value.status.isFinished }
        guard finished.count > Self.finishedKeptMax else { return [] }
        let oldest = finished.sorted { $0.value.finishedOrder < $1.value.finishedOrder }
        return oldest.prefix(finished.count - Self.finishedKeptMax).map { id, job in
            jobs[id] = nil
            return job.thread
        }
    }
}

/// The upload directory cannot be made or used: the server does not start.
struct ImportDirectoryError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
