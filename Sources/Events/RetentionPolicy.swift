/// The retention settings of a server (docs/configuration.md, docs/retention.md).
public struct RetentionSettings: Sendable, Equatable {
    /// A fix lives this long, counted from the earlier of its `recorded_at` and `received_at`,
    /// unless its device or its user has an override.
    public var retentionDays = 30
    /// A batch envelope ("what arrived when": batch id, `received_at`, counts) lives this long from
    /// its `received_at`, or as long as its device's fix window if that is longer.
    public var arrivalsRetentionDays = 90

    public init(retentionDays: Int = 30, arrivalsRetentionDays: Int = 90) {
        self.retentionDays = retentionDays
        self.arrivalsRetentionDays = arrivalsRetentionDays
    }
}

/// Which fixes and envelopes are live: a pure function of the log's retention and erasure events,
/// the settings, and the time. The compactor applies it to log records and to database rows, and
/// unit tests apply it to values.
public struct RetentionPolicy: Sendable {
    public static let microsPerDay: Int64 = 86_400_000_000
    /// Windows are clamped to this (a century): longer ones would overflow the arithmetic.
    public static let windowDaysMax = 36_500

    public var settings: RetentionSettings
    public private(set) var userOfDevice: [UInt64: UInt64] = [:]
    public private(set) var deviceDays: [UInt64: Int] = [:]
    public private(set) var userDays: [UInt64: Int] = [:]
    /// Per device, the erasures with the offset of their event (they cover earlier records only).
    public private(set) var erasures: [UInt64: [(offset: UInt64, erase: HistoryErased)]] = [:]
    /// Per device, the offset of its removal.
    public private(set) var removedAt: [UInt64: UInt64] = [:]

    /// What the compactor knows about each command from its fold (`collectCommand`), and which
    /// command each command record belongs to: whether a command's events may go depends on
    /// whether a later record closed it (docs/retention.md, "Commands"). Filled only by `fold`, never
    /// by the registry, so the registry and its snapshot are unchanged by it.
    public private(set) var commands: [UUID128: CommandFacts] = [:]
    public private(set) var commandOfRecord: [UInt64: UUID128] = [:]
    /// Per device, the offset of its last ntfy topic (type 41): an earlier one is superseded and
    /// goes (docs/retention.md). Filled only by `collectSetting`, as `commands` is.
    public private(set) var lastNtfyTopicAt: [UInt64: UInt64] = [:]

    public init(settings: RetentionSettings) { self.settings = settings }

    /// Folds the events that decide retention; every other event is ignored.
    public mutating func apply(_ event: Event, offset: UInt64) {
        switch event {
        case .deviceEnrolled(let device):
            userOfDevice[device.deviceID] = userOfDevice[device.deviceID] ?? device.userID
        case .retentionChanged(let change):
            let days = change.days.map { min(Int($0), Self.windowDaysMax) }
            switch change.scope {
            case .device(let id): deviceDays[id] = days
            case .user(let id): userDays[id] = days
            }
        case .historyErased(let erase):
            erasures[erase.deviceID, default: []].append((offset, erase))
        case .deviceRemoved(let removed):
            removedAt[removed.deviceID] = removedAt[removed.deviceID] ?? offset
        default:
            break
        }
    }

    /// Thrown by `fold` when its `shouldStop` said so: a policy of part of the log would hold
    /// too few erasures and removals, so there is none. `offset`: the first record not read.
    public struct FoldStopped: Error, Sendable, Equatable {
        public var offset: UInt64
    }

    /// The policy a log's registry records add up to, below `end`. Fix batches are skipped by their
    /// header, without reading their payloads. `shouldStop` is asked once per `recordsPerStopCheck`
    /// records with the offset reached: at 100 M records the scan takes minutes, longer than a
    /// server's stop may wait (docs/retention.md, "Stopping during a compaction").
    public static func fold(
        _ reader: LogReader, upTo end: UInt64, settings: RetentionSettings, recordsPerStopCheck: Int = 4096,
        shouldStop: (_ offset: UInt64) -> Bool = { _ in false }
    ) throws -> RetentionPolicy {
        precondition(recordsPerStopCheck > 0)
        var policy = RetentionPolicy(settings: settings)
        var records = 0
        var stoppedAt: UInt64?
        // Fix batches and place events decide nothing here: skipped without reading their payloads.
        let wanted: (RecordHeader) -> Bool = { !$0.isPayloadRemoved && !Self.isLocationRecord($0.type) }
        try reader.read(from: 0, upTo: end, wantPayload: wanted) { record in
            records += 1
            if records % recordsPerStopCheck == 0 && shouldStop(record.offset) {
                stoppedAt = record.offset
                return false
            }
            if wanted(record.header) {
                let event = try record.event()
                policy.apply(event, offset: record.offset)
                policy.collectCommand(event, offset: record.offset)
                policy.collectSetting(event, offset: record.offset)
            }
            return true
        }
        if let stoppedAt { throw FoldStopped(offset: stoppedAt) }
        return policy
    }

