import Crypto
import Events
import Threads

// An ingest node on a log shared with other nodes (docs/scale.md, "Ingest nodes").
//
// The registry of such a node is the fold of the WHOLE shared log in the log's order, made by
// one follower (`deliver`): the records of every node, this node's own included, each applied
// once, in offset order. So every node, and every restart of one, holds the same registry at the
// same position, as one machine's registry is the fold of its one log. A node's own change is not
// applied when its append returns: the node waits until the follower has applied it.
//
// Three rules make several nodes behave as one machine:
//   1. Before deciding a change (under `mutations`), catch up: wait until the follower has
//      applied everything the log held when the change began, so the decision sees every change
//      any node made before.
//   2. A change that takes a new id (a user, a device, a geofence) is appended with the id as its
//      Msg-Id ("id-user-7"). Two nodes taking the same id at the same moment send the same Msg-Id, and
//      JetStream stores one: the other gets "duplicate", sees (once folded) that the record with
//      that id is not its change, and decides again on a registry that now holds the other's.
//      Rule 1 keeps decisions far younger than the duplicate window (120 s), which is what makes
//      the window enough.
//   3. A change that ends something which ends once (a command's expiry, its answer) is appended
//      with that end as its Msg-Id ("cmd-<command id>-expired"): every node's dispatcher may
//      decide the same expiry at the same moment, and JetStream stores one. A node decides such an
//      end only on a registry caught up with the log (rule 1 succeeded), so an end stored before
//      is seen and not decided again, and one in flight is younger than the duplicate window.
//   4. Every other registry change carries a Msg-Id derived from the change and the position it
//      was decided at, so the same change decided twice at the same position (a node's own retry,
//      a caller's retry through another node that had not yet seen the first) is stored once.
//   And a request whose token this node does not know waits, bounded, for the follower to reach
//   the log's end before it is refused (a token made through another node a moment ago).

/// The shared log as the identity service needs it; `findmy serve --log nats://` gives JetStream.
public protocol SharedEventLog: Sendable {
    var partitionCount: Int { get }
    /// Appends one record with `messageID` as its idempotency key and returns once the log holds
    /// it durably, or already held a record with that id (`duplicate`, with that record's offset).
    func appendShared(_ record: EncodedEvent, messageID: String) throws -> SharedAppend
    /// `appendShared` without blocking the caller; `completion` runs once, on another thread.
    func appendSharedLater(
        _ record: EncodedEvent, messageID: String,
        completion: @escaping @Sendable (Result<SharedAppend, any Error>) -> Void)
    /// Every offset below this is durable.
    func durableEndOffset() throws -> UInt64
}

public struct SharedAppend: Sendable, Equatable {
    public var offset: UInt64
    public var duplicate: Bool
    public init(offset: UInt64, duplicate: Bool) {
        self.offset = offset
        self.duplicate = duplicate
    }
}

/// The node's position in the shared log and the waits on it.
public final class SharedRegistry: Sendable {
    public let log: any SharedEventLog
    public let limits: Limits
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private nonisolated(unsafe) var applied: UInt64 = 0
    private nonisolated(unsafe) var delivered: UInt64 = 0
    /// Set under `mutations` after its catch-up: the first ids free when the decision in progress
    /// began. An id at or past these is one the decision takes (rule 2).
    nonisolated(unsafe) var decisionFreeIDs = FreeIDs(user: 1, device: 1, geofence: 1)
    /// Set under `mutations`: whether the catch-up before the decision in progress reached the
    /// log's end (rule 3 decides an end only then).
    nonisolated(unsafe) var decisionCaughtUp = true

    public struct Limits: Sendable {
        /// How long a request with an unknown token, or a registry change, waits for this node
        /// to fold what the log held when it began.
        public var catchUpWaitMillisMax: Int64 = 2_000
        /// How long a node waits for its own registry change to come back through the follower
        /// before answering anyway (the change is durable; the answer does not depend on it).
        public var ownChangeWaitMillisMax: Int64 = 5_000
        /// How many times a registry change is decided again after another node took its id.
        public var conflictRetriesMax = 20
        public init() {}
    }

