import Events

/// Which device is linked to which tailnet node, and the last presence recorded for it (see
/// docs/presence.md). Folded from the log by `Registry.apply`, so it is in the registry snapshot
/// and a restarted server knows the last state it recorded: the poller records only what differs
/// from it, which is what keeps "one event per change, never one per poll" across restarts.
public struct PresenceBook: Equatable, Sendable {
    public struct Link: Equatable, Sendable {
        public var nodeID: String
        public var nodeName: String
        public init(nodeID: String, nodeName: String) {
            self.nodeID = nodeID
            self.nodeName = nodeName
        }
    }

    /// The last change recorded for a device's linked node.
    public struct State: Equatable, Sendable {
        public var online: Bool
        public var lastSeenMicros: Int64?
        /// When the change happened (`PresenceChanged.happenedAtMicros`).
        public var changedAtMicros: Int64
        public init(online: Bool, lastSeenMicros: Int64?, changedAtMicros: Int64) {
            self.online = online
            self.lastSeenMicros = lastSeenMicros
            self.changedAtMicros = changedAtMicros
        }
    }

    public internal(set) var links: [UInt64: Link] = [:]
    public internal(set) var states: [UInt64: State] = [:]

    public init() {}

    mutating func apply(_ event: Event) {
        switch event {
        case .devicePresenceLinked(let linked):
            // A new node (or none) starts without a state: what the old node did says nothing of it.
            if links[linked.deviceID]?.nodeID != linked.nodeID { states[linked.deviceID] = nil }
            links[linked.deviceID] =
                linked.isUnlink ? nil : Link(nodeID: linked.nodeID, nodeName: linked.nodeName)
        case .presenceChanged(let changed):
            guard links[changed.deviceID]?.nodeID == changed.nodeID else { return }
            states[changed.deviceID] = State(
                online: changed.online, lastSeenMicros: changed.lastSeenMicros,
                changedAtMicros: changed.happenedAtMicros)
        case .historyErased(let erased):
            // The state is history: an erasure covering its time takes it (the log's record goes too).
            guard let state = states[erased.deviceID] else { return }
            let at = state.changedAtMicros
            if (erased.fromMicros.map { at >= $0 } ?? true) && (erased.toMicros.map { at < $0 } ?? true) {
                states[erased.deviceID] = nil
            }
        case .deviceRemoved(let removed):
            links[removed.deviceID] = nil
            states[removed.deviceID] = nil
        default:
            break
        }
    }
}

/// What a device's JSON and the panel show (docs/presence.md): online now, or offline and when it
/// was last seen. `atMicros` is `online ? now : lastSeen` (the change's time when headscale gave
/// no lastSeen).
public struct PresenceView: Equatable, Sendable {
    public var online: Bool
    public var atMicros: Int64?
    public var nodeName: String

    public init(online: Bool, atMicros: Int64?, nodeName: String) {
        self.online = online
        self.atMicros = atMicros
        self.nodeName = nodeName
    }
}

extension Registry {
    /// The presence of a linked device at `nowMicros`; nil for a device that is not linked. A
    /// linked device whose node the poller has not seen yet is offline with no time.
    public func presence(of deviceID: UInt64, nowMicros: Int64) -> PresenceView? {
        guard let link = presence.links[deviceID], liveDevice(deviceID) != nil else { return nil }
        guard let state = presence.states[deviceID] else {
            return PresenceView(online: false, atMicros: nil, nodeName: link.nodeName)
        }
        return PresenceView(
            online: state.online,
            atMicros: state.online ? nowMicros : (state.lastSeenMicros ?? state.changedAtMicros),
            nodeName: link.nodeName)
    }
}