    /// Remembers the offset of each device's last setting that only its last event decides
    /// (the ntfy topic, type 41), for `isSupersededSetting`. Called by the folds of the compactors.
    public mutating func collectSetting(_ event: Event, offset: UInt64) {
        if case .deviceNtfySet(let set) = event {
            lastNtfyTopicAt[set.deviceID] = max(lastNtfyTopicAt[set.deviceID] ?? 0, offset)
        }
    }

    /// Whether a device setting record (type 41) may go: a later one of its device replaced it, or
    /// its device was removed (which ends the setting). A record the fold did not see (beyond its
    /// end) is kept.
    public func isSupersededSetting(_ header: RecordHeader) -> Bool {
        guard header.type == EventType.deviceNtfySet.rawValue else { return false }
        let device = header.deviceKey
        if removedAt[device] != nil { return true }
        return (lastNtfyTopicAt[device] ?? 0) > header.offset
    }

    // MARK: windows

    /// The device's window in days: its own override, else its user's, else the default.
    public func windowDays(device: UInt64) -> Int {
        if let days = deviceDays[device] { return days }
        if let user = userOfDevice[device], let days = userDays[user] { return days }
        return min(settings.retentionDays, Self.windowDaysMax)
    }

    /// A fix of the device whose age starts before this is expired.
    public func fixCutoffMicros(device: UInt64, nowMicros: Int64) -> Int64 {
        nowMicros - Int64(windowDays(device: device)) * Self.microsPerDay
    }

    /// An envelope of the device received before this is expired.
    public func envelopeCutoffMicros(device: UInt64, nowMicros: Int64) -> Int64 {
        let days = max(min(settings.arrivalsRetentionDays, Self.windowDaysMax), windowDays(device: device))
        return nowMicros - Int64(days) * Self.microsPerDay
    }

    /// The longest fix window of any device or user: a month that ended before `now` minus this
    /// holds nothing live for anyone.
    public var longestWindowDays: Int {
        max(
            min(settings.retentionDays, Self.windowDaysMax), deviceDays.values.max() ?? 0,
            userDays.values.max() ?? 0)
    }

    /// Devices whose window is not the default, with their cutoff.
    public func overriddenCutoffs(nowMicros: Int64) -> [UInt64: Int64] {
        var cutoffs: [UInt64: Int64] = [:]
        let devices = Set(deviceDays.keys).union(userOfDevice.keys)
        for device in devices
        where windowDays(device: device) != min(settings.retentionDays, Self.windowDaysMax) {
            cutoffs[device] = fixCutoffMicros(device: device, nowMicros: nowMicros)
        }
        return cutoffs
    }

    // MARK: liveness

    public enum Death: Equatable, Sendable {
        case expired
        case erased
        case removed
    }

    /// Why a fix is dead, or nil when it is live. A fix's age counts from the earlier of its two
    /// clocks, so a device clock in the future cannot keep it past its window.
    public func fixDeath(
        device: UInt64, recordOffset: UInt64, receivedAtMicros: Int64, recordedAtMicros: Int64,
        nowMicros: Int64
    ) -> Death? {
        if let removed = removedAt[device], removed > recordOffset { return .removed }
        if let list = erasures[device],
            list.contains(where: {
                $0.offset > recordOffset && $0.erase.covers(recordedAtMicros: recordedAtMicros)
            })
        {
            return .erased
        }
        if min(recordedAtMicros, receivedAtMicros) < fixCutoffMicros(device: device, nowMicros: nowMicros) {
            return .expired
        }
        return nil
    }

