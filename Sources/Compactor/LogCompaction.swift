import Events
import Threads

/// What the compactor does with one record. A pure function of the record, the policy and the time,
/// so the dry run, the count and the rewrite decide the same.
public enum RecordPlan: Equatable, Sendable {
    case keep
    /// A fix batch without its dead fixes (`removedFixes` of them).
    case shrink(FixBatch, removedFixes: Int)
    /// Every fix is dead but "what arrived when" lives: keep the header only.
    case envelope(removedFixes: Int, erased: Bool)
    /// The record goes: a fix batch with nothing live, an envelope past the arrivals window or of a
    /// removed device, or an import's audit record (type 40) by the envelopes' rule.
    case drop(removedFixes: Int)
    /// A waypoints record without its dead waypoints (`removedPlaces` of them); for a whole list,
    /// possibly none left, which still says "no regions" to a later fold.
    case shrinkPlaces(WaypointsReported, removedPlaces: Int)
    /// A transition, or a waypoints record, with nothing live left: the record goes, no envelope.
    case dropPlaces(removedPlaces: Int)
    /// An event of a command that is dead (docs/retention.md, "Commands"): the record goes.
    case dropCommand
    /// A presence change (type 35) past its window, erased or removed (docs/retention.md,
    /// "Presence"): the record goes.
    case dropPresence

    public var removedFixes: Int {
        switch self {
        case .keep, .shrinkPlaces, .dropPlaces, .dropCommand, .dropPresence: 0
        case .shrink(_, let count), .envelope(let count, _), .drop(let count): count
        }
    }

    /// Transitions and waypoints removed.
    public var removedPlaces: Int {
        switch self {
        case .shrinkPlaces(_, let count), .dropPlaces(let count): count
        case .keep, .shrink, .envelope, .drop, .dropCommand, .dropPresence: 0
        }
    }

    /// Command events removed.
    public var removedCommandEvents: Int { self == .dropCommand ? 1 : 0 }

    /// Presence changes removed.
    public var removedPresenceEvents: Int { self == .dropPresence ? 1 : 0 }
}

extension RetentionPolicy {
    public func plan(_ record: LogRecord, nowMicros: Int64) throws -> RecordPlan {
        let header = record.header
        // Transitions and waypoints hold positions too: the same windows, erasures and removals.
        if Self.isPlaceRecord(header.type) { return try planPlaces(record, nowMicros: nowMicros) }
        // Presence changes are device history: they live as a fix recorded at the change's time
        // would (their header's recorded range), so no decoding.
        if Self.isPresenceRecord(header.type) {
            let dead =
                fixDeath(
                    device: header.deviceKey, recordOffset: header.offset,
                    receivedAtMicros: header.receivedAtMicros, recordedAtMicros: header.recordedMinMicros,
                    nowMicros: nowMicros) != nil
            return dead ? .dropPresence : .keep
        }
        // Commands say who located whom and when, a lost one the owner's message and phone: they
        // go with their command, decided by the fold (which knows whether a later record closed it).
        if Self.isCommandRecord(header.type) {
            guard let id = commandOfRecord[header.offset] else { return .keep }
            return commandDeath(id, nowMicros: nowMicros) == nil ? .keep : .dropCommand
        }
        let device = header.deviceKey
        let envelopeLive = isEnvelopeLive(
            device: device, recordOffset: header.offset, receivedAtMicros: header.receivedAtMicros,
            nowMicros: nowMicros)
        // An import's audit record (which file, its SHA-256, counts, the batch ids; no coordinate)
        // is "what arrived when" like its batches' envelopes, and lives as they do: it goes with its
        // device's removal or past the arrivals window, and an erasure leaves it (docs/retention.md).
        if header.type == EventType.historyImported.rawValue {
            return envelopeLive ? .keep : .drop(removedFixes: 0)
        }
        // A device's ntfy topic is decided by its last event alone: the ones before go, and all go
        // with the device's removal (the URL is a way to ring someone's phone).
        if isSupersededSetting(header) { return .drop(removedFixes: 0) }
        // Registry events (users, devices, tokens, retention, erasures, removals) are never dropped:
        // they hold no coordinates, and without them a rebuild would not know what to delete.
        guard header.type == EventType.fixBatch.rawValue else { return .keep }
        if header.isPayloadRemoved { return envelopeLive ? .keep : .drop(removedFixes: 0) }
        let verdict = verdict(header, nowMicros: nowMicros)
        if verdict == .allLive { return .keep }
        let removedAll = removedAt[device].map { $0 > header.offset } ?? false
        var survivors: [Fix] = []
        var erased = false
        var batch: FixBatch?
        if verdict == .allDead && !removedAll {
            survivors = []
        } else if !removedAll {
            guard case .fixBatch(let decoded) = try record.event() else { return .keep }
            batch = decoded
            for fix in decoded.fixes {
                switch fixDeath(
                    device: device, recordOffset: header.offset, receivedAtMicros: header.receivedAtMicros,
                    recordedAtMicros: fix.recordedAtMicros, nowMicros: nowMicros)
                {
                case nil: survivors.append(fix)
                case .erased?: erased = true
                case .expired?, .removed?: break
                }
            }
        }
        let total = Int(header.fixCount)
        if var batch, !survivors.isEmpty {
            if survivors.count == total { return .keep }
            batch.fixes = survivors
            return .shrink(batch, removedFixes: total - survivors.count)
        }
        if removedAll || !envelopeLive { return .drop(removedFixes: total) }
        return .envelope(removedFixes: total, erased: erased)
    }
}

