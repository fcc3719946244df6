import CNATS
import Events
import Threads

#if canImport(Glibc)
    import Glibc
#endif

// The event log on a NATS JetStream cluster (docs/scale.md is the user's side of this).
//
//   stream     one stream (`streamName`), subjects `findmy.log.0` ... `findmy.log.<P-1>`: P partitions,
//              fixed when the stream is created; file storage, `replicas` replicas (3), a duplicate
//              window of `duplicateWindowSeconds`
//   message    ONE version-1 record frame (docs/log-format.md, "Record frame"): the bytes the local
//              writer frames for a request, with salt 0 and offset 0 in the header, because the
//              position is JetStream's, assigned when the leader stores it
//   partition  `LogPartitioning.partition(ofDevice:)` of the record's device key (0 when none)
//   Msg-Id     `Nats-Msg-Id` = "d<device key>-<batch id>" for a record with a batch id (a retry of a
//              batch, through any ingest node, inside the window, is stored once), else a random
//              id chosen once per append (so that this append's own retries are stored once)
//   offset     stream sequence − 1. The stream's sequence counts every message of every partition,
//              dense from 1, so it is already one total order: offsets stay one number, as every
//              checkpoint, snapshot and write answer of findmy expects; a partition's records have
//              increasing offsets with gaps (the other partitions'), which every reader of the
//              local log already allows (a rewritten segment has gaps too)
//   durable    an append returns after JetStream's publish acknowledgement: the stream leader
//              replicated the message to a quorum (2 of 3) before answering; nats-server syncs its
//              files on an interval, so this is "a majority of nodes had it", not "it was fsynced"
//
// Why one stream and not one per partition: a single sequence is the total order above for free.
// Its cost is one Raft group, one leader, for every append: the throughput of one leader
// (docs/scale.md has the figure). Several streams (partition sets) would need (stream, sequence)
// offsets, which nothing in findmy speaks yet.

/// The event log on JetStream: `EventLogAppending` and `EventLogReading` over one stream.
/// Safe from many threads (the C client's connection is); `close` only once nobody uses it.
public final class JetStreamLog: EventLog, @unchecked Sendable {
    public let configuration: JetStreamLogConfiguration
    private let connection: OpaquePointer
    let jetStream: OpaquePointer
    let streamName: CString
    let subjects: [CString]
    private let closed = Locked(false)

    /// Connects, then creates the stream (when missing and `createsStream`) or checks that the
    /// existing one has the configured partitions, storage and replicas.
    public init(_ configuration: JetStreamLogConfiguration) throws {
        precondition(configuration.partitionCount >= 1, "a log has at least one partition")
        self.configuration = configuration
        streamName = CString(configuration.streamName)
        subjects = (0..<configuration.partitionCount).map { CString(configuration.subject(partition: $0)) }
        (connection, jetStream) = try Self.connect(configuration)
        do {
            try openStream()
        } catch {
            // Fully initialised: `deinit` runs after this throw too, and `close` acts once.
            close()
            throw error
        }
    }

    deinit { close() }

    public func close() {
        let wasClosed = closed.withLock { value in
            defer { value = true }
            return value
        }
        guard !wasClosed else { return }
        jsCtx_Destroy(jetStream)
        natsConnection_Close(connection)
        natsConnection_Destroy(connection)
    }

    public var partitionCount: Int { configuration.partitionCount }

    public func partition(ofDevice deviceKey: UInt64) -> Int {
        LogPartitioning.partition(ofDevice: deviceKey, partitionCount: partitionCount)
    }

    // MARK: - Appending

    /// Publishes each record to its device's partition, in order, and returns once JetStream has
    /// acknowledged every one (quorum). A publish that times out or finds no stream leader is
    /// retried with the same Msg-Id until `appendDeadlineMillis`: JetStream stores it once.
    public func append(batch records: [EncodedEvent]) throws -> [UInt64] {
        var offsets: [UInt64] = []
        offsets.reserveCapacity(records.count)
        for record in records {
            let partition = partition(ofDevice: record.header.deviceKey)
            let messageID =
                record.header.idempotencyKey == .zero
                ? "r-\(UUID128.random())" : "d\(record.header.deviceKey)-\(record.header.idempotencyKey)"
            let stored = try publish(
                Self.messageBytes(record), partition: partition, messageID: messageID)
            offsets.append(stored.sequence - 1)
        }
        return offsets
    }

