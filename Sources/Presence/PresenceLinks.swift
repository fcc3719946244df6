import Core
import Events
import Identity
import JSON

/// A node of the tailnet that a user may link a device to (docs/presence.md).
public struct LinkableNode: Equatable, Sendable {
    /// headscale's node id (a decimal string, as its API writes it).
    public var id: String
    /// The node's name in the tailnet (headscale's `givenName`, else `name`).
    public var name: String
    public var online: Bool
    public var lastSeenMicros: Int64?

    public init(id: String, name: String, online: Bool, lastSeenMicros: Int64?) {
        self.id = id
        self.name = name
        self.online = online
        self.lastSeenMicros = lastSeenMicros
    }
}

/// What the panel needs of presence without importing the module that polls headscale: the nodes
/// a user may link to, and linking. `Presence`'s `PresenceService` is the one implementation.
public protocol PresenceLinking: Sendable {
    /// The nodes of the headscale user that maps to findmy user `userID`, by name.
    func linkableNodes(userID: UInt64) throws(APIError) -> [LinkableNode]
    /// Links device `deviceID` (owned by `userID`) to the node named or numbered `node` among
    /// `linkableNodes(userID:)`, or unlinks it (`node` nil). Returns the log offset when something
    /// changed.
    @discardableResult
    func link(deviceID: UInt64, userID: UInt64, node: String?) throws(APIError) -> UInt64?
}

// Presence's appends. Both hold the store's `mutations` across the check and the append, so a link
// and a poll's change are applied in log order and a change is decided against the state the log
// holds, never against a state another thread is about to change.
extension IdentityService {
    /// Every linked live device: its owner, its link and its last recorded state.
    public func presenceLinks() -> [(
        deviceID: UInt64, userID: UInt64, link: PresenceBook.Link, state: PresenceBook.State?
    )] {
        store.registry.read { state in
            let registry = state.registry
            return registry.presence.links.compactMap { device, link in
                guard let owner = registry.liveDevice(device)?.userID else { return nil }
                return (device, owner, link, registry.presence.states[device])
            }.sorted { $0.deviceID < $1.deviceID }
        }
    }

    /// Links `deviceID` to `node` (nil: unlinks it) for its owner `userID`. Linking to the node it
    /// is linked to already appends nothing and returns nil.
    public func setPresenceLink(deviceID: UInt64, userID: UInt64, node: LinkableNode?) throws(APIError)
        -> UInt64?
    {
        let offset = try store.mutations.withLock { _ throws(APIError) -> UInt64? in
            let (owner, current) = store.registry.read {
                ($0.registry.liveDevice(deviceID)?.userID, $0.registry.presence.links[deviceID])
            }
            guard owner == userID else { throw APIError.deviceNotFound }
            guard current?.nodeID != node?.id else { return nil }
            return try appendAndApply(
                .devicePresenceLinked(
                    DevicePresenceLinked(
                        deviceID: deviceID, userID: userID, nodeID: node?.id ?? "", nodeName: node?.name ?? ""
                    )),
                receivedAtMicros: clockMicros())
        }
        if let offset {
            StructuredLog.info(
                "presence_linked",
                [
                    "device_id": .int(Int64(deviceID)), "headscale_node_id": .string(node?.id ?? ""),
                    "offset": .int(Int64(offset)),
                ])
        }
        return offset
    }

    /// Records the change `decide` finds for a linked device, given its link and last state as the
    /// log holds them now; nil from `decide` (no change, or the device is no longer linked to that
    /// node) appends nothing. Returns the event appended.
    public func recordPresence(
        deviceID: UInt64,
        decide: (PresenceBook.Link, PresenceBook.State?) -> PresenceChanged?
    ) throws(APIError) -> PresenceChanged? {
        try store.mutations.withLock { _ throws(APIError) -> PresenceChanged? in
            let found = store.registry.read { state -> (PresenceBook.Link, PresenceBook.State?)? in
                guard state.registry.liveDevice(deviceID) != nil,
                    let link = state.registry.presence.links[deviceID]
                else { return nil }
                return (link, state.registry.presence.states[deviceID])
            }
            guard let (link, last) = found, let changed = decide(link, last) else { return nil }
            precondition(changed.deviceID == deviceID && changed.nodeID == link.nodeID)
            _ = try appendAndApply(.presenceChanged(changed), receivedAtMicros: clockMicros())
            return changed
        }
    }
}

extension PresenceView {
    /// `{"source": "headscale", "online", "last_seen"}`, or null for `view` nil: the device JSON's
    /// `presence` member (the read API's and the presence API's).
    public static func write(_ writer: inout JSONWriter, _ view: PresenceView?) {
        guard let view else { return writer.null() }
        writer.beginObject()
        writer.key("source")
        writer.string("headscale")
        writer.key("online")
        writer.bool(view.online)
        writer.key("last_seen")
        if let at = view.atMicros {
            writer.timestamp(micros: RFC3339.clampedMicros(at))
        } else {
            writer.null()
        }
        writer.endObject()
    }
}
