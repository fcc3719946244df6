import Core
import Events
import Import
import Ingest
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Why an import stopped, in words for its owner: what happened and what to do.
struct ImportFailure: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// A reader of a format chosen at run time, as the chunker's concrete reader type.
struct AnyFixReader: FixReader {
    var base: any FixReader
    mutating func next() throws(ImportError) -> ImportItem? { try base.next() }
}

/// One import, run on its job's thread (docs/import-export.md, "How an import is stored"): the
/// file's SHA-256 (pass 1); its format; its fixes cut into chunks and each chunk submitted through
/// the report path with its derived batch id (pass 2), a few chunks in flight so that their
/// fdatasyncs overlap; then, once every chunk is durable, the `history_imported` record. A dry
/// run reads pass 2 and submits nothing.
struct ImportRun: Sendable {
    let ingest: IngestService
    let importID: UUID128
    let request: ImportRequest
    let stop: StopSignal
    /// Bytes a pass has read, for the job's status (read on other threads).
    let progress: ByteCounter
    /// Changes the job's shared status (under the book's lock).
    let update: @Sendable (_ change: (inout ImportStatus) -> Void) -> Void

    /// Chunks submitted and not yet durable, at most: enough that the log's group commit takes
    /// several in one fdatasync, few enough that memory stays a few chunks.
    static let chunksInFlightMax = 8

    func run() {
        do {
            try runPasses()
        } catch {
            update {
                $0.state = .failed
                $0.error = error.message
            }
        }
    }

    private func runPasses() throws(ImportFailure) {
        update { $0.fileBytes = Self.fileBytes(request.path) ?? 0 }
        let digest: [UInt8]
        do {
            let file = try FileByteSource(path: request.path)
            defer { file.close() }
            let (sha256, bytes) = try ImportFileDigest.sha256(
                CountingByteSource(file, counter: progress))
            digest = sha256
            update { $0.fileBytes = bytes }
        } catch {
            throw ImportFailure(error.description)
        }
        if stop.isRequested { throw Self.stopped }
        let check = retentionCheck()
        update {
            $0.retentionDays = check.policy.windowDays(device: request.deviceID)
            $0.state = .storing
            progress.reset()
        }
        let file: FileByteSource
        do { file = try FileByteSource(path: request.path) } catch { throw ImportFailure(error.description) }
        defer { file.close() }
        let (detected, source): (ImportFormat?, PrefixedByteSource<CountingByteSource<FileByteSource>>)
        do {
            (detected, source) = try ImportFormat.detect(
                source: CountingByteSource(file, counter: progress), fileName: request.fileName)
        } catch {
            throw ImportFailure(error.description)
        }
        guard let format = request.format ?? detected else { throw Self.formatUnknown(request.fileName) }
        update { $0.format = format }
        var chunker = ImportChunker(
            reader: AnyFixReader(base: format.reader(source: source)), fileSHA256: digest, format: format,
            summary: ImportSummary(retention: check))
        let batchIDs = try storeChunks(&chunker, format: format, check: check)
        if !request.dryRun {
            try appendHistoryImported(
                summary: chunker.summary, format: format, digest: digest, batchIDs: batchIDs)
        }
        update { $0.state = .done }
    }