    /// The bytes of a message: one record frame, salt and offset 0 (JetStream assigns the position).
    public static func messageBytes(_ record: EncodedEvent) -> [UInt8] { Frame.message(record) }

    /// Returns the stream sequence JetStream stored the message at (an earlier one for a duplicate,
    /// then `duplicate` is true). `headers` are NATS message headers stored with it (an import's
    /// source position); readers of records never see them.
    func publish(_ bytes: [UInt8], partition: Int, messageID: String, headers: [(String, String)] = []) throws
        -> (sequence: UInt64, duplicate: Bool)
    {
        let subject = subjects[partition]
        let deadline = monotonicMicros() + configuration.appendDeadlineMillis * 1000
        var lastError = "no attempt"
        // A new stream leader is being elected, or the client reconnects to another node: a while.
        let electionRetryMicros: UInt32 = 50_000
        // The first copy of a duplicate is being replicated: about one round trip between nodes.
        let inFlightRetryMicros: UInt32 = 2_000
        var retryMicros = electionRetryMicros
        while true {
            var options = jsPubOptions()
            jsPubOptions_Init(&options)
            options.MaxWait = configuration.publishAckWaitMillis
            var ack: UnsafeMutablePointer<jsPubAck>?
            var code = jsErrCode(0)
            let status = messageID.withCString { id in
                options.MsgId = id
                options.ExpectStream = streamName.constant
                guard !headers.isEmpty else {
                    return bytes.withUnsafeBytes { raw in
                        js_Publish(
                            &ack, jetStream, subject.constant, raw.baseAddress, Int32(raw.count), &options,
                            &code)
                    }
                }
                return publishWithHeaders(bytes, subject: subject, headers: headers, &ack, &options, &code)
            }
            if status == NATS_OK, let ack {
                let (sequence, duplicate) = (ack.pointee.Sequence, ack.pointee.Duplicate)
                jsPubAck_Destroy(ack)
                // nats-server 2.10 answers a duplicate of a message it is still replicating with
                // sequence 0: the first copy has no sequence yet. Asked again with the same Msg-Id,
                // it names the first copy's sequence once that is stored, or stores this one if
                // the first copy's proposal failed. Never an offset of -1.
                guard duplicate && sequence == 0 else { return (sequence, duplicate) }
                lastError = "a duplicate of a message still being replicated (no sequence yet)"
                retryMicros = inFlightRetryMicros
            } else {
                retryMicros = electionRetryMicros
                lastError = Self.describe(status, code)
                guard Self.isTransient(status, code) else {
                    throw JetStreamLogError.refused(subject: subject.text, lastError)
                }
            }
            guard monotonicMicros() < deadline else {
                throw JetStreamLogError.noQuorum(
                    subject: subject.text, waitedMillis: configuration.appendDeadlineMillis,
                    lastError: lastError)
            }
            usleep(retryMicros)
        }
    }

    private func publishWithHeaders(
        _ bytes: [UInt8], subject: CString, headers: [(String, String)],
        _ ack: inout UnsafeMutablePointer<jsPubAck>?,
        _ options: inout jsPubOptions, _ code: inout jsErrCode
    ) -> natsStatus {
        var message: OpaquePointer?
        var status = bytes.withUnsafeBytes { raw in
            natsMsg_Create(
                &message, subject.constant, nil, raw.baseAddress?.assumingMemoryBound(to: CChar.self),
                Int32(raw.count))
        }
        guard status == NATS_OK, let message else { return status }
        defer { natsMsg_Destroy(message) }
        for (key, value) in headers where status == NATS_OK {
            status = natsMsgHeader_Set(message, key, value)
        }
        guard status == NATS_OK else { return status }
        return js_PublishMsg(&ack, jetStream, message, &options, &code)
    }

    // MARK: - Reading

    /// The end of what JetStream acknowledged: the stream's last sequence (offset = sequence − 1).
    public func durableEndOffset() throws -> UInt64 {
        try withStreamInfo { $0.State.LastSeq }
    }

