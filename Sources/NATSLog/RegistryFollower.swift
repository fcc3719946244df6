import CNATS
import Events
import Threads

#if canImport(Glibc)
    import Glibc
#endif

// What an ingest node needs of the JetStream log beyond `EventLog` (docs/scale.md,
// "Ingest nodes"):
//
//   append one record with a Msg-Id the caller chose, and learn whether JetStream stored it or
//   already held a message with that id (its duplicate window): a registry change that takes a
//   new id uses "the id" as its Msg-Id, so that of two nodes taking the same id at once exactly
//   one is stored and the other learns it lost. JetStream checks Msg-Ids against messages still
//   being replicated too; nats-server 2.9.10's per-subject expected sequence did not (two appends in
//   flight expecting the same last sequence were both stored in our test), so it is not used;
//
//   follow the whole stream (every partition, in sequence order) from an offset, for ever: every
//   node folds the same records in the same order into its registry, its own appends included.

/// How JetStream took one record.
public struct JetStreamAppended: Sendable, Equatable {
    public var offset: UInt64
    /// True when JetStream already had a message with this Msg-Id (within its duplicate window):
    /// nothing new was stored, `offset` is the first copy's.
    public var duplicate: Bool
}

extension JetStreamLog {
    /// Appends one record to its device's partition with `messageID` as its `Nats-Msg-Id` (and
    /// `headers` as NATS message headers), and returns once JetStream acknowledged it (quorum), or
    /// found it a duplicate.
    public func append(record: EncodedEvent, messageID: String, headers: [(String, String)] = []) throws
        -> JetStreamAppended
    {
        let stored = try publish(
            Self.messageBytes(record), partition: partition(ofDevice: record.header.deviceKey),
            messageID: messageID, headers: headers)
        return JetStreamAppended(offset: stored.sequence - 1, duplicate: stored.duplicate)
    }

    /// The Msg-Id `append(batch:)` gives a record with a batch id; a caller appending such a
    /// record itself uses the same one, so that both paths deduplicate against each other.
    public static func batchMessageID(_ header: RecordHeader) -> String? {
        header.idempotencyKey == .zero ? nil : "d\(header.deviceKey)-\(header.idempotencyKey)"
    }

    /// The partition a subject of this log names, nil for another subject.
    func partition(ofSubject subject: String) -> Int? {
        let prefix = configuration.subjectPrefix + "."
        guard subject.hasPrefix(prefix), let value = Int(subject.dropFirst(prefix.count)),
            value >= 0, value < partitionCount
        else { return nil }
        return value
    }
}

/// Follows every partition of a JetStream log in sequence order on a thread of its own, from an
/// offset, and hands each record to `deliver` (on that thread, one at a time, in offset order, never
/// twice, never skipping one). An ordered consumer (flow control, heartbeats, recreated by the
/// client after a gap) does the delivery; when it stops delivering while the stream has more (a
/// node it was served by died), the follower subscribes again from where it is.
public final class JetStreamFollower: Service, @unchecked Sendable {
    public typealias Deliver = @Sendable (_ record: LogRecord, _ partition: Int) throws -> Void

    public let name: String
    private let log: JetStreamLog
    private let deliver: Deliver
    private let worker = StoppableThread()
    private var stopSignal: StopSignal { worker.stopSignal }
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var next: UInt64
    private var failure: String?
    /// A record that cannot be folded stops the follower: a node serving from a registry with a
    /// hole would answer wrongly, so the stop is fatal (the service group stops the node).
    public var onFatal: @Sendable (String) -> Void = { _ in }
    /// With no message for this long while the stream is known to be longer, subscribe again.
    public var stallMillis: Int64 = 3_000
    /// How long one wait for the next message lasts before checking for a stop or a stall.
    public var pollMillis: Int64 = 200

    public init(
        log: JetStreamLog, from offset: UInt64, name: String = "registry-follower", deliver: @escaping Deliver
    ) {
        self.log = log
        self.next = offset
        self.name = name
        self.deliver = deliver
    }

    /// The offset after the last record delivered.
    public var nextOffset: UInt64 { lock.withLock { next } }

    public var state: ServiceState {
        if let failure = lock.withLock({ failure }) { return .failed(failure) }
        if stopSignal.isRequested { return .stopped }
        return worker.isRunning ? .running : .idle
    }

    public func start() throws {
        worker.start { [self] _ in run() }
    }

    public func stop(graceMicros: Int64) { worker.stop() }

