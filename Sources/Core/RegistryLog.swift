import Events

/// The log the registry's changes go to, as the store's one append path needs it. There are two:
/// this machine's log (`LocalRegistryLog`) and a log shared with other ingest nodes
/// (`SharedRegistry`, docs/scale.md "Ingest nodes"). Everything that differs between them is said
/// by the implementations of this protocol; no other code asks which kind of log it holds.
package protocol RegistryLog: Sendable {
    /// The log's state in `/healthz`: "writable" for this machine's log, "shared" for a shared one.
    var healthName: String { get }
    /// Every offset below this is durable.
    var durableEnd: UInt64 { get }
    /// This machine's log writer (snapshots, compaction, offline commands, the log's metrics); nil
    /// on a shared log, where nothing may ask for one.
    var localWriter: LogWriter? { get }
    /// Whether the node that appends a record folds it into its registry itself: yes on this
    /// machine's log, whose appends are the registry's only source; no on a shared log, where the
    /// follower folds every node's records, this node's own included, in the log's order.
    var appenderFolds: Bool { get }

    /// Under `MutationLock`, before each attempt at a decision: catches up with the log (a shared
    /// log's rule 1) and notes the ids free now, by which a change taking a new id is known (rule 2).
    func beginDecision(freeIDs: () -> FreeIDs)
    /// Under `MutationLock`: whether the decision in progress sees the whole log (an end such as
    /// a command's expiry is decided only then).
    var decisionSeesWholeLog: Bool { get }
    /// How many times a decision is made again after `AppendFailure.registryConflict`.
    var decisionRetriesMax: Int { get }
    /// Waits until this node has folded everything the log holds now. True when a second look at
    /// the registry may find what the first did not; false when it cannot (this machine's registry
    /// is always whole, or the shared log could not be asked in time).
    func catchUp() -> Bool

    /// Appends a registry change (`RegistryStore.appendAndApply`) and returns once it is durable,
    /// with the idempotency key the log gives such a change.
    func appendChange(_ event: Event, _ encoded: EncodedEvent) throws -> SharedAppend
    /// After `appendChange` succeeded: makes the change visible in `store`'s registry, and throws
    /// `registryConflict` when the record the log holds under the change's key is another node's.
    func settleChange(
        _ event: Event, receivedAtMicros: Int64, _ appended: SharedAppend, in store: RegistryStore
    ) throws(AppendFailure)
    /// Appends without blocking; `completion` runs once the record is durable (or failed).
    /// `messageID`: the record's own idempotency key on a shared log, when it has one.
    func append(
        _ encoded: EncodedEvent, messageID: String?,
        completion: @escaping @Sendable (Result<SharedAppend, any Error>) -> Void)
    /// Waits, bounded, until the record at `offset` is folded into this node's registry: a
    /// duplicate's first result is read after it.
    func awaitFolded(_ offset: UInt64)
}

/// Why an append did not store a record; Identity's `APIError` turns each into its 503.
public enum AppendFailure: Error, Equatable, RegistryConflictReporting {
    /// The log did not store the record durably (disk full, an I/O error, the cluster out of
    /// reach): nothing was stored. `reason` is the log's error, as an operator reads it.
    case logUnavailable(reason: String)
    /// Other nodes took the new id this change claimed at the same moment, again and again.
    case registryConflict

    package var isRegistryConflict: Bool { self == .registryConflict }
}

/// An error that may say "another node took the id this change claimed" (`MutationLock` then
/// decides again): `AppendFailure`, and the errors callers turn it into.
package protocol RegistryConflictReporting: Error {
    var isRegistryConflict: Bool { get }
}

/// What the store has to tell an operator; the caller writes each as a structured log line.
public enum StoreNote: Sendable, Equatable {
    case appendFailed(error: String)
    /// A node's own change did not come back through the follower in time (it is durable all the same).
    case followerBehind(offset: UInt64, appliedEnd: UInt64)
    case registryConflict(id: String, offset: UInt64)
    case commandAnswered(deviceID: UInt64, commandID: UUID128)
}

/// The first ids free in a registry: those a new user, device or geofence takes.
package struct FreeIDs: Sendable {
    package var user: UInt64
    package var device: UInt64
    package var geofence: UInt64
}

/// This machine's log: appends go to its writer, and the appender folds what it appended.
package struct LocalRegistryLog: RegistryLog {
    package let writer: LogWriter

    package init(writer: LogWriter) { self.writer = writer }

    package var healthName: String { "writable" }
    package var durableEnd: UInt64 { writer.durableEnd }
    package var localWriter: LogWriter? { writer }
    package var appenderFolds: Bool { true }

    package func beginDecision(freeIDs: () -> FreeIDs) {}
    package var decisionSeesWholeLog: Bool { true }
    package var decisionRetriesMax: Int { 0 }
    package func catchUp() -> Bool { false }

    package func appendChange(_ event: Event, _ encoded: EncodedEvent) throws -> SharedAppend {
        SharedAppend(offset: try writer.append(encoded), duplicate: false)
    }

    package func settleChange(
        _ event: Event, receivedAtMicros: Int64, _ appended: SharedAppend, in store: RegistryStore
    ) throws(AppendFailure) {
        store.registry.write {
            $0.registry.apply(event, offset: appended.offset, receivedAtMicros: receivedAtMicros)
        }
    }

    /// Never a duplicate: the registry's recent batches answer a retry before it is appended.
    package func append(
        _ encoded: EncodedEvent, messageID: String?,
        completion: @escaping @Sendable (Result<SharedAppend, any Error>) -> Void
    ) {
        writer.append(encoded) { result in
            completion(result.map { SharedAppend(offset: $0, duplicate: false) }.mapError { $0 })
        }
    }

    package func awaitFolded(_ offset: UInt64) {}
}
