import Events
import Synchronization
import Threads

/// The registry folded from the log, its locks, and the one append path. `IdentityService` holds
/// one; every module that reads the registry or changes it goes through it.
///
/// Locking: `registry` is read and updated under its lock, never while appending. Mutations whose
/// append must be decided together with the registry (a new device id, a token, a push token move)
/// hold `mutations` across check, append and apply, so they are applied in log order. Reports do
/// not take `mutations`: decoding, validation and encoding run in parallel on the HTTP event-loop
/// threads, the append does not block them (the group commit answers), and a batch id in flight is
/// marked so that a concurrent retry cannot append it twice.
///
/// The append path is written once, against `RegistryLog`: this machine's log or a shared one,
/// chosen by the initialiser.
public final class RegistryStore: Sendable {
    package let log: any RegistryLog
    package let registry: RegistryCell
    package let mutations: MutationLock
    package let clockMicros: @Sendable () -> Int64
    /// Set when the last append failed, cleared by the next success; `/healthz` reports it.
    package let logFailing = Atomic<Bool>(false)
    /// Told how long each durable append took (the ingest metrics' histogram).
    let appendObserver: @Sendable (_ micros: Int64) -> Void
    /// Told what an operator should read (Identity writes it as structured log lines).
    let notes: @Sendable (StoreNote) -> Void
    /// How the registry was rebuilt at start (which snapshot, how many records after it).
    public let startReport: RegistryStartReport
    private let startFold: Mutex<RegistryFold?>

    package struct RegistryState: Sendable {
        package var registry: Registry
        package var batchesInFlight: Set<BatchKey> = []
        /// Commands whose hand-out through a report answer is being appended (CommandHandOut.swift).
        package var commandsHandedOut: Set<HandOutKey> = []
    }

    package struct BatchKey: Hashable, Sendable {
        package var deviceID: UInt64
        package var batchID: UUID128

        package init(deviceID: UInt64, batchID: UUID128) {
            self.deviceID = deviceID
            self.batchID = batchID
        }
    }

