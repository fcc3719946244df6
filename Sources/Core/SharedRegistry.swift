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

/// The shared log as the registry store needs it; `findmy serve --log nats://` gives JetStream.
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

/// The node's position in the shared log and the waits on it: the store's `RegistryLog` on a
/// shared log.
public final class SharedRegistry: Sendable {
    public let log: any SharedEventLog
    public let limits: Limits
    /// SHA-256 (Crypto's, passed in: this module hashes nothing itself): the digest in a change's
    /// Msg-Id (rule 4), the same on every node.
    let digest: @Sendable ([UInt8]) -> [UInt8]
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

    public init(
        log: any SharedEventLog, limits: Limits = Limits(), digest: @escaping @Sendable ([UInt8]) -> [UInt8]
    ) {
        self.log = log
        self.limits = limits
        self.digest = digest
    }

    /// The offset after the last record folded.
    public var appliedEnd: UInt64 { lock.withLock { applied } }

    /// Records folded by `deliver` since the start (not counting those of a loaded snapshot).
    public var recordsDelivered: UInt64 { lock.withLock { delivered } }

    /// Before the follower starts: the registry starts from a snapshot at `offset`, which holds the
    /// fold of every record below it.
    package func startApplied(at offset: UInt64) {
        lock.withLock {
            precondition(applied == 0 && delivered == 0, "the start position is set before any delivery")
            applied = offset
        }
    }

    /// The follower's step: folds `record` into `store`'s registry, then moves the position and
    /// wakes the waiters. Records arrive once each, in offset order.
    public func deliver(_ record: LogRecord, into store: RegistryStore) throws {
        try store.registry.write { state in try state.registry.apply(record) }
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
    func messageID(_ record: EncodedEvent, decidedAt position: UInt64) -> String {
        var bytes: [UInt8] = [record.header.type]
        bytes += record.payload
        let hex = digest(bytes).prefix(16).map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 15)]], as: UTF8.self)
        }
        return "r\(position)-" + hex.joined()
    }
}

extension SharedRegistry: RegistryLog {
    package var healthName: String { "shared" }

    /// The shared log's durable end, or the end this node last folded when the log cannot be asked.
    package var durableEnd: UInt64 { (try? log.durableEndOffset()) ?? appliedEnd }
    package var localWriter: LogWriter? { nil }
    package var appenderFolds: Bool { false }

    package func beginDecision(freeIDs: () -> FreeIDs) {
        decisionCaughtUp = catchUp()
        decisionFreeIDs = freeIDs()
    }

    package var decisionSeesWholeLog: Bool { decisionCaughtUp }
    package var decisionRetriesMax: Int { limits.conflictRetriesMax }

    /// A registry change with its Msg-Id: the id it takes (rule 2), the end it makes (rule 3), or
    /// what it is and where it was decided (rule 4).
    package func appendChange(_ event: Event, _ encoded: EncodedEvent) throws -> SharedAppend {
        try log.appendShared(
            encoded,
            messageID: newID(event) ?? Self.endMessageID(event) ?? messageID(encoded, decidedAt: appliedEnd))
    }

    /// The change is folded by the follower, which this waits for so that the caller's next
    /// request here sees it. A new id another node took first is a `registryConflict`, which
    /// `mutations` answers by deciding again.
    package func settleChange(
        _ event: Event, receivedAtMicros: Int64, _ appended: SharedAppend, in store: RegistryStore
    ) throws(AppendFailure) {
        if !waitApplied(appended.offset + 1, waitMillisMax: limits.ownChangeWaitMillisMax) {
            store.notes(.followerBehind(offset: appended.offset, appliedEnd: appliedEnd))
        }
        if let claim = newID(event), appended.duplicate,
            !store.registry.read({ Self.holds(event, $0.registry) })
        {
            store.notes(.registryConflict(id: claim, offset: appended.offset))
            throw .registryConflict
        }
    }

    /// A record with a batch id takes the Msg-Id JetStream's `append(batch:)` gives it too.
    package func append(
        _ encoded: EncodedEvent, messageID: String?,
        completion: @escaping @Sendable (Result<SharedAppend, any Error>) -> Void
    ) {
        let messageID =
            Self.batchMessageID(encoded.header) ?? messageID
            ?? self.messageID(encoded, decidedAt: appliedEnd)
        log.appendSharedLater(encoded, messageID: messageID, completion: completion)
    }

    package func awaitFolded(_ offset: UInt64) {
        _ = waitApplied(offset + 1, waitMillisMax: limits.catchUpWaitMillisMax)
    }

    /// The Msg-Id of a change that takes a new id (rule 2), nil for others. "New" by the ids free
    /// when the decision began, never by the live registry: the follower may already hold another
    /// node's record with the same id.
    private func newID(_ event: Event) -> String? {
        switch event {
        case .userCreated(let created) where created.userID >= decisionFreeIDs.user:
            "id-user-\(created.userID)"
        case .deviceEnrolled(let enrolled) where enrolled.deviceID >= decisionFreeIDs.device:
            "id-device-\(enrolled.deviceID)"
        case .geofenceDefined(let defined) where defined.geofenceID >= decisionFreeIDs.geofence:
            "id-geofence-\(defined.geofenceID)"
        default: nil
        }
    }

    /// Whether `registry` holds `event`'s user, device or geofence as this change made it: after a
    /// duplicate, whether the record with its id is this change (a retry of this node's own
    /// append) or another node's. Two identical definitions of one owner's fence, decided at the
    /// same moment through two nodes, are one fence: nothing tells them apart, as for a retry.
    private static func holds(_ event: Event, _ registry: Registry) -> Bool {
        switch event {
        case .userCreated(let created):
            registry.users[created.userID]?.name == created.name
                && registry.principal(tokenHash: created.tokenHash) == .user(created.userID)
        case .deviceEnrolled(let enrolled):
            registry.devices[enrolled.deviceID].map {
                $0.userID == enrolled.userID && $0.uuid == enrolled.deviceUUID
            } ?? false
        case .geofenceDefined(let defined):
            registry.geofences.fences[defined.geofenceID] == defined
        default: true
        }
    }

    /// The Msg-Id of a record with a batch id: the one JetStream's `append(batch:)` gives it too.
    static func batchMessageID(_ header: RecordHeader) -> String? {
        header.idempotencyKey == .zero ? nil : "d\(header.deviceKey)-\(header.idempotencyKey)"
    }

    /// The Msg-Id of the `index`th place (region transition, waypoints) of a request whose fix
    /// batch is `batchID`: derived from the request as the batch id is, so the same request
    /// appended through two nodes (an OwnTracks MQTT message every subscribed node receives, a
    /// retry through another node) stores its places once, as its batch.
    package static func placeMessageID(deviceID: UInt64, batchID: UUID128, index: Int) -> String {
        "d\(deviceID)-\(batchID)-p\(index)"
    }
}
