import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The one writer of a log directory: appends records with group commit and returns only once
/// they are durable. Safe to call from many threads; appends block the calling thread.
///
/// Group commit is leader/follower: the first appender that finds no write in flight takes every
/// queued record, writes them with one pwrite and one fdatasync, and wakes the others; appends that
/// arrive meanwhile queue up for the next leader. No extra thread, and no handoff latency.
///
/// Each appender sleeps on its ticket's own `WakeUp`, so a group commit wakes exactly the
/// appenders it covered, plus the head of the queue to lead the next group, rather than
/// broadcasting to every waiter (at 64 appenders most of a broadcast went back to sleep). The
/// rule that keeps this live: whenever `writing` turns false with tickets queued, the head of the
/// queue is woken (`releaseLeadership`); whenever a ticket gets its outcome, it is woken.
///
/// `append(_:completion:)` queues a record without blocking its caller (an HTTP event-loop thread
/// must not sleep through an fdatasync). Nobody waits on such a ticket, so the writer's own
/// committer threads, started with the first of them, lead in its place: one is woken whenever
/// such a ticket is at the head of the queue, and the completions run on whichever thread led the
/// group, after the writer's lock is released. There are `committerThreads` of them so that one
/// can start the next group's write while another still runs the last group's completions
/// (answering HTTP requests), as blocking appenders do each on their own thread.
public final class LogWriter: @unchecked Sendable {
    public let directory: String
    public private(set) var recovery: RecoveryReport
    /// The log's identity, carried by every segment this writer creates (docs/log-format.md, "Log
    /// identity"). Never zero, except when opened with `assignsLogID` off on a log that has none.
    public private(set) var logID: UUID128 = .zero
    let options: LogOptions
    let segments: SegmentDirectory
    private let io: any FileIO
    private let lockFD: Int32
    private let watermarkFD: Int32

    private static let conditionDone = 0
    private let sync = ConditionLock(conditions: 1)

    // Guarded by `sync`.
    private var queue: [Ticket] = []
    private var nextOffset: UInt64
    private var durable: UInt64
    private var writing = false
    private var closed = false
    /// The group the leader is writing: after a failed sync its leader never returns, so `close`
    /// fails these tickets in its place.
    private var inFlight: [Ticket] = []
    /// Set before `onSyncFailure` runs: the thread that failed keeps leadership for good (it never
    /// returns), so `close` must neither wait for it nor release what it still uses.
    let syncFailed = Atomic<Bool>(false)
    /// Started by the first `append(_:completion:)`; joined by `close`.
    private var committers: [pthread_t] = []
    private static let committerThreads = 2
    private let committerWakeUp = WakeUp()

    private var counters = LogWriterStatistics()
    /// Rung whenever the durable end moves, and on close (`addDoorbell`).
    private let durableBells = Doorbells()

    // Owned by whoever holds leadership (`writing == true`).
    private var active: ActiveSegment?
    private var frameBuffer: [UInt8] = []
    /// Bytes of the last group record written, for the statistics.
    private var lastGroupBytes = 0

    /// Opens (creating if needed) the log in `directory`, recovering it as docs/log-format.md says.
    public init(directory: String, options: LogOptions = LogOptions()) throws {
        self.directory = directory
        self.options = options
        self.io = options.io
        self.segments = SegmentDirectory(path: directory, io: options.io)
        do {
            try io.makeDirectory(directory)
        } catch {
            throw LogError(error)
        }
        lockFD = try Self.takeLock(segments, io)
        do {
            watermarkFD = try io.open(segments.watermarkPath, flags: O_CREAT | O_RDWR, mode: 0o600)
        } catch {
            io.close(lockFD)
            throw LogError(error)
        }
        let recovered: Recovered
        do {
            var report = RecoveryReport()
            recovered = try Self.recover(segments, options, &report)
            active = recovered.active
            nextOffset = recovered.nextOffset
            durable = recovered.nextOffset
            report.nextOffset = recovered.nextOffset
            logID = recovered.logID
            recovery = report
        } catch {
            io.close(watermarkFD)
            io.close(lockFD)
            throw LogError(error)
        }
        do {
            if try segments.bases().isEmpty {
                if logID == .zero { logID = UUID128.random() }
                active = try createSegment(base: nextOffset)
            } else if recovered.newestLogID == .zero && options.assignsLogID {
                try giveTheLogItsID()
                recovery.logIDAssignedAtOffset = nextOffset
            }
            try io.syncDirectory(directory)
            try io.writeAll(watermarkFD, Watermark.encode(durable), at: 0, path: segments.watermarkPath)
        } catch {
            // Fully initialised: `deinit` runs after this throw; `close` releases every descriptor
            // once (the active segment's included) and makes that second call return at once.
            close()
            throw LogError(error)
        }
    }

