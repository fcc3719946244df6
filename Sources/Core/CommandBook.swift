import Events

/// The commands of every device that are still open (requested, not yet answered or ended), and
/// when each device was last asked for each kind: what the live server needs without a database
/// (a report's answer carries a device's open commands; the rate limits and the expiry read the
/// times). Folded from the log by `Registry.apply`, so it is in the registry snapshot and a
/// restart has it back without a second scan (docs/commands.md, "State"). Closed commands are the
/// projection's (`commands` table); this keeps only what is open.
public struct CommandBook: Equatable, Sendable {
    public struct Open: Equatable, Sendable {
        public var request: CommandRequested
        /// The log offset of its `command_requested`: the command stream's event id, which only
        /// grows, so a client resuming with `Last-Event-ID` is given only what came after.
        public var requestOffset: UInt64
        /// Channels that handed the command on, in the order they did.
        public var sentChannels: [String] = []

        public init(request: CommandRequested, requestOffset: UInt64, sentChannels: [String] = []) {
            self.request = request
            self.requestOffset = requestOffset
            self.sentChannels = sentChannels
        }
    }

    public struct KindKey: Hashable, Sendable {
        public var deviceID: UInt64
        public var kind: CommandKindCode
        public init(deviceID: UInt64, kind: CommandKindCode) {
            self.deviceID = deviceID
            self.kind = kind
        }
    }

    public internal(set) var open: [UUID128: Open] = [:]
    /// Each device's open command ids, oldest first.
    public internal(set) var openByDevice: [UInt64: [UUID128]] = [:]
    /// When each device was last asked for each kind (`requestedAtMicros`), for the rate limits.
    public internal(set) var lastRequested: [KindKey: Int64] = [:]

    public init() {}

    /// The device's open commands, oldest first.
    public func open(deviceID: UInt64) -> [Open] {
        (openByDevice[deviceID] ?? []).compactMap { open[$0] }
    }

    /// The device's open `lost`, if it is marked lost.
    public func lost(deviceID: UInt64) -> Open? {
        open(deviceID: deviceID).last { $0.request.kind == .lost }
    }

    mutating func apply(_ event: Event, offset: UInt64) {
        switch event {
        case .commandRequested(let requested):
            guard open[requested.commandID] == nil else { return }
            open[requested.commandID] = Open(request: requested, requestOffset: offset)
            openByDevice[requested.deviceID, default: []].append(requested.commandID)
            let key = KindKey(deviceID: requested.deviceID, kind: requested.kind)
            lastRequested[key] = max(lastRequested[key] ?? .min, requested.requestedAtMicros)
        case .commandSent(let sent):
            guard open[sent.commandID] != nil, !open[sent.commandID]!.sentChannels.contains(sent.channel)
            else { return }
            open[sent.commandID]!.sentChannels.append(sent.channel)
        case .commandAnswered(let answered):
            close(answered.commandID)
        case .commandExpired(let expired):
            close(expired.commandID)
        case .deviceRemoved(let removed):
            for id in openByDevice[removed.deviceID] ?? [] { open[id] = nil }
            openByDevice[removed.deviceID] = nil
            lastRequested = lastRequested.filter { $0.key.deviceID != removed.deviceID }
        default:
            break
        }
    }

    private mutating func close(_ id: UUID128) {
        guard let closed = open.removeValue(forKey: id) else { return }
        let device = closed.request.deviceID
        openByDevice[device]?.removeAll { $0 == id }
        if openByDevice[device]?.isEmpty == true { openByDevice[device] = nil }
    }
}
