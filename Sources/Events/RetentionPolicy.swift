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

    /// The policy a log's registry records add up to, below `end`. Fix batches are skipped by their
    /// header, without reading their payloads.
    public static func fold(_ reader: LogReader, upTo end: UInt64, settings: RetentionSettings) throws
        -> RetentionPolicy
    {
        var policy = RetentionPolicy(settings: settings)
        // Fix batches and place events decide nothing here: skipped without reading their payloads.
        let wanted: (RecordHeader) -> Bool = { !$0.isPayloadRemoved && !Self.isLocationRecord($0.type) }
        try reader.read(from: 0, upTo: end, wantPayload: wanted) { record in
            if wanted(record.header) {
                policy.apply(try record.event(), offset: record.offset)
            }
            return true
        }
        return policy
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
        guard header.type == EventType.fixBatch.rawValue else { return nil }
        let device = header.deviceKey
        let envelopeDeath =
            header.receivedAtMicros
            + (header.receivedAtMicros
                - envelopeCutoffMicros(device: device, nowMicros: header.receivedAtMicros))
        if let removed = removedAt[device], removed > header.offset { return .min }
        if header.isPayloadRemoved || header.fixCount == 0 { return envelopeDeath }
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