extension RetentionPolicy {
    /// A transition lives as a fix recorded at its time would. A waypoint lives as a fix recorded at
    /// its creation time (`tst`) would: it describes a region (often home or work), so retention
    /// counts from when it was made, an erasure covers it when that time is in the erased range
    /// (an unbounded erasure: every waypoint before it), and a removal takes every one.
    /// docs/retention.md, "Places".
    func planPlaces(_ record: LogRecord, nowMicros: Int64) throws -> RecordPlan {
        let header = record.header
        if header.type == EventType.regionTransition.rawValue {
            // Its recorded range is its time: no need to decode it.
            let dead =
                fixDeath(
                    device: header.deviceKey, recordOffset: header.offset,
                    receivedAtMicros: header.receivedAtMicros, recordedAtMicros: header.recordedMinMicros,
                    nowMicros: nowMicros) != nil
            return dead ? .dropPlaces(removedPlaces: 1) : .keep
        }
        return planPlace(
            try record.event(), offset: header.offset, receivedAtMicros: header.receivedAtMicros,
            nowMicros: nowMicros)
    }

    /// The decision for one decoded place event, stored at `offset` and received at
    /// `receivedAtMicros`; `.keep` for any other event.
    public func planPlace(_ event: Event, offset: UInt64, receivedAtMicros: Int64, nowMicros: Int64)
        -> RecordPlan
    {
        func dead(_ device: UInt64, recordedAtMicros: Int64) -> Bool {
            fixDeath(
                device: device, recordOffset: offset, receivedAtMicros: receivedAtMicros,
                recordedAtMicros: recordedAtMicros, nowMicros: nowMicros) != nil
        }
        switch event {
        case .regionTransition(let transition):
            return dead(transition.deviceID, recordedAtMicros: transition.recordedAtMicros)
                ? .dropPlaces(removedPlaces: 1) : .keep
        case .waypointsReported(var reported):
            let device = reported.deviceID
            let removed = removedAt[device].map { $0 > offset } ?? false
            let survivors =
                removed
                ? [] : reported.waypoints.filter { !dead(device, recordedAtMicros: $0.createdAtMicros) }
            let removedPlaces = reported.waypoints.count - survivors.count
            // A list of no regions holds no position, but ages out with its arrival: every list
            // before it arrived earlier (as far as the server clock tells), so holds nothing live.
            let listLive =
                !removed && reported.complete
                && receivedAtMicros >= fixCutoffMicros(device: device, nowMicros: nowMicros)
            if survivors.isEmpty && !listLive { return .dropPlaces(removedPlaces: removedPlaces) }
            if removedPlaces == 0 { return .keep }
            reported.waypoints = survivors
            return .shrinkPlaces(reported, removedPlaces: removedPlaces)
        default:
            return .keep
        }
    }
}

extension RecordPlan {
    /// What `LogWriter.rewriteSegment` is told to do.
    public func decision(for header: RecordHeader) -> RewriteDecision {
        switch self {
        case .keep:
            return .keep
        case .shrink(let batch, _):
            return .replace(EventCodec.encode(.fixBatch(batch), receivedAtMicros: header.receivedAtMicros))
        case .envelope(_, let erased):
            var envelope = header
            envelope.flags |= LogFormat.recordFlagPayloadRemoved
            envelope.codec = Codec.none.rawValue
            envelope.uncompressedBytes = 0
            if erased {
                // When an erased range was can be telling too: keep only when it arrived.
                envelope.recordedMinMicros = 0
                envelope.recordedMaxMicros = 0
            }
            return .replace(EncodedEvent(header: envelope, payload: []))
        case .shrinkPlaces(let reported, _):
            return .replace(
                EventCodec.encode(.waypointsReported(reported), receivedAtMicros: header.receivedAtMicros))
        case .drop, .dropPlaces, .dropCommand, .dropPresence:
            return .drop
        }
    }
}

/// What one compaction did to the log (or, in a dry run, would do).
public struct LogCompactionReport: Sendable, Equatable {
    public var segmentsScanned = 0
    public var segmentsRewritten = 0
    public var segmentsDeleted = 0
    public var activeSegmentRolled = false
    public var fixesRemoved = 0
    /// Region transitions and waypoints removed (docs/retention.md, "Places").
    public var placesRemoved = 0
    /// Command events removed (docs/retention.md, "Commands").
    public var commandEventsRemoved = 0
    /// Presence changes removed (docs/retention.md, "Presence").
    public var presenceEventsRemoved = 0
    public var recordsShrunk = 0
    public var envelopesMade = 0
    public var recordsDropped = 0
    public var bytesBefore = 0
    public var bytesAfter = 0
    public var bytesFreed: Int { max(0, bytesBefore - bytesAfter) }