    private func run() {
        while !stopSignal.isRequested {
            do {
                try followUntilStalled()
            } catch {
                let text = "\(error)"
                lock.withLock { failure = text }
                onFatal(text)
                return
            }
        }
    }

    /// One ordered consumer from `next`, until a stop, or a stall while the stream is longer.
    /// Throws only for a record that cannot be delivered (damaged, or refused by `deliver`).
    private func followUntilStalled() throws {
        let subject = CString(log.configuration.subjectPrefix + ".>")
        var subscription: OpaquePointer?
        var options = jsSubOptions()
        jsSubOptions_Init(&options)
        options.Stream = log.streamName.constant
        options.Ordered = true
        options.Config.DeliverPolicy = js_DeliverByStartSequence
        options.Config.OptStartSeq = nextOffset + 1
        var code = jsErrCode(0)
        let status = js_SubscribeSync(&subscription, log.jetStream, subject.constant, nil, &options, &code)
        guard status == NATS_OK, let subscription else {
            // No stream leader or no connection just now: try again shortly.
            _ = stopSignal.wait(micros: pollMillis * 1000)
            return
        }
        defer {
            natsSubscription_Unsubscribe(subscription)
            natsSubscription_Destroy(subscription)
        }
        var lastMessageMicros = monotonicMicros()
        while !stopSignal.isRequested {
            var message: OpaquePointer?
            let received = natsSubscription_NextMsg(&message, subscription, pollMillis)
            guard received == NATS_OK, let message else {
                if received != NATS_TIMEOUT {
                    _ = stopSignal.wait(micros: pollMillis * 1000)
                    return
                }
                // Quiet for a while: ask (once per `stallMillis`) whether the stream is longer.
                guard monotonicMicros() - lastMessageMicros > stallMillis * 1000 else { continue }
                if let end = try? log.durableEndOffset(), end > nextOffset { return }
                lastMessageMicros = monotonicMicros()
                continue
            }
            lastMessageMicros = monotonicMicros()
            defer { natsMsg_Destroy(message) }
            var metadata: UnsafeMutablePointer<jsMsgMetaData>?
            guard natsMsg_GetMetaData(&metadata, message) == NATS_OK, let metadata else { continue }
            let sequence = metadata.pointee.Sequence.Stream
            jsMsgMetaData_Destroy(metadata)
            // An ordered consumer never goes back, but one recreated from an older start might.
            guard sequence > nextOffset else { continue }
            let subjectText = String(cString: natsMsg_GetSubject(message))
            guard let partition = log.partition(ofSubject: subjectText) else {
                throw JetStreamLogError.damagedMessage(
                    subject: subjectText, sequence: sequence, "a subject outside the log's partitions")
            }
            let record = try JetStreamLog.record(message, subject: subjectText, sequence: sequence)
            try deliver(record, partition)
            lock.withLock { next = sequence }
        }
    }
}

/// A few threads that run blocking appends for callers that must not block (the report path's
/// event-loop threads): JetStream's publish acknowledgement is waited for here, and `completion`
/// runs on the thread that waited.
public final class JetStreamAppendQueue: @unchecked Sendable {
    public typealias Job = @Sendable () -> Void
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var jobs: [Job] = []
    private var head = 0
    private var stopping = false
    private var threads: [pthread_t] = []
    private var running = 0

    /// `threadsCount` appends wait for their acknowledgement at once; more wait in order.
    public init(threadsCount: Int) {
        precondition(threadsCount > 0)
        for _ in 0..<threadsCount {
            threads.append(spawnThread { [self] in work() })
        }
    }

    public func submit(_ job: @escaping Job) {
        lock.withLock {
            jobs.append(job)
            lock.signal()
        }
    }

    /// Jobs submitted and not finished: waiting for a thread, or running.
    public var pending: Int { lock.withLock { jobs.count - head + running } }

    /// Runs what is queued, then joins the threads.
    public func stop() {
        let running = lock.withLock {
            stopping = true
            lock.broadcast()
            return threads
        }
        for thread in running { pthread_join(thread, nil) }
        lock.withLock { threads = [] }
    }

    private func work() {
        while true {
            lock.lock()
            while head == jobs.count && !stopping { lock.wait() }
            guard head < jobs.count else {
                lock.unlock()
                return
            }
            let job = jobs[head]
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            }
            running += 1
            lock.unlock()
            job()
            lock.withLock { running -= 1 }
        }
    }
}