    /// In one stream-info answer: the offset after the last message ever stored, and how many
    /// messages the stream holds now (fewer than `end` once retention erased some). Registry
    /// snapshots of an ingest node check with it that nothing they folded is gone (rule 4J,
    /// docs/snapshots.md).
    public func storedCounts() throws -> (end: UInt64, messages: UInt64) {
        try withStreamInfo { ($0.State.LastSeq, $0.State.Msgs) }
    }

    /// `body` applied to the stream's info, asked again while the cluster answers transiently.
    func withStreamInfo<T>(_ body: (jsStreamInfo) -> T) throws -> T {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(0)
        let (status, _) = retrying {
            code = jsErrCode(0)
            return (js_GetStreamInfo(&info, jetStream, streamName.constant, nil, &code), code)
        }
        guard status == NATS_OK, let info else {
            if code == JSStreamNotFoundErr { throw JetStreamLogError.streamMissing(stream: streamName.text) }
            throw JetStreamLogError.requestFailed("stream info: \(Self.describe(status, code))")
        }
        defer { jsStreamInfo_Destroy(info) }
        return body(info.pointee)
    }

    /// Reads `partition` from `start` with an ordered consumer filtered on its subject (the
    /// stream leader, or a replica, delivers in sequence order, no acks), up to `end` (default:
    /// the durable end when the read starts). Returns what it saw (`EventLogReading`): the offset
    /// after the partition's last record delivered, `start` when none was.
    @discardableResult
    public func read(
        partition: Int, from start: UInt64, upTo end: UInt64? = nil, _ visit: (LogRecord) throws -> Bool
    ) throws -> UInt64 {
        try read(partition: partition, from: start, upTo: end, header: nil) { record, _ in try visit(record) }
    }

    /// `read`, also handing each record the value of the NATS message header `header` (nil when
    /// the message has none): how an import finds what it stored before.
    @discardableResult
    public func read(
        partition: Int, from start: UInt64, upTo end: UInt64? = nil, header: String?,
        _ visit: (LogRecord, String?) throws -> Bool
    ) throws -> UInt64 {
        precondition(partition >= 0 && partition < partitionCount, "partition \(partition) out of range")
        let limit = try end ?? durableEndOffset()
        guard start < limit else { return start }
        let subject = subjects[partition]
        // The partition's newest message, as the stream leader answers (the stream has no direct
        // get): nothing to wait for beyond it, and nothing at all when it is below `start`.
        guard let newest = try lastSequence(subject), newest > start else { return start }
        let stopSequence = min(newest, limit)
        var subscription = try orderedConsumer(subject, from: start)
        defer {
            natsSubscription_Unsubscribe(subscription)
            natsSubscription_Destroy(subscription)
        }
        var next = start
        // The consumer may live on a replica that has not applied the newest messages yet (a node
        // restarted and catching up): its "nothing pending" then comes before `stopSequence`, the
        // leader's newest. Such a short read made the retention policy miss a user's change and an
        // import store a record twice, so the read waits for `stopSequence` unless the leader says
        // the partition's newest is now below it (erased meanwhile). The wait is bounded from the
        // last message delivered: a long read making progress is not cut short. A consumer that
        // stays stalled is replaced by a new one from where the read is: in CI one placed on a
        // restarted replica delivered nothing for 30 s while the replica caught up.
        let waitMicros = configuration.readWaitMillis * 1000
        let stalledMicros = min(waitMicros / 4, 2_000_000)
        var deadline = monotonicMicros() + waitMicros
        var lastProgress = monotonicMicros()
        while true {
            guard let delivered = try nextMessage(subscription, subject, waitingFor: stopSequence) else {
                guard next < stopSequence, let newest = try lastSequence(subject), newest > next else {
                    return next
                }
                let now = monotonicMicros()
                guard now < deadline else {
                    throw JetStreamLogError.readFailed(
                        subject: subject.text,
                        "the consumer stopped at sequence \(next) while the leader's newest is \(newest)")
                }
                if now - lastProgress >= stalledMicros {
                    let replacement = try orderedConsumer(subject, from: next)
                    natsSubscription_Unsubscribe(subscription)
                    natsSubscription_Destroy(subscription)
                    subscription = replacement
                    lastProgress = monotonicMicros()
                }
                continue
            }
            defer { natsMsg_Destroy(delivered.message) }
            deadline = monotonicMicros() + waitMicros
            lastProgress = monotonicMicros()
            let sequence = delivered.sequence
            if sequence - 1 >= limit { return limit }
            // The consumer filters on the partition's subject: a message of another partition here
            // would be folded as this one's (its offset then folded twice, once per partition).
            // Refused, so that the caller reads again through a new consumer.
            let deliveredSubject = natsMsg_GetSubject(delivered.message).map { String(cString: $0) } ?? ""
            guard deliveredSubject == subject.text else {
                throw JetStreamLogError.readFailed(
                    subject: subject.text,
                    "the ordered consumer delivered sequence \(sequence) of '\(deliveredSubject)', another subject"
                )
            }
            let record = try Self.record(delivered.message, subject: subject.text, sequence: sequence)
            var value: String?
            if let header {
                var text: UnsafePointer<CChar>?
                if natsMsgHeader_Get(delivered.message, header, &text) == NATS_OK, let text {
                    value = String(cString: text)
                }
            }
            if try !visit(record, value) { return sequence - 1 }
            next = sequence
            if sequence >= limit { return limit }
            if sequence >= stopSequence { return next }
        }
    }

