import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Where a run asked for with `Compactor.start` is (docs/retention.md, "Running it by hand").
public enum CompactionRunState: Sendable {
    /// Queued behind a run in progress (a scheduled one, say): runs are serialised.
    case waiting
    case running(CompactionPhase?)
    case done(CompactionReport)
    case failed(String)

    public var isFinished: Bool {
        switch self {
        case .waiting, .running: false
        case .done, .failed: true
        }
    }
}

/// Runs that a caller follows instead of waiting on in one request: at 100 M fixes a run takes
/// minutes, longer than any one call should wait (the CLI's admin call gave up after 30 s while
/// the run went on in the server, and told the operator it had failed).
final class StartedRuns: Sendable {
    /// The outcomes of this many finished runs are kept for their callers to fetch.
    static let finishedRunsKeptMax = 16

    private struct Entry {
        var began = false
        var outcome: Result<CompactionReport, any Error>?
    }

    private let lock = ConditionLock()
    private nonisolated(unsafe) var entries: [Int: Entry] = [:]
    private nonisolated(unsafe) var nextID = 1
    private nonisolated(unsafe) var threads: [pthread_t] = []

    /// Numbers a run, and runs `body` on a thread of its own; nil once `joinAll` ran (the server stops).
    /// `body` calls the function it is given once it holds the compactor.
    func start(
        _ body:
            @escaping @Sendable (_ began: @escaping @Sendable () -> Void) -> Result<
                CompactionReport, any Error
            >
    ) -> Int? {
        lock.withLock { () -> Int? in
            guard nextID > 0 else { return nil }
            let id = nextID
            nextID += 1
            entries[id] = Entry()
            let finishedIDs = entries.filter { $0.value.outcome != nil }.keys.sorted()
            for old in finishedIDs.dropLast(Self.finishedRunsKeptMax) { entries[old] = nil }
            threads.append(
                spawnThread { [self] in
                    let outcome = body { self.lock.withLock { self.entries[id]?.began = true } }
                    lock.withLock {
                        entries[id]?.outcome = outcome
                        lock.broadcast()
                    }
                })
            return id
        }
    }

    /// The run's state once it has finished or `waitMicros` passed, whichever comes first; nil for
    /// a run this process does not know (never started, or long forgotten).
    func state(of id: Int, waitMicros: Int64, phase: () -> CompactionPhase?) -> CompactionRunState? {
        let deadline = monotonicMicros() + max(0, waitMicros)
        let entry: Entry? = lock.withLock {
            while let entry = entries[id], entry.outcome == nil {
                if !lock.wait(0, untilMonotonicMicros: deadline) { break }
            }
            return entries[id]
        }
        guard let entry else { return nil }
        switch entry.outcome {
        case .success(let report)?: return .done(report)
        case .failure(let error)?: return .failed("\(error)")
        case nil: return entry.began ? .running(phase()) : .waiting
        }
    }

    /// Refuses new runs and waits for the started ones (the compactor's stop signal ends them soon).
    func joinAll() {
        let running: [pthread_t] = lock.withLock {
            nextID = 0
            defer { threads = [] }
            return threads
        }
        for thread in running { pthread_join(thread, nil) }
    }
}

extension Compactor {
    /// Starts a run on a thread of its own and returns its id at once (`runState` follows it); nil
    /// when the compactor is stopping. A run started while another one runs waits for it.
    public func start(asOfMicros: Int64? = nil, dryRun: Bool = false) -> Int? {
        guard !stopSignal.isRequested else { return nil }
        return startedRuns.start { [self] began in
            Result { try run(asOfMicros: asOfMicros, dryRun: dryRun, began: began) }
        }
    }

    /// Where the started run `id` is, after it finished or `waitMicros` passed; nil for an unknown id.
    public func runState(_ id: Int, waitMicros: Int64) -> CompactionRunState? {
        startedRuns.state(of: id, waitMicros: waitMicros) { phase }
    }

    /// Waits for every started run to end; later `start`s are refused. After `stopSignal` was
    /// requested, so that they end soon.
    public func joinStartedRuns() { startedRuns.joinAll() }
}