    deinit { close() }

    /// Every offset below this is durable.
    public var durableEnd: UInt64 { sync.withLock { durable } }

    /// Whether `close` ran: nothing more will become durable through this writer.
    public var isClosed: Bool { sync.withLock { closed } }

    /// Counters since this writer opened the log, for metrics and benchmarks.
    public var statistics: LogWriterStatistics { sync.withLock { counters } }

    /// Appends an event and returns its offset once it is durable.
    @discardableResult
    public func append(_ event: Event, receivedAtMicros: Int64? = nil) throws -> UInt64 {
        try append(EventCodec.encode(event, receivedAtMicros: receivedAtMicros ?? options.clockMicros()))
    }

    /// Appends an encoded event and returns its offset once it is durable. Encoding (and LZ4) is
    /// done by the caller's thread, so that many appenders compress in parallel.
    @discardableResult
    public func append(_ encoded: EncodedEvent) throws -> UInt64 {
        let ticket = Ticket(encoded: encoded)
        sync.lock()
        defer { sync.unlock() }
        guard !closed else { throw LogError.closed }
        ticket.offset = nextOffset
        nextOffset += 1
        queue.append(ticket)
        while ticket.outcome == nil {
            if writing {
                sync.wait(ticket.wakeUp)
                continue
            }
            leadGroupCommit()
        }
        switch ticket.outcome! {
        case .success: return ticket.offset
        case .failure(let error): throw error
        }
    }

    /// Appends an encoded event without blocking: `completion` gets its offset once the record is
    /// durable, or the error that failed it (nothing of it acknowledged). It runs on the thread
    /// that led the group commit, without the writer's lock, and must be quick: the next group
    /// waits for it. It may run before this call returns (a closed writer fails at once).
    public func append(
        _ encoded: EncodedEvent, completion: @escaping @Sendable (Result<UInt64, LogError>) -> Void
    ) {
        let ticket = Ticket(encoded: encoded, completion: completion)
        sync.lock()
        guard !closed else {
            sync.unlock()
            completion(.failure(.closed))
            return
        }
        if committers.isEmpty { committers = (0..<Self.committerThreads).map { _ in startCommitter() } }
        ticket.offset = nextOffset
        nextOffset += 1
        queue.append(ticket)
        if !writing && queue.count == 1 { committerWakeUp.signal() }
        sync.unlock()
    }

    /// Leads the group commits that only non-blocking appenders are waiting for, until `close`.
    /// Each committer thread runs this.
    private func runCommitter() {
        sync.lock()
        while !closed {
            if writing || queue.isEmpty {
                sync.wait(committerWakeUp)
                continue
            }
            leadGroupCommit()
        }
        sync.unlock()
    }

    /// One group commit led by this thread, blocking appender or committer: takes the group,
    /// writes and syncs it without the lock, settles its tickets, and runs the completions of the
    /// non-blocking ones without the lock. Called and returns with `sync` held and `writing` false.
    private func leadGroupCommit() {
        writing = true
        if options.groupCommitDelayMicros > 0 {
            sync.unlock()
            usleep(UInt32(options.groupCommitDelayMicros))
            sync.lock()
        }
        let group = takeGroup()
        inFlight = group
        sync.unlock()
        let failure = commit(group)
        sync.lock()
        let completed = finish(group, failure: failure)
        sync.unlock()
        if failure == nil { durableBells.ringAll() }
        complete(completed)
        sync.lock()
    }

    private func startCommitter() -> pthread_t {
        // Unretained: the writer joins these threads in `close`, which `deinit` calls; a strong
        // reference here would keep an unclosed writer, and its threads, alive for ever.
        let writer = Unmanaged.passUnretained(self)
        return spawnThread { writer.takeUnretainedValue().runCommitter() }
    }

    private func complete(_ tickets: [Ticket]) {
        for ticket in tickets {
            switch ticket.outcome! {
            case .success: ticket.completion!(.success(ticket.offset))
            case .failure(let error): ticket.completion!(.failure(error))
            }
        }
    }