    /// Reads `partitions` from `start` through ONE ordered consumer over the whole stream, up to
    /// `end` (default: the durable end when the read starts), skipping the other partitions'
    /// messages unread. One in-order delivery of every subject is what lets it vouch for its end
    /// (`EventLogReading`): a message delivered at offset X proves every message below X was
    /// delivered before it, whichever partition it is in, while a consumer's "nothing pending" may
    /// come from a store that has not applied the newest messages yet. So the end returned is the
    /// offset after the last message delivered (of any partition), `end` once that reaches it.
    public func read(
        partitions: Set<Int>, from start: UInt64, upTo end: UInt64? = nil,
        _ visit: (_ partition: Int, _ record: LogRecord) throws -> Bool
    ) throws -> UInt64 {
        precondition(partitions.allSatisfy { $0 >= 0 && $0 < partitionCount }, "a partition out of range")
        let limit = try end ?? durableEndOffset()
        guard !partitions.isEmpty else { return limit }
        guard start < limit else { return start }
        let everything = CString(configuration.subjectPrefix + ".>")
        let subscription = try orderedConsumer(everything, from: start)
        defer {
            natsSubscription_Unsubscribe(subscription)
            natsSubscription_Destroy(subscription)
        }
        let wanted = (0..<partitionCount).map { partitions.contains($0) }
        var next = start
        while true {
            guard let delivered = try nextMessage(subscription, everything, waitingFor: limit) else {
                return next
            }
            defer { natsMsg_Destroy(delivered.message) }
            let sequence = delivered.sequence
            if sequence - 1 >= limit { return limit }
            let subjectText = natsMsg_GetSubject(delivered.message).map { String(cString: $0) } ?? ""
            guard let partition = partition(ofSubject: subjectText) else {
                throw JetStreamLogError.damagedMessage(
                    subject: subjectText, sequence: sequence, "a subject outside the log's partitions")
            }
            if wanted[partition] {
                let record = try Self.record(delivered.message, subject: subjectText, sequence: sequence)
                if try !visit(partition, record) { return sequence - 1 }
            }
            next = sequence
            if sequence >= limit { return limit }
            if delivered.pending == 0 { return next }
        }
    }