    /// Rebuilds the registry from this machine's log: from the newest valid snapshot of
    /// `snapshots` and the records after it, or from every durable record when there is none
    /// (docs/snapshots.md).
    package init(
        log: LogWriter, recentBatchesPerDeviceMax: Int, clockMicros: @escaping @Sendable () -> Int64,
        appendObserver: @escaping @Sendable (_ micros: Int64) -> Void,
        notes: @escaping @Sendable (StoreNote) -> Void, snapshots: RegistrySnapshotStore?
    ) throws {
        let local = LocalRegistryLog(writer: log)
        self.log = local
        mutations = MutationLock(log: local, freeIDs: { FreeIDs(user: 1, device: 1, geofence: 1) })
        self.clockMicros = clockMicros
        self.appendObserver = appendObserver
        self.notes = notes
        let (fold, report) = try Registry.rebuild(
            reader: LogReader(directory: log.directory, writer: log), store: snapshots,
            recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
        startReport = report
        // Kept only for a snapshotter: once the live registry changes, the copy costs its memory.
        startFold = Mutex(snapshots == nil ? nil : fold)
        registry = RegistryCell(RegistryState(registry: fold.registry))
    }

    /// An ingest node of a shared log: the registry of the newest valid snapshot of `snapshots` on
    /// `snapshotLog` (docs/snapshots.md, "Ingest nodes"), or an empty one, which `shared`'s follower
    /// continues (the caller starts it from `shared.appliedEnd` and waits for it to reach the log's
    /// end before serving).
    package init(
        shared: SharedRegistry, recentBatchesPerDeviceMax: Int,
        clockMicros: @escaping @Sendable () -> Int64,
        appendObserver: @escaping @Sendable (_ micros: Int64) -> Void,
        notes: @escaping @Sendable (StoreNote) -> Void,
        snapshots: RegistrySnapshotStore?, snapshotLog: (any SnapshotSharedLog)?
    ) {
        log = shared
        var start = RegistryFold(
            registry: Registry(recentBatchesPerDeviceMax: recentBatchesPerDeviceMax), offset: 0, segments: [])
        var report = RegistryStartReport(snapshotOffset: nil, recordsReplayed: 0, skipped: [])
        if let snapshots, let snapshotLog {
            (start, report) = Registry.sharedStart(
                log: snapshotLog, store: snapshots, recentBatchesPerDeviceMax: recentBatchesPerDeviceMax)
            shared.startApplied(at: start.offset)
        }
        let registry = RegistryCell(RegistryState(registry: start.registry))
        self.registry = registry
        mutations = MutationLock(log: shared) {
            registry.read {
                FreeIDs(
                    user: $0.registry.nextUserID, device: $0.registry.nextDeviceID,
                    geofence: $0.registry.geofences.nextID)
            }
        }
        self.clockMicros = clockMicros
        self.appendObserver = appendObserver
        self.notes = notes
        startReport = report
        startFold = Mutex(snapshots == nil || snapshotLog == nil ? nil : start)
    }

    /// Under `mutations`: whether the decision in progress sees the whole log (`RegistryLog`).
    package var decisionSeesWholeLog: Bool { log.decisionSeesWholeLog }

    /// This machine's log writer. Only the local-log paths (snapshots, compaction, offline
    /// commands, tests) ask for it; a shared-log node never starts them.
    public var writer: LogWriter {
        guard let writer = log.localWriter else {
            preconditionFailure("a node of a shared log has no local log writer; use durableEnd or append")
        }
        return writer
    }

    /// Every offset below this is durable: the local log's durable end, or the shared log's (its
    /// end as this node last folded it when the log cannot be asked).
    public var durableEnd: UInt64 { log.durableEnd }

    /// Whether the node that appends a record folds it into the registry (`RegistryLog.appenderFolds`).
    package var appenderFolds: Bool { log.appenderFolds }

    /// The fold the registry was rebuilt with, once: the snapshotter continues from it.
    package func takeStartFold() -> RegistryFold? { startFold.withLock { $0.take() } }

    /// A copy of the registry, for tests and admin listings.
    public var registrySnapshot: Registry { registry.read { $0.registry } }

    /// `find` on the registry; when it finds nothing, once more after this node has caught up with
    /// the log (on a shared log: a token made through another node a moment ago).
    package func lookUpAfterCatchUp<T>(_ find: (RegistryState) -> T?) -> T? {
        if let found = registry.read(find) { return found }
        guard log.catchUp() else { return nil }
        return registry.read(find)
    }

    // MARK: appending

    /// Appends and, once durable, applies the event: the one way the server changes its registry.
    package func appendAndApply(_ event: Event, receivedAtMicros: Int64) throws(AppendFailure) -> UInt64 {
        let encoded = EventCodec.encode(event, receivedAtMicros: receivedAtMicros)
        let start = monotonicMicros()
        let appended: SharedAppend
        do {
            appended = try log.appendChange(event, encoded)
        } catch {
            throw appendFailed(error)
        }
        appendSucceeded(startMicros: start)
        try log.settleChange(event, receivedAtMicros: receivedAtMicros, appended, in: self)
        return appended.offset
    }

    /// Appends without blocking; `completion` runs once the record is durable (or failed), on the
    /// thread that led its group commit. `messageID`: on a shared log, the record's idempotency
    /// key when it has one of its own (`SharedRegistry.endMessageID`, `placeMessageID`); the local
    /// log has no use for it.
    package func append(
        _ encoded: EncodedEvent, messageID: String? = nil,
        completion: @escaping @Sendable (Result<UInt64, AppendFailure>) -> Void
    ) {
        appendReportingDuplicates(encoded, messageID: messageID) { completion($0.map(\.offset)) }
    }

    /// `append(_:completion:)` that also says whether the log already held the record: on a
    /// shared log, a batch another node stored within JetStream's duplicate window (its Msg-Id is
    /// the batch's); on the local log, never (the registry's recent batches answer those).
    package func appendReportingDuplicates(
        _ encoded: EncodedEvent, messageID: String? = nil,
        completion: @escaping @Sendable (Result<SharedAppend, AppendFailure>) -> Void
    ) {
        let start = monotonicMicros()
        log.append(encoded, messageID: messageID) { [self] result in
            switch result {
            case .success(let appended):
                appendSucceeded(startMicros: start)
                completion(.success(appended))
            case .failure(let error):
                completion(.failure(appendFailed(error)))
            }
        }
    }

    private func appendSucceeded(startMicros: Int64) {
        appendObserver(monotonicMicros() - startMicros)
        logFailing.store(false, ordering: .relaxed)
    }

    private func appendFailed(_ error: any Error) -> AppendFailure {
        logFailing.store(true, ordering: .relaxed)
        notes(.appendFailed(error: "\(error)"))
        return .logUnavailable(reason: "\(error)")
    }
}

/// `RegistryStore.mutations`: registry changes one at a time on this node and, on a shared log,
/// each decided on a registry caught up with the log (SharedRegistry's rule 1) and decided again
/// after a conflict (rule 2). The same `withLock` shape as the `Mutex` it replaces.
package final class MutationLock: Sendable {
    private let lock = ConditionLock()
    let log: any RegistryLog

    /// The first free ids of the registry now.
    let freeIDs: @Sendable () -> FreeIDs

    init(log: any RegistryLog, freeIDs: @escaping @Sendable () -> FreeIDs) {
        self.log = log
        self.freeIDs = freeIDs
    }

    package func withLock<R, E: Error>(_ body: (inout ()) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        var unit: Void = ()
        var attempt = 0
        while true {
            log.beginDecision(freeIDs: freeIDs)
            do {
                return try body(&unit)
            } catch {
                attempt += 1
                guard (error as? any RegistryConflictReporting)?.isRegistryConflict == true,
                    attempt <= log.decisionRetriesMax
                else { throw error }
            }
        }
    }
}