    /// Rings `bell` whenever records become durable, and when the writer closes: a tailing reader
    /// sleeps on it (with other sources, its stop request) instead of polling. `removeDoorbell`
    /// when done.
    public func addDoorbell(_ bell: Doorbell) { durableBells.add(bell) }
    public func removeDoorbell(_ bell: Doorbell) { durableBells.remove(bell) }

    /// Waits until the record at `offset` is durable, or the deadline passes; returns `durableEnd`.
    public func waitForDurable(beyond offset: UInt64, timeoutMicros: Int64) -> UInt64 {
        let deadline = monotonicMicros() + timeoutMicros
        sync.lock()
        defer { sync.unlock() }
        while durable <= offset && !closed {
            if !sync.wait(Self.conditionDone, untilMonotonicMicros: deadline) { break }
        }
        return durable
    }

    /// Seals the active segment (if it holds any record) so that the next append starts a new one.
    public func roll() throws {
        try lead {
            if let segment = active, segment.seal.recordCount > 0 { try sealActive(segment) }
        }
    }

    /// Stops accepting appends, waits for the group in flight, and releases the writer lock.
    public func close() {
        sync.lock()
        if closed {
            sync.unlock()
            return
        }
        closed = true
        // After a failed sync the leader never finishes its group: fail its group and what is
        // queued (nothing unsynced is acknowledged), and leave the descriptors and threads to the
        // process's exit. A sync that fails while this waits wakes it (`stopAfterSyncFailure`).
        while writing && !syncFailed.load(ordering: .sequentiallyConsistent) { sync.wait(Self.conditionDone) }
        let afterSyncFailure = syncFailed.load(ordering: .sequentiallyConsistent)
        var completed: [Ticket] = []
        for ticket in (afterSyncFailure ? inFlight : []) + queue {
            ticket.outcome = .failure(.closed)
            ticket.wakeUp.signal()
            if ticket.completion != nil { completed.append(ticket) }
        }
        queue.removeAll()
        if afterSyncFailure { inFlight = [] }
        sync.broadcast(Self.conditionDone)
        committerWakeUp.broadcast()
        let committers = self.committers
        self.committers = []
        sync.unlock()
        durableBells.ringAll()
        if afterSyncFailure {
            complete(completed)
            return
        }
        for committer in committers { pthread_join(committer, nil) }
        complete(completed)
        if let segment = active { io.close(segment.fd) }
        active = nil
        io.close(watermarkFD)
        io.close(lockFD)
    }

    /// Runs `body` as the leader: no group commit runs meanwhile.
    func lead<R>(_ body: () throws -> R) throws -> R {
        sync.lock()
        while writing { sync.wait(Self.conditionDone) }
        guard !closed else {
            sync.unlock()
            throw LogError.closed
        }
        writing = true
        sync.unlock()
        defer {
            sync.lock()
            releaseLeadership()
            sync.unlock()
        }
        return try body()
    }

    /// Base offset of the active segment (every segment below it is sealed), or nil when the next
    /// append starts a new segment.
    var activeBase: UInt64? {
        (try? lead { active?.header.baseOffset }) ?? nil
    }

    var lastSegmentEnd: UInt64 { sync.withLock { durable } }

    // MARK: - Group commit (the leader's work)

    private func takeGroup() -> [Ticket] {
        var bytes = 0
        var count = 0
        for ticket in queue {
            let frameBytes = ticket.member.payload.count + GroupRecord.memberDirectoryBytes
            if count > 0 && bytes + frameBytes > options.groupBytesMax { break }
            bytes += frameBytes
            count += 1
        }
        let group = Array(queue.prefix(count))
        queue.removeFirst(count)
        return group
    }