    public init(log: any SharedEventLog, limits: Limits = Limits()) {
        self.log = log
        self.limits = limits
    }

    /// The offset after the last record folded.
    public var appliedEnd: UInt64 { lock.withLock { applied } }

    /// Records folded by `deliver` since the start (not counting those of a loaded snapshot).
    public var recordsDelivered: UInt64 { lock.withLock { delivered } }

    /// Before the follower starts: the registry starts from a snapshot at `offset`, which holds the
    /// fold of every record below it.
    func startApplied(at offset: UInt64) {
        lock.withLock {
            precondition(applied == 0 && delivered == 0, "the start position is set before any delivery")
            applied = offset
        }
    }

    /// The follower's step: folds `record` into `identity`'s registry, then moves the position
    /// and wakes the waiters. Records arrive once each, in offset order.
    public func deliver(_ record: LogRecord, into identity: IdentityService) throws {
        try identity.registry.write { state in try state.registry.apply(record) }
        lock.withLock {
            applied = record.offset + 1
            delivered += 1
            lock.broadcast()
        }
    }

    /// Waits until every record below `end` is folded; false at the deadline.
    public func waitApplied(_ end: UInt64, waitMillisMax: Int64) -> Bool {
        let deadline = monotonicMicros() + waitMillisMax * 1000
        return lock.withLock {
            while applied < end {
                if !lock.wait(0, untilMonotonicMicros: deadline) { return applied >= end }
            }
            return true
        }
    }

    /// Waits until this node has folded everything the log holds now; false when the log cannot
    /// be asked or the follower does not get there within `catchUpWaitMillisMax`.
    @discardableResult
    public func catchUp() -> Bool {
        guard let end = try? log.durableEndOffset() else { return false }
        return waitApplied(end, waitMillisMax: limits.catchUpWaitMillisMax)
    }

    /// The Msg-Id of a change that ends something once (rule 3), nil for other changes.
    public static func endMessageID(_ event: Event) -> String? {
        switch event {
        case .commandExpired(let expired): "cmd-\(expired.commandID)-expired"
        case .commandAnswered(let answered): "cmd-\(answered.commandID)-answered"
        default: nil
        }
    }

    /// The Msg-Id of a registry change: what it is (type and payload) and where it was decided.
    static func messageID(_ record: EncodedEvent, decidedAt position: UInt64) -> String {
        var bytes: [UInt8] = [record.header.type]
        bytes += record.payload
        let digest = SHA256.hash(bytes).prefix(16).map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 15)]], as: UTF8.self)
        }
        return "r\(position)-" + digest.joined()
    }
}

/// The first ids free in a registry: those a new user, device or geofence takes.
struct FreeIDs: Sendable {
    var user: UInt64
    var device: UInt64
    var geofence: UInt64
}

/// `IdentityService.mutations`: registry changes one at a time on this node and, on a shared
/// log, each decided on a registry caught up with the log (SharedRegistry's rule 1) and decided
/// again after a conflict (rule 2). The same `withLock` shape as the `Mutex` it replaces.
package final class MutationLock: Sendable {
    private let lock = ConditionLock()
    let shared: SharedRegistry?

    /// The first free ids of the registry now.
    let freeIDs: @Sendable () -> FreeIDs

    init(shared: SharedRegistry?, freeIDs: @escaping @Sendable () -> FreeIDs) {
        self.shared = shared
        self.freeIDs = freeIDs
    }

    package func withLock<R, E: Error>(_ body: (inout ()) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        var unit: Void = ()
        guard let shared else { return try body(&unit) }
        var attempt = 0
        while true {
            shared.decisionCaughtUp = shared.catchUp()
            shared.decisionFreeIDs = freeIDs()
            do {
                return try body(&unit)
            } catch {
                attempt += 1
                guard let refused = error as? APIError, refused.code == .registryConflict,
                    attempt <= shared.limits.conflictRetriesMax
                else { throw error }
            }
        }
    }
}