    public init() {}
}

/// The log half of a compaction run (docs/retention.md).
public struct LogCompaction {
    public let writer: LogWriter
    public let policy: RetentionPolicy
    public let nowMicros: Int64
    /// Whole segments are deleted only below this offset (the projector's checkpoint, when it runs
    /// in this process): a reader past it never opens them. nil: no reader to wait for.
    public var deleteBelowOffset: UInt64?
    /// Once requested, no further segment is rewritten or deleted: each one is replaced whole
    /// (temporary file, rename), so the log is consistent between any two.
    public var stopSignal: StopSignal?
    /// Told, before each sealed segment, how many were looked at of how many (progress lines).
    public var onSegment: ((_ done: Int, _ total: Int) -> Void)?

    public init(
        writer: LogWriter, policy: RetentionPolicy, nowMicros: Int64, deleteBelowOffset: UInt64? = nil
    ) {
        self.writer = writer
        self.policy = policy
        self.nowMicros = nowMicros
        self.deleteBelowOffset = deleteBelowOffset
    }

    public func run(dryRun: Bool) throws -> LogCompactionReport {
        var report = LogCompactionReport()
        let reader = LogReader(directory: writer.directory, writer: writer)
        // The open segment: rolled when it holds anything dead, so that nothing outlives its window
        // by more than the compaction interval while waiting for the segment to fill or age.
        if let active = try writer.segmentLayout().active {
            var holdsDead = false
            let headersOnly: (RecordHeader) -> Bool = { _ in false }
            try reader.read(from: active, wantPayload: headersOnly) { record in
                if let death = policy.firstDeathMicros(record.header), death <= nowMicros { holdsDead = true }
                return !holdsDead
            }
            if holdsDead {
                report.activeSegmentRolled = true
                if !dryRun { try writer.roll() }
            }
        }
        let layout = try writer.segmentLayout()
        var sealed = layout.sealed
        if dryRun && report.activeSegmentRolled, let active = layout.active {
            sealed.append(SealedSegment(base: active, endOffset: writer.durableEnd, bytes: 0))
        }
        var prefix = true
        for (index, segment) in sealed.enumerated() {
            if stopSignal?.isRequested == true { break }
            onSegment?(index, sealed.count)
            report.segmentsScanned += 1
            var plans = SegmentPlan()
            try reader.read(from: segment.base, upTo: segment.endOffset) { record in
                let plan = try policy.plan(record, nowMicros: nowMicros)
                plans.add(plan)
                return true
            }
            let isLastFile = index == sealed.count - 1 && layout.active == nil
            let deletable =
                prefix && plans.kept == 0 && !isLastFile
                && (deleteBelowOffset.map { segment.endOffset <= $0 } ?? true)
            if deletable {
                report.segmentsDeleted += 1
                report.recordsDropped += plans.dropped
                report.fixesRemoved += plans.fixesRemoved
                report.placesRemoved += plans.placesRemoved
                report.commandEventsRemoved += plans.commandEventsRemoved
                report.presenceEventsRemoved += plans.presenceEventsRemoved
                report.bytesBefore += segment.bytes
                if !dryRun { try writer.deleteFirstSegment(base: segment.base) }
                continue
            }
            prefix = false
            guard plans.changes > 0 else { continue }
            report.segmentsRewritten += 1
            report.fixesRemoved += plans.fixesRemoved
            report.placesRemoved += plans.placesRemoved
            report.commandEventsRemoved += plans.commandEventsRemoved
            report.presenceEventsRemoved += plans.presenceEventsRemoved
            report.recordsShrunk += plans.shrunk
            report.envelopesMade += plans.envelopes
            report.recordsDropped += plans.dropped
            if dryRun {
                report.bytesBefore += segment.bytes
                report.bytesAfter += segment.bytes
                continue
            }
            let rewrite = try writer.rewriteSegment(base: segment.base) { record in
                try policy.plan(record, nowMicros: nowMicros).decision(for: record.header)
            }
            report.bytesBefore += rewrite.bytesBefore
            report.bytesAfter += rewrite.bytesAfter
        }
        return report
    }
}

/// Tallies of the plans of one segment's records.
struct SegmentPlan {
    /// Records that stay in the file in some form.
    var kept = 0
    var changes = 0
    var shrunk = 0
    var envelopes = 0
    var dropped = 0
    var fixesRemoved = 0
    var placesRemoved = 0
    var commandEventsRemoved = 0
    var presenceEventsRemoved = 0

    mutating func add(_ plan: RecordPlan) {
        fixesRemoved += plan.removedFixes
        placesRemoved += plan.removedPlaces
        commandEventsRemoved += plan.removedCommandEvents
        presenceEventsRemoved += plan.removedPresenceEvents
        switch plan {
        case .keep: kept += 1
        case .shrink, .shrinkPlaces:
            kept += 1
            changes += 1
            shrunk += 1
        case .envelope:
            kept += 1
            changes += 1
            envelopes += 1
        case .drop, .dropPlaces, .dropCommand, .dropPresence:
            changes += 1
            dropped += 1
        }
    }
}