    /// Writes and syncs a group; returns the error that failed it, if any.
    private func commit(_ group: [Ticket]) -> LogError? {
        do {
            let now = options.clockMicros()
            if let segment = active,
                segment.size >= options.segmentBytesMax
                    || now - segment.header.createdAtMicros >= Int64(options.segmentAgeSecondsMax) * 1_000_000
            {
                try sealActive(segment)
            }
            if let segment = active, segment.header.version < LogFormat.version {
                try retireOldVersionSegment(segment)
            }
            if active == nil { active = try createSegment(base: group[0].offset) }
            var segment = active!
            frameBuffer.removeAll(keepingCapacity: true)
            // One record for the whole group: every request in it becomes durable by the same
            // fdatasync, and a torn write loses all of them, none of which was acknowledged.
            var members: [GroupMember] = []
            members.reserveCapacity(group.count)
            for ticket in group {
                var member = ticket.member
                member.header.salt = segment.header.salt
                member.header.offset = ticket.offset
                members.append(member)
            }
            let (groupHeader, extent) = GroupRecord.append(
                members: members, salt: segment.header.salt, to: &frameBuffer)
            do {
                try io.writeAll(segment.fd, frameBuffer, at: segment.size, path: segment.path)
            } catch {
                undoWrite(segment)
                return .writeFailed(IOError(error))
            }
            syncOrStop(segment.fd, segment.path)
            segment.size += frameBuffer.count
            segment.seal.add(group: groupHeader, extent: extent)
            lastGroupBytes = frameBuffer.count
            active = segment
            try? io.writeAll(
                watermarkFD, Watermark.encode(group.last!.offset + 1), at: 0, path: segments.watermarkPath)
            return nil
        } catch {
            return LogError(error)
        }
    }

    /// Sets the outcome of `group` (and, on failure, of every queued ticket) and wakes their
    /// waiters; returns the tickets whose completion the caller must run once it has unlocked.
    private func finish(_ group: [Ticket], failure: LogError?) -> [Ticket] {
        var completed: [Ticket] = []
        if let failure {
            counters.failedAppends += group.count + queue.count
            // Every queued ticket was numbered after the failed group; fail them too and reuse the offsets.
            for ticket in group + queue {
                ticket.outcome = .failure(failure)
                ticket.wakeUp.signal()
                if ticket.completion != nil { completed.append(ticket) }
            }
            nextOffset = group[0].offset
            queue.removeAll()
        } else {
            for ticket in group {
                ticket.outcome = .success
                ticket.wakeUp.signal()
                if ticket.completion != nil { completed.append(ticket) }
            }
            durable = group.last!.offset + 1
            counters.groupCommits += 1
            counters.recordsAppended += group.count
            counters.bytesAppended += lastGroupBytes
        }
        inFlight = []
        releaseLeadership()
        return completed
    }

    /// Ends a leader's turn: wakes the head of the queue to lead the next group (appenders sleep
    /// on their own tickets, so nobody else would) and whoever waits on `conditionDone` (durable
    /// waiters, `lead`, `close`). The lock must be held.
    private func releaseLeadership() {
        writing = false
        if let head = queue.first {
            // A non-blocking appender has nobody waiting on its ticket: a committer leads for it.
            (head.completion == nil ? head.wakeUp : committerWakeUp).signal()
        }
        sync.broadcast(Self.conditionDone)
    }

    /// After a failed write the file may hold part of the group: cut it back to the last durable byte.
    private func undoWrite(_ segment: ActiveSegment) {
        do {
            try io.ftruncate(segment.fd, size: segment.size, path: segment.path)
        } catch {
            // The partial frame stays; recovery would treat it as a torn tail, but this process
            // can no longer append after it safely.
            stopAfterSyncFailure(IOError(error))
        }
    }

    private func syncOrStop(_ fd: Int32, _ path: String) {
        do {
            try io.fdatasync(fd, path: path)
        } catch {
            stopAfterSyncFailure(IOError(error))
        }
    }

    /// The one way out after a failed sync: marks the writer failed, wakes a `close` that waits for
    /// this leader's group (it never finishes it), then hands over to `onSyncFailure`, which does
    /// not return. Called by the leader, without the lock.
    private func stopAfterSyncFailure(_ error: IOError) -> Never {
        syncFailed.store(true, ordering: .sequentiallyConsistent)
        sync.withLock { sync.broadcast(Self.conditionDone) }
        options.onSyncFailure(error)
    }

    private func sealActive(_ segment: ActiveSegment) throws {
        let sealHeader = segment.seal.recordHeader(
            salt: segment.header.salt, sealedAtMicros: options.clockMicros())
        let frame = Frame.encoded(header: sealHeader, payload: segment.seal.encoded())
        do {
            try io.writeAll(segment.fd, frame, at: segment.size, path: segment.path)
        } catch {
            undoWrite(segment)
            throw LogError.writeFailed(IOError(error))
        }
        syncOrStop(segment.fd, segment.path)
        io.close(segment.fd)
        active = nil
    }