    /// An ordered consumer on `subject` delivering from offset `start` (sequence `start + 1`).
    private func orderedConsumer(_ subject: CString, from start: UInt64) throws -> OpaquePointer {
        var subscription: OpaquePointer?
        var options = jsSubOptions()
        jsSubOptions_Init(&options)
        options.Stream = streamName.constant
        options.Ordered = true
        options.Config.DeliverPolicy = js_DeliverByStartSequence
        options.Config.OptStartSeq = start + 1
        var code = jsErrCode(0)
        // Creating the consumer waits for the stream's and the cluster's leaders: after a node's
        // death that took more than 10 s on a loaded machine, so it has an open's patience.
        let patienceMillis = max(configuration.readWaitMillis, configuration.openDeadlineMillis)
        let (status, _) = retrying(forMillis: patienceMillis) {
            code = jsErrCode(0)
            return (js_SubscribeSync(&subscription, jetStream, subject.constant, nil, &options, &code), code)
        }
        guard status == NATS_OK, let subscription else {
            throw JetStreamLogError.readFailed(
                subject: subject.text, "ordered consumer: \(Self.describe(status, code))")
        }
        // A whole stream read at once outran the client's default pending limits (65,536
        // messages, 64 MiB): the client then drops messages and reports a slow consumer (the
        // ordered consumer starts again after the gap, but the read waited for nothing first).
        // Flow control bounds what the server sends ahead; these bound the memory it may take.
        _ = natsSubscription_SetPendingLimits(subscription, 4_000_000, 512 * 1024 * 1024)
        return subscription
    }

    /// The next message of an ordered consumer with its stream sequence and what the consumer
    /// says is still pending, or nil when the consumer has nothing: no message came within a
    /// short wait and its info says none is pending. A message that does not come although the
    /// consumer says some are pending is waited for up to `readWaitMillis`, then a failure.
    private func nextMessage(
        _ subscription: OpaquePointer, _ subject: CString, waitingFor stopSequence: UInt64
    )
        throws -> (message: OpaquePointer, sequence: UInt64, pending: UInt64)?
    {
        let deadline = monotonicMicros() + configuration.readWaitMillis * 1000
        var waitMillis: Int64 = 50
        while true {
            var message: OpaquePointer?
            let next = natsSubscription_NextMsg(&message, subscription, waitMillis)
            if next == NATS_OK, let message {
                var metadata: UnsafeMutablePointer<jsMsgMetaData>?
                guard natsMsg_GetMetaData(&metadata, message) == NATS_OK, let metadata else {
                    natsMsg_Destroy(message)
                    throw JetStreamLogError.readFailed(
                        subject: subject.text, "a message without JetStream metadata")
                }
                defer { jsMsgMetaData_Destroy(metadata) }
                return (message, metadata.pointee.Sequence.Stream, metadata.pointee.NumPending)
            }
            guard next == NATS_TIMEOUT, monotonicMicros() < deadline else {
                throw JetStreamLogError.readFailed(
                    subject: subject.text,
                    "no message within \(configuration.readWaitMillis) ms while sequence \(stopSequence) "
                        + "was expected (\(Self.describe(next, jsErrCode(0))))")
            }
            var info: UnsafeMutablePointer<jsConsumerInfo>?
            var code = jsErrCode(0)
            if natsSubscription_GetConsumerInfo(&info, subscription, nil, &code) == NATS_OK, let info {
                let pending = info.pointee.NumPending
                jsConsumerInfo_Destroy(info)
                if pending == 0 { return nil }
            }
            waitMillis = min(waitMillis * 2, 1_000)
        }
    }

    /// The name of the node leading the stream (the one whose acknowledgement an append waits
    /// for), nil while it has none.
    public func streamLeader() throws -> String? {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(0)
        let status = js_GetStreamInfo(&info, jetStream, streamName.constant, nil, &code)
        guard status == NATS_OK, let info else {
            throw JetStreamLogError.requestFailed("stream info: \(Self.describe(status, code))")
        }
        defer { jsStreamInfo_Destroy(info) }
        guard let cluster = info.pointee.Cluster, let leader = cluster.pointee.Leader else { return nil }
        let name = String(cString: leader)
        return name.isEmpty ? nil : name
    }

    /// The subject and bytes of the message at `offset`, as JetStream stores them.
    public func storedMessage(offset: UInt64) throws -> (subject: String, bytes: [UInt8]) {
        var message: OpaquePointer?
        var code = jsErrCode(0)
        let status = js_GetMsg(&message, jetStream, streamName.constant, offset + 1, nil, &code)
        guard status == NATS_OK, let message else {
            throw JetStreamLogError.requestFailed("get message \(offset + 1): \(Self.describe(status, code))")
        }
        defer { natsMsg_Destroy(message) }
        return (String(cString: natsMsg_GetSubject(message)), Self.data(message))
    }