    /// Pass 2: every chunk read and (unless a dry run) submitted; returns the batch ids of the
    /// chunks submitted, once every one is durable. A reader's error, a refused or failed chunk, or
    /// a stop ends it after the chunks in flight are settled.
    ///
    /// A chunk whose every fix is older than the device's window is not submitted: the report
    /// path would reject them all as expired and remember the chunk's batch id, so that importing
    /// the file again after widening the window would be answered "already stored" and store
    /// nothing. Counted as rejected (`expired`) instead, it is stored by that second import.
    /// (Time only moves forward: a fix expired now is expired when the chunk would arrive.)
    private func storeChunks(
        _ chunker: inout ImportChunker<AnyFixReader>, format: ImportFormat,
        check: ImportSummary.RetentionCheck
    ) throws(ImportFailure) -> [UUID128] {
        let window = SubmissionWindow(chunksMax: Self.chunksInFlightMax)
        var batchIDs: [UUID128] = []
        var readerError: ImportError?
        while !stop.isRequested {
            let chunk: ImportChunk?
            do {
                chunk = try chunker.next()
            } catch {
                readerError = error
                let summary = chunker.summary
                update { $0.take(summary) }
                break
            }
            let summary = chunker.summary
            update { $0.take(summary) }
            tally(window.settled())
            guard let chunk else { break }
            if request.dryRun { continue }
            if chunk.fixes.allSatisfy({ check.isExpired(recordedAtMicros: $0.recordedAtMicros) }) {
                update {
                    $0.rejected += chunk.fixes.count
                    $0.rejectedByReason[Self.expiredReason, default: 0] += chunk.fixes.count
                }
                continue
            }
            batchIDs.append(chunk.batchID)
            guard window.acquire() else { break }
            submit(chunk, format: format, window: window)
        }
        tally(window.drain())
        if let failure = window.failure { throw ImportFailure(failure) }
        if let readerError {
            throw ImportFailure(
                readerError.description
                    + "; the chunks before it are stored (none of the chunk it was reading), correct the file or cut it there"
            )
        }
        if stop.isRequested { throw Self.stopped }
        return batchIDs
    }

    private func submit(_ chunk: ImportChunk, format: ImportFormat, window: SubmissionWindow) {
        let items = chunk.fixes.enumerated().map {
            ClientReport.Item(index: UInt32($0.offset), fix: $0.element)
        }
        let report = ClientReport(
            deviceID: request.deviceID, batchID: chunk.batchID,
            clientProtocol: .imported(format: format.rawValue)!, items: items)
        let fixes = chunk.fixes.count
        ingest.submit(report) { outcome in window.settle(batchID: chunk.batchID, fixes: fixes, outcome) }
    }

    /// Adds settled chunks to the status: counts, and the rejections' reasons as the registry
    /// remembers the batch (a shared log's follower may not have folded it yet: then only counted).
    private func tally(_ settled: [SubmissionWindow.Settled]) {
        guard !settled.isEmpty else { return }
        var reasons: [String: Int] = [:]
        for chunk in settled {
            guard case .stored(_, _, let rejected) = chunk.outcome, rejected > 0 else { continue }
            let result = ingest.identity.store.registry.read {
                $0.registry.batchResult(deviceID: request.deviceID, batchID: chunk.batchID)
            }
            for rejection in result?.rejections ?? [] {
                let code =
                    rejection.reason.split(separator: ":", maxSplits: 1).first.map(String.init) ?? "other"
                reasons[code, default: 0] += 1
            }
        }
        update { status in
            for chunk in settled {
                switch chunk.outcome {
                case .stored(_, let accepted, let rejected):
                    status.accepted += accepted
                    status.rejected += rejected
                case .duplicate: status.duplicate += chunk.fixes
                default: break
                }
            }
            status.rejectedByReason.merge(reasons, uniquingKeysWith: +)
        }
    }

    /// The rejection code of a fix older than its device's window (the report path's `expired`).
    static let expiredReason = "expired"

    /// The device's window as the report path will apply it (`IngestService.arrivalLimits`).
    private func retentionCheck() -> ImportSummary.RetentionCheck {
        var policy = ingest.identity.store.registry.read { $0.registry.retention }
        policy.settings.retentionDays = ingest.limits.retentionDays
        return ImportSummary.RetentionCheck(
            policy: policy, deviceID: request.deviceID, nowMicros: ingest.identity.clockMicros())
    }