    public func isEnvelopeLive(
        device: UInt64, recordOffset: UInt64, receivedAtMicros: Int64, nowMicros: Int64
    )
        -> Bool
    {
        if let removed = removedAt[device], removed > recordOffset { return false }
        return receivedAtMicros >= envelopeCutoffMicros(device: device, nowMicros: nowMicros)
    }

    /// What the header alone says about a fix batch's fixes.
    public enum HeaderVerdict: Equatable, Sendable {
        case allLive
        case allDead
        /// Some may be dead: the payload must be read.
        case mixed
    }

    public func verdict(_ header: RecordHeader, nowMicros: Int64) -> HeaderVerdict {
        let device = header.deviceKey
        if header.fixCount == 0 || header.isPayloadRemoved { return .allDead }
        if let removed = removedAt[device], removed > header.offset { return .allDead }
        let cutoff = fixCutoffMicros(device: device, nowMicros: nowMicros)
        let received = header.receivedAtMicros
        // The youngest fix's age starts at min(recordedMax, received); the oldest's at min(recordedMin, received).
        if min(header.recordedMaxMicros, received) < cutoff { return .allDead }
        let erasable =
            erasures[device]?.contains { entry in
                entry.offset > header.offset
                    && (entry.erase.fromMicros.map { header.recordedMaxMicros >= $0 } ?? true)
                    && (entry.erase.toMicros.map { header.recordedMinMicros < $0 } ?? true)
            } ?? false
        if erasable { return .mixed }
        return min(header.recordedMinMicros, received) < cutoff ? .mixed : .allLive
    }

    /// Records that carry a device's position or places, and which retention therefore reaches:
    /// fix batches, region transitions and waypoints (docs/retention.md, "Places").
    public static func isLocationRecord(_ type: UInt8) -> Bool {
        type == EventType.fixBatch.rawValue || isPlaceRecord(type)
    }

    public static func isPlaceRecord(_ type: UInt8) -> Bool {
        type == EventType.regionTransition.rawValue || type == EventType.waypointsReported.rawValue
    }

    /// When a record first holds something dead (for rolling the open segment), or nil for never.
    public func firstDeathMicros(_ header: RecordHeader) -> Int64? {
        if Self.isPlaceRecord(header.type) { return firstPlaceDeathMicros(header) }
        // A presence change ages like a transition: from its time, in its header (PresenceEvents.swift).
        if Self.isPresenceRecord(header.type) { return firstPlaceDeathMicros(header) }
        if Self.isCommandRecord(header.type) { return firstCommandDeathMicros(header) }
        let isImportAudit = header.type == EventType.historyImported.rawValue
        guard header.type == EventType.fixBatch.rawValue || isImportAudit else { return nil }
        let device = header.deviceKey
        let envelopeDeath =
            header.receivedAtMicros
            + (header.receivedAtMicros
                - envelopeCutoffMicros(device: device, nowMicros: header.receivedAtMicros))
        if let removed = removedAt[device], removed > header.offset { return .min }
        // An import's audit record ages as its batches' envelopes do (LogCompaction's plan).
        if isImportAudit || header.isPayloadRemoved || header.fixCount == 0 { return envelopeDeath }
        if erasures[device]?.contains(where: { $0.offset > header.offset }) == true { return .min }
        let windowMicros = Int64(windowDays(device: device)) * Self.microsPerDay
        return min(min(header.recordedMinMicros, header.receivedAtMicros) + windowMicros, envelopeDeath)
    }

    /// `firstDeathMicros` for a transition or a waypoints record, from its header: its recorded
    /// range is the transition's time or the waypoints' creation times, aged like a fix's.
    func firstPlaceDeathMicros(_ header: RecordHeader) -> Int64? {
        let device = header.deviceKey
        if let removed = removedAt[device], removed > header.offset { return .min }
        // Any later erasure may cover it; the plan decides exactly, after the roll.
        if erasures[device]?.contains(where: { $0.offset > header.offset }) == true { return .min }
        let windowMicros = Int64(windowDays(device: device)) * Self.microsPerDay
        // An empty list has no creation times (its recorded range is 0): it ages from its arrival.
        let agedFrom =
            EventCodec.isEmptyWaypointList(header)
            ? header.receivedAtMicros : min(header.recordedMinMicros, header.receivedAtMicros)
        return agedFrom + windowMicros
    }
}