    /// The active segment is of an older format version (a log written by an older findmy):
    /// version-2 group records never go into it. Seal it if it holds records, else drop it and
    /// create it again at the same base; both are the roll's own crash-safe steps.
    private func retireOldVersionSegment(_ segment: ActiveSegment) throws {
        if segment.seal.recordCount > 0 {
            try sealActive(segment)
        } else {
            io.close(segment.fd)
            active = nil
        }
    }

    private func createSegment(base: UInt64) throws -> ActiveSegment {
        let header = SegmentHeader(
            salt: UInt64.random(in: 1...UInt64.max), baseOffset: base, createdAtMicros: options.clockMicros(),
            logID: logID)
        let path = segments.segmentPath(base: base)
        let fd: Int32
        do {
            fd = try io.open(path, flags: O_CREAT | O_TRUNC | O_WRONLY, mode: 0o600)
        } catch {
            throw LogError.writeFailed(IOError(error))
        }
        do {
            try io.writeAll(fd, header.encoded(), at: 0, path: path)
        } catch {
            io.close(fd)
            try? io.unlink(path)
            throw LogError.writeFailed(IOError(error))
        }
        syncOrStop(fd, path)
        do {
            try io.syncDirectory(directory)
        } catch {
            stopAfterSyncFailure(IOError(error))
        }
        return ActiveSegment(
            fd: fd, path: path, header: header, size: LogFormat.segmentHeaderBytes,
            seal: Seal(firstOffset: base))
    }

    /// The newest segment of a log written before log ids has id zero: from here on the log
    /// carries one (the id an older segment already has, else a fresh one) in a segment started now,
    /// so that readers find it in the newest header. Sealing and creating a segment are the roll's
    /// own crash-safe steps; docs/log-format.md's recovery table says what a crash between them
    /// leaves. Runs in `init`, before any append.
    private func giveTheLogItsID() throws {
        if logID == .zero { logID = UUID128.random() }
        if let segment = active {
            if segment.seal.recordCount > 0 {
                try sealActive(segment)
            } else {
                // Empty: recreated below at the same base offset, as an append after an empty seal is.
                io.close(segment.fd)
                active = nil
            }
        }
        active = try createSegment(base: nextOffset)
        options.diagnostics(
            "log: this log was written before log ids; it is log \(logID) from now on (its segments from offset "
                + "\(nextOffset) carry the id)")
    }
}

/// One append waiting for its group commit.
private final class Ticket {
    /// The request as a member of a group record, prepared on the appender's thread.
    let member: GroupMember
    var offset: UInt64 = 0
    var outcome: Outcome?
    /// Signalled, under the writer's lock, when `outcome` is set or the ticket should lead.
    let wakeUp = WakeUp()
    /// Set for a non-blocking append, whose caller does not wait on `wakeUp`.
    let completion: (@Sendable (Result<UInt64, LogError>) -> Void)?

    enum Outcome {
        case success
        case failure(LogError)
    }

    init(encoded: EncodedEvent, completion: (@Sendable (Result<UInt64, LogError>) -> Void)? = nil) {
        self.member = GroupRecord.member(encoded)
        self.completion = completion
    }
}

struct ActiveSegment {
    var fd: Int32
    var path: String
    var header: SegmentHeader
    var size: Int
    var seal: Seal
}

public struct LogWriterStatistics: Sendable, Equatable {
    /// Group commits, each one write and one fdatasync.
    public var groupCommits = 0
    public var recordsAppended = 0
    public var bytesAppended = 0
    public var failedAppends = 0
}

/// The log writer as the first service of `findmy serve`: opened (and recovered) by its
/// initialiser, before the registry is rebuilt from it, so `start` only checks that it is open;
/// `stop` is `close` (the group in flight finishes, whatever the grace period: an append that
/// returned is durable). A failed fdatasync is the fatal error the server stops for, through
/// `LogOptions.onSyncFailure`.
extension LogWriter: Service {
    public var name: String { "log" }

    public func start() throws {
        guard !sync.withLock({ closed }) else { throw LogError.closed }
    }

    public func stop(graceMicros: Int64) { close() }

    public var state: ServiceState {
        if syncFailed.load(ordering: .sequentiallyConsistent) { return .failed("fdatasync failed") }
        return sync.withLock { closed } ? .stopped : .running
    }
}