    /// The audit record, after the last chunk is durable, through the append path the chunks took.
    private func appendHistoryImported(
        summary: ImportSummary, format: ImportFormat, digest: [UInt8], batchIDs: [UUID128]
    ) throws(ImportFailure) {
        let counts = update(read: { $0 })
        let span = summary.earliestRecordedAtMicros.flatMap { first in
            summary.latestRecordedAtMicros.map { first...$0 }
        }
        let event = Event.historyImported(
            HistoryImported(
                deviceID: request.deviceID, importID: importID, format: format.rawValue,
                fileName: request.fileName, fileSHA256: digest, fileBytes: UInt64(max(0, counts.fileBytes)),
                userID: request.userID, fixesRead: UInt64(summary.fixes),
                fixesAccepted: UInt64(counts.accepted),
                fixesRejected: UInt64(counts.rejected), fixesDuplicate: UInt64(counts.duplicate),
                notAFix: UInt64(counts.notAFix), recordedSpanMicros: span, batchIDs: batchIDs))
        let store = ingest.identity.store
        let lock = ConditionLock()
        let result = Locked(Result<UInt64, AppendFailure>?.none)
        store.append(EventCodec.encode(event, receivedAtMicros: ingest.identity.clockMicros())) { outcome in
            lock.withLock {
                result.withLock { $0 = outcome }
                lock.signal()
            }
        }
        let outcome = lock.withLock { () -> Result<UInt64, AppendFailure> in
            while true {
                if let outcome = result.withLock({ $0 }) { return outcome }
                lock.wait()
            }
        }
        switch outcome {
        case .success(let offset):
            if store.appenderFolds { store.registry.write { $0.registry.apply(event, offset: offset) } }
        case .failure(let failure):
            throw ImportFailure(
                "every fix is stored, but the import's audit record could not be (\(failure)); "
                    + "run the import again: it adds no fix twice and writes the record")
        }
    }

    /// The status as it is now, read under the book's lock.
    private func update<T>(read: (ImportStatus) -> T) -> T {
        var value: T?
        update { value = read($0) }
        return value!
    }

    static let stopped = ImportFailure(
        "the server stopped during the import; what was stored stays: run the import again to store the rest")

    static func formatUnknown(_ fileName: String) -> ImportFailure {
        ImportFailure(
            "the format of '\(fileName)' cannot be told from its content or its name: name it with --format "
                + "(the command line) or format= (the API), one of "
                + ImportFormat.allCases.map(\.rawValue).joined(separator: ", "))
    }

    static func fileBytes(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }
}

/// The chunks submitted and not yet settled, at most `chunksMax` at once: a counting semaphore on
/// a condition, whose releases come from the log's group-commit threads (which must not wait).
final class SubmissionWindow: Sendable {
    struct Settled: Sendable {
        var batchID: UUID128
        var fixes: Int
        var outcome: ClientReportOutcome
    }

    private let chunksMax: Int
    private let lock = ConditionLock()
    private nonisolated(unsafe) var inFlight = 0
    private nonisolated(unsafe) var done: [Settled] = []
    private nonisolated(unsafe) var firstFailure: String?

    init(chunksMax: Int) { self.chunksMax = chunksMax }

    /// Waits for a free place; false once a chunk failed (nothing more is submitted).
    func acquire() -> Bool {
        lock.withLock {
            while inFlight >= chunksMax && firstFailure == nil { lock.wait() }
            guard firstFailure == nil else { return false }
            inFlight += 1
            return true
        }
    }

    /// From the report path's completion: quick, never blocks.
    func settle(batchID: UUID128, fixes: Int, _ outcome: ClientReportOutcome) {
        let failure = Self.failure(outcome)
        lock.withLock {
            inFlight -= 1
            done.append(Settled(batchID: batchID, fixes: fixes, outcome: outcome))
            if firstFailure == nil, let failure { firstFailure = failure }
            lock.broadcast()
        }
    }

    /// The chunks settled since the last call.
    func settled() -> [Settled] {
        lock.withLock {
            defer { done = [] }
            return done
        }
    }

    /// Waits until nothing is in flight; the chunks settled since the last call.
    func drain() -> [Settled] {
        lock.withLock {
            while inFlight > 0 { lock.wait() }
            defer { done = [] }
            return done
        }
    }

    var failure: String? { lock.withLock { firstFailure } }

    private static func failure(_ outcome: ClientReportOutcome) -> String? {
        switch outcome {
        case .stored, .duplicate, .empty: nil
        case .paused: "reporting is paused for this device; resume it to import"
        case .inProgress:
            "another import is storing the same file into this device right now; let it end, then run "
                + "this one again (it stores only what is missing)"
        case .failed(let error):
            "a chunk could not be stored (\(error.message)); what was stored before stays: run the "
                + "import again to store the rest"
        }
    }
}
