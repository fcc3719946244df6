/// Presence from the tailnet (docs/presence.md, docs/log-format.md types 34 and 35).
///
/// A device's owner links it to a node of the tailnet's control server (headscale); the server then
/// records when that node comes online and when it goes offline. Only changes are recorded, never
/// one event per poll: the poller compares what headscale says with the state folded from these
/// events (`Registry.presence`), so a restart does not record again what the log already says.
///
/// Type 35 is device history, as a fix is: its header's recorded range holds the time the change
/// happened (coming online: when the server saw it; going offline: the node's `lastSeen`, or when
/// the server saw it when headscale gave none), and retention, erasure and removal reach it as they
/// reach a fix recorded then. Type 34 is the device's configuration (as a retention override) and
/// holds no position or time of the device's: it stays.

/// The owner linked a device to a tailnet node, or unlinked it (`nodeID` empty). Type 34.
public struct DevicePresenceLinked: Equatable, Sendable {
    public var deviceID: UInt64
    /// The user who linked it (the device's owner; kept for the audit).
    public var userID: UInt64
    /// headscale's node id as its API writes it (a decimal string); empty: unlinked.
    public var nodeID: String
    /// The node's name when it was linked, for showing; the id is what is matched.
    public var nodeName: String

    public init(deviceID: UInt64, userID: UInt64, nodeID: String, nodeName: String) {
        self.deviceID = deviceID
        self.userID = userID
        self.nodeID = nodeID
        self.nodeName = nodeName
    }

    public var isUnlink: Bool { nodeID.isEmpty }
}

/// A linked node came online or went offline, as the poller saw it. Type 35.
public struct PresenceChanged: Equatable, Sendable {
    public var deviceID: UInt64
    public var nodeID: String
    public var online: Bool
    /// headscale's `lastSeen` when it gave one (nil: null, absent or the zero time).
    public var lastSeenMicros: Int64?
    /// Server clock: when the poll that saw the change was answered.
    public var observedAtMicros: Int64

    public init(
        deviceID: UInt64, nodeID: String, online: Bool, lastSeenMicros: Int64?, observedAtMicros: Int64
    ) {
        self.deviceID = deviceID
        self.nodeID = nodeID
        self.online = online
        self.lastSeenMicros = lastSeenMicros
        self.observedAtMicros = observedAtMicros
    }

    /// When the change happened: coming online when it was seen; going offline when the node was
    /// last seen, if headscale says (never later than the observation).
    public var happenedAtMicros: Int64 {
        if online { return observedAtMicros }
        return min(lastSeenMicros ?? observedAtMicros, observedAtMicros)
    }
}

extension RetentionPolicy {
    /// Presence changes (type 35): device history, aged, erased and removed like a fix recorded
    /// at the change's time (docs/retention.md, "Presence").
    public static func isPresenceRecord(_ type: UInt8) -> Bool { type == EventType.presenceChanged.rawValue }
}

extension EventCodec {
    static func encodePresence(_ event: Event, into w: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64, recordedMicros: Int64
    )? {
        switch event {
        case .devicePresenceLinked(let linked):
            w.u64(linked.deviceID)
            w.u64(linked.userID)
            w.string(linked.nodeID)
            w.string(linked.nodeName)
            return (EventType.devicePresenceLinked.rawValue, linked.deviceID, 0)
        case .presenceChanged(let changed):
            w.u64(changed.deviceID)
            w.string(changed.nodeID)
            w.u8(changed.online ? 1 : 0)
            w.u8(changed.lastSeenMicros == nil ? 0 : 1)
            w.i64(changed.lastSeenMicros ?? 0)
            w.i64(changed.observedAtMicros)
            return (EventType.presenceChanged.rawValue, changed.deviceID, changed.happenedAtMicros)
        default:
            return nil
        }
    }

    static func decodePresence(_ type: EventType, _ r: inout ByteReader) throws -> Event? {
        switch type {
        case .devicePresenceLinked:
            return .devicePresenceLinked(
                DevicePresenceLinked(
                    deviceID: try r.u64(), userID: try r.u64(), nodeID: try r.string(),
                    nodeName: try r.string()))
        case .presenceChanged:
            let deviceID = try r.u64()
            let nodeID = try r.string()
            let online = try r.u8()
            let hasLastSeen = try r.u8()
            let lastSeen = try r.i64()
            guard online <= 1, hasLastSeen <= 1 else {
                throw DecodeError.invalid("a presence flag is not 0 or 1")
            }
            return .presenceChanged(
                PresenceChanged(
                    deviceID: deviceID, nodeID: nodeID, online: online == 1,
                    lastSeenMicros: hasLastSeen == 1 ? lastSeen : nil, observedAtMicros: try r.i64()))
        default:
            return nil
        }
    }
}
