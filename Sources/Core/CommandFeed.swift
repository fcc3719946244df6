import Events
import Threads

/// What a command stream must hear of as the registry folds it: a command requested, a command
/// closed (and how), a device whose credentials changed. Kept by `Registry.apply` in a bounded
/// ring, numbered; the command streams' service reads what came after the number it last saw,
/// woken by `RegistryStore.registry`'s watchers (`RegistryCell`). Not in the snapshot: a stream
/// begins from the registry's open commands (its `ready`), and only what follows comes from here.
public struct CommandFeed: Sendable {
    public enum Change: Sendable, Equatable {
        /// A command for `deviceID`, its `command_requested` at `offset`.
        case requested(deviceID: UInt64, commandID: UUID128, offset: UInt64)
        /// An open command ended: `state` "answered" (reason "") or "expired" (reason as stored).
        case closed(deviceID: UInt64, commandID: UUID128, state: String, reason: String)
        /// The device was removed, or a token of it issued or revoked: a stream authenticated by an
        /// earlier token may have to end.
        case credentialsChanged(deviceID: UInt64)
    }

    /// Changes kept; a reader further behind than this is told it lost some (`changes(after:)`).
    public static let changesMax = 4_096

    private var ring: [Change] = []
    /// The number of the next change; change n is at `ring[n % changesMax]` while n >= `first`.
    public private(set) var nextNumber: UInt64 = 0

    public init() {}

    private var first: UInt64 { nextNumber - UInt64(ring.count) }

    /// The changes numbered `number` and above, oldest first; nil when some of them are gone (the
    /// reader fell more than `changesMax` behind and must start over from the registry).
    public func changes(from number: UInt64) -> [(number: UInt64, change: Change)]? {
        guard number >= first else { return nil }
        return (number..<nextNumber).map { ($0, ring[Int($0 % UInt64(Self.changesMax))]) }
    }

    /// Called by `Registry.apply` before the command book folds `event` (a closed command's device
    /// and whether it was open are read from the book as it was).
    mutating func note(_ event: Event, offset: UInt64, book: CommandBook) {
        switch event {
        case .commandRequested(let requested):
            guard book.open[requested.commandID] == nil else { return }
            append(.requested(deviceID: requested.deviceID, commandID: requested.commandID, offset: offset))
        case .commandAnswered(let answered):
            guard book.open[answered.commandID] != nil else { return }
            append(
                .closed(
                    deviceID: answered.deviceID, commandID: answered.commandID, state: "answered", reason: "")
            )
        case .commandExpired(let expired):
            guard book.open[expired.commandID] != nil else { return }
            append(
                .closed(
                    deviceID: expired.deviceID, commandID: expired.commandID, state: "expired",
                    reason: expired.reason))
        case .deviceRemoved(let removed):
            append(.credentialsChanged(deviceID: removed.deviceID))
        case .deviceTokenIssued(let issued):
            append(.credentialsChanged(deviceID: issued.deviceID))
        case .deviceTokenRevoked(let revoked):
            append(.credentialsChanged(deviceID: revoked.deviceID))
        default:
            break
        }
    }

    private mutating func append(_ change: Change) {
        if ring.count < Self.changesMax {
            ring.append(change)
        } else {
            ring[Int(nextNumber % UInt64(Self.changesMax))] = change
        }
        nextNumber += 1
    }
}

/// The registry behind its read-write lock (`RegistryStore.registry`), which also rings its
/// watchers' doorbells after a write that added to the command feed: the command streams learn of
/// a new command the moment it is folded, on whichever thread folded it (an append's completion,
/// a shared log's follower), without every writer knowing about them. The check is one comparison
/// per write; the ring happens after the lock is released.
package final class RegistryCell: Sendable {
    @usableFromInline let locked: ReadWriteLocked<RegistryStore.RegistryState>
    @usableFromInline let watchers = Doorbells()

    init(_ state: RegistryStore.RegistryState) { locked = ReadWriteLocked(state) }

    @inlinable
    package func read<Result, Failure: Error>(_ body: (RegistryStore.RegistryState) throws(Failure) -> Result)
        throws(Failure) -> Result
    {
        try locked.read(body)
    }

    @inlinable
    package func write<Result, Failure: Error>(
        _ body: (inout RegistryStore.RegistryState) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        var fed = false
        defer { if fed { watchers.ringAll() } }
        return try locked.write { (state) throws(Failure) -> Result in
            let before = state.registry.commandFeed.nextNumber
            defer { fed = state.registry.commandFeed.nextNumber != before }
            return try body(&state)
        }
    }

    /// Rings `bell` after every write that added to the command feed.
    package func watchCommandFeed(_ bell: Doorbell) { watchers.add(bell) }
    package func unwatchCommandFeed(_ bell: Doorbell) { watchers.remove(bell) }
}