/// One command as the compactor's fold saw it (docs/retention.md, "Commands").
public struct CommandFacts: Equatable, Sendable {
    public var deviceID: UInt64
    /// From its `command_requested`; nil when that record is gone already (a run that crashed
    /// between the rewrites of two segments): what is left of it goes too.
    public var requestedAtMicros: Int64?
    public var requestOffset: UInt64?
    /// Answered, or ended (expired, a `lost` ended by `found` or replaced by a newer one).
    public var closed = false

    public init(deviceID: UInt64) { self.deviceID = deviceID }
}

extension RetentionPolicy {
    /// Command events (types 27-31): who asked a device for what, when, and a `lost`'s message
    /// and phone number. Type 32 (a share's permission) is registry state, kept like the rest.
    public static func isCommandRecord(_ type: UInt8) -> Bool {
        type >= EventType.commandRequested.rawValue && type <= EventType.commandExpired.rawValue
    }

    /// Folds a command event into `commands`; every other event is ignored.
    public mutating func collectCommand(_ event: Event, offset: UInt64) {
        let id: UUID128
        let device: UInt64
        switch event {
        case .commandRequested(let c):
            (id, device) = (c.commandID, c.deviceID)
            var facts = commands[id] ?? CommandFacts(deviceID: device)
            if facts.requestOffset == nil {
                facts.requestedAtMicros = c.requestedAtMicros
                facts.requestOffset = offset
            }
            commands[id] = facts
        case .commandSent(let c): (id, device) = (c.commandID, c.deviceID)
        case .commandDeliveryFailed(let c): (id, device) = (c.commandID, c.deviceID)
        case .commandAnswered(let c):
            (id, device) = (c.commandID, c.deviceID)
            commands[id, default: CommandFacts(deviceID: device)].closed = true
        case .commandExpired(let c):
            (id, device) = (c.commandID, c.deviceID)
            commands[id, default: CommandFacts(deviceID: device)].closed = true
        default:
            return
        }
        if commands[id] == nil { commands[id] = CommandFacts(deviceID: device) }
        commandOfRecord[offset] = id
    }

    /// Why a command's events are dead, or nil while they live. They die together: when the
    /// device is removed; when the command is closed and an erasure after its request covers its
    /// `requested_at`, or its `requested_at` is past the device's window. An open command (a
    /// `lost` waiting for its `found`, a locate not yet answered or expired) lives whatever its age:
    /// the live server reads it from the registry, which a full scan of the log rebuilds.
    public func commandDeath(_ id: UUID128, nowMicros: Int64) -> Death? {
        guard let facts = commands[id] else { return nil }
        let device = facts.deviceID
        if let removed = removedAt[device], removed > (facts.requestOffset ?? 0) { return .removed }
        guard let requestedAt = facts.requestedAtMicros, let requestOffset = facts.requestOffset else {
            return .expired
        }
        guard facts.closed else { return nil }
        if let list = erasures[device],
            list.contains(where: {
                $0.offset > requestOffset && $0.erase.covers(recordedAtMicros: requestedAt)
            })
        {
            return .erased
        }
        if requestedAt < fixCutoffMicros(device: device, nowMicros: nowMicros) { return .expired }
        return nil
    }

    /// The commands whose events are dead at `nowMicros`. The database half does not use this:
    /// it decides from the rows, which outlive what the log still says about them.
    public func deadCommands(nowMicros: Int64) -> [UUID128] {
        commands.keys.filter { commandDeath($0, nowMicros: nowMicros) != nil }
    }

    /// `firstDeathMicros` for a command record: never while its command is open.
    func firstCommandDeathMicros(_ header: RecordHeader) -> Int64? {
        guard let id = commandOfRecord[header.offset], let facts = commands[id] else { return nil }
        if let removed = removedAt[facts.deviceID], removed > (facts.requestOffset ?? 0) { return .min }
        guard let requestedAt = facts.requestedAtMicros, let requestOffset = facts.requestOffset else {
            return .min
        }
        guard facts.closed else { return nil }
        // Any later erasure may cover it; the plan decides exactly, after the roll.
        if erasures[facts.deviceID]?.contains(where: { $0.offset > requestOffset }) == true { return .min }
        return requestedAt + Int64(windowDays(device: facts.deviceID)) * Self.microsPerDay
    }
}