    /// The sequence of the newest message of `subject`, nil when it has none.
    private func lastSequence(_ subject: CString) throws -> UInt64? {
        var message: OpaquePointer?
        var code = jsErrCode(0)
        let (status, _) = retrying {
            code = jsErrCode(0)
            return (
                js_GetLastMsg(&message, jetStream, streamName.constant, subject.constant, nil, &code), code
            )
        }
        if code == JSNoMessageFoundErr || status == NATS_NOT_FOUND { return nil }
        guard status == NATS_OK, let message else {
            throw JetStreamLogError.readFailed(
                subject: subject.text, "last message: \(Self.describe(status, code))")
        }
        defer { natsMsg_Destroy(message) }
        return natsMsg_GetSequence(message)
    }

    private static func data(_ message: OpaquePointer) -> [UInt8] {
        let count = Int(natsMsg_GetDataLength(message))
        guard count > 0, let data = natsMsg_GetData(message) else { return [] }
        return data.withMemoryRebound(to: UInt8.self, capacity: count) {
            Array(UnsafeBufferPointer(start: $0, count: count))
        }
    }

    /// A message as a log record: exactly one valid frame (rules 1-6 of docs/log-format.md), a
    /// request's record (not a group record or a seal); its offset is the sequence's.
    static func record(_ message: OpaquePointer, subject: String, sequence: UInt64) throws -> LogRecord {
        let bytes = data(message)
        var decoder = FrameDecoder()
        decoder.append(bytes)
        let damaged = { (why: String) in
            JetStreamLogError.damagedMessage(subject: subject, sequence: sequence, why)
        }
        guard case .frame(let frame) = decoder.next() else {
            throw damaged("not a whole, valid record frame (\(bytes.count) bytes)")
        }
        guard decoder.pendingBytes == 0 else { throw damaged("bytes after the record frame") }
        guard frame.group == nil, !frame.header.isSeal, !frame.header.isGroup else {
            throw damaged("a group record or a seal, where one request's record belongs")
        }
        var header = frame.header
        header.offset = sequence - 1
        return LogRecord(
            header: header, storedPayload: frame.payload, segmentPath: subject, position: Int(sequence))
    }

    /// Runs a request again while it fails transiently (a stream leader being elected, a
    /// reconnect), for up to `millis` (default `readWaitMillis`); returns the last outcome.
    func retrying(forMillis millis: Int64? = nil, _ attempt: () -> (natsStatus, jsErrCode)) -> (
        natsStatus, jsErrCode
    ) {
        let deadline = monotonicMicros() + (millis ?? configuration.readWaitMillis) * 1000
        while true {
            let (status, code) = attempt()
            if status == NATS_OK || !Self.isTransient(status, code) || monotonicMicros() >= deadline {
                return (status, code)
            }
            usleep(100_000)
        }
    }

    // MARK: - Errors

    /// A timeout, no responders (no stream leader yet), a reconnect in progress, or the cluster
    /// saying JetStream is temporarily unavailable: worth another attempt with the same Msg-Id.
    static func isTransient(_ status: natsStatus, _ code: jsErrCode) -> Bool {
        // No responders: nobody listens on the subject now, as while a new stream leader is
        // elected (the client reports it with the "JetStream not enabled" code).
        if code == JSClusterNotAvailErr || status == NATS_NO_RESPONDERS { return true }
        if code != jsErrCode(0) { return false }
        return status == NATS_TIMEOUT
            || status == NATS_CONNECTION_DISCONNECTED
            || status == NATS_NOT_YET_CONNECTED || status == NATS_STALE_CONNECTION
    }

    static func describe(_ status: natsStatus, _ code: jsErrCode) -> String {
        var text = String(cString: natsStatus_GetText(status))
        if code != jsErrCode(0) { text += " (JetStream error \(code.rawValue))" }
        var last = NATS_OK
        if let detail = nats_GetLastError(&last) {
            let detailText = String(cString: detail)
            if !detailText.isEmpty && detailText != text { text += ": \(detailText)" }
        }
        return text
    }
}
