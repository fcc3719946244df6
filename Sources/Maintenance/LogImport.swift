import CLI
import Crypto
import Events
import NATSLog
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// An export file that breaks a rule of its format (Events/LogExport.swift).
struct DamagedExport: Error, CustomStringConvertible {
    var path: String
    var position: Int
    var damage: LogExportDamage
    /// What it means for the command that found it.
    var consequence = ""

    var description: String {
        "the export file \(path) is damaged at byte \(position): \(damage)\(consequence)"
    }
}

/// One imported record as the stream holds it.
struct StoredImport {
    var sourceOffset: UInt64
    var offset: UInt64
    var partition: Int
    var digest: MessageDigest
}

/// The SHA-256 of a message, held inline (a scan keeps one per record of the stream).
struct MessageDigest: Equatable {
    var words: (UInt64, UInt64, UInt64, UInt64)

    init(_ message: [UInt8]) {
        let hash = SHA256.hash(message)
        func word(_ index: Int) -> UInt64 {
            hash[(index * 8)..<(index * 8 + 8)].reduce(0) { $0 << 8 | UInt64($1) }
        }
        words = (word(0), word(1), word(2), word(3))
    }

    static func == (lhs: MessageDigest, rhs: MessageDigest) -> Bool {
        lhs.words.0 == rhs.words.0 && lhs.words.1 == rhs.words.1 && lhs.words.2 == rhs.words.2
            && lhs.words.3 == rhs.words.3
    }
}

/// What reading the stream found: the imported records (in stream order per partition), the
/// messages that are not this log's import, and device order broken.
struct StreamImports {
    var stored: [StoredImport] = []
    var foreign = 0
    /// A record stored after a later record of the same device (its source offset lower).
    var outOfDeviceOrder = 0
    /// A record other than a fix batch not at its source place among its partition's records: one
    /// stored before it came after it in the source, or one after it before (`ImportPublishers`).
    var outOfPartitionOrder = 0

    /// Counts the records of one partition, in stream order as (source offset, is a fix batch),
    /// that break partition order.
    static func partitionOrderBreaks(_ records: [(source: UInt64, isBatch: Bool)]) -> Int {
        guard !records.isEmpty else { return 0 }
        var suffixMin = Array(repeating: UInt64.max, count: records.count + 1)
        for index in stride(from: records.count - 1, through: 0, by: -1) {
            suffixMin[index] = min(suffixMin[index + 1], records[index].source)
        }
        var prefixMax: UInt64? = nil
        var breaks = 0
        for (index, record) in records.enumerated() {
            if !record.isBatch {
                let before = prefixMax.map { $0 > record.source } ?? false
                if before || suffixMin[index + 1] < record.source { breaks += 1 }
            }
            prefixMax = max(prefixMax ?? 0, record.source)
        }
        return breaks
    }
}

extension LogTransfer {
    /// Reads and checks the whole export file, handing each record to `visit` in file order.
    @discardableResult
    static func readExport(_ path: String, _ visit: (LogExportRecord) throws -> Void = { _ in }) throws
        -> (header: LogExportHeader, trailer: LogExportTrailer)
    {
        let fd = Glibc.open(path, O_RDONLY)
        guard fd >= 0 else { throw UsageError("cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { Glibc.close(fd) }
        let io = PosixFileIO()
        var decoder = LogExportDecoder()
        var position = 0
        var header: LogExportHeader?
        var trailer: LogExportTrailer?
        while true {
            let chunk = try io.read(fd, count: 1 << 20, at: position, path: path)
            decoder.append(chunk)
            position += chunk.count
            decoding: while true {
                switch decoder.next() {
                case .needMore: break decoding
                case .damaged(let damage, let at):
                    throw DamagedExport(path: path, position: at, damage: damage)
                case .header(let value): header = value
                case .record(let record): try visit(record)
                case .trailer(let value): trailer = value
                }
            }
            if chunk.isEmpty { break }
        }
        if let (damage, at) = decoder.finish() {
            throw DamagedExport(path: path, position: at, damage: damage)
        }
        return (header!, trailer!)
    }

    static func messageID(_ logID: UUID128, _ sourceOffset: UInt64) -> String { "i\(logID)-\(sourceOffset)" }

    static func headerValue(_ logID: UUID128, _ sourceOffset: UInt64) -> String { "\(logID) \(sourceOffset)" }

    /// The record as it is stored: a command answer's batch offset mapped to the batch's new
    /// offset (`goneBatchOffset` when the export does not hold that batch). Nothing else in a
    /// record names another record's offset (docs/scale.md says what was checked).
    static func rewritten(_ record: LogExportRecord, newOffset: (UInt64) -> UInt64?) throws -> EncodedEvent {
        guard record.header.type == EventType.commandAnswered.rawValue else { return record.encodedEvent }
        guard
            case .commandAnswered(var answer) = try EventCodec.decode(
                header: record.header, stored: record.payload)
        else { return record.encodedEvent }
        answer.batchOffset = newOffset(answer.batchOffset) ?? goneBatchOffset
        let encoded = EventCodec.encode(
            .commandAnswered(answer), receivedAtMicros: record.header.receivedAtMicros)
        var header = record.header
        header.codec = encoded.header.codec
        header.uncompressedBytes = encoded.header.uncompressedBytes
        return EncodedEvent(header: header, payload: encoded.payload)
    }

    static func digest(_ record: EncodedEvent) -> MessageDigest { MessageDigest(Frame.message(record)) }

    /// A read of a partition that fails (no message within the read wait, as a loaded cluster's
    /// consumer can) is continued from the last record read, this many times.
    static let readAttemptsMax = 5

    /// Reads every partition of the stream and sorts its messages into this log's imported records
    /// and the rest.
    static func scanStream(_ log: JetStreamLog, logID: UUID128) throws -> StreamImports {
        var found = StreamImports()
        let end = try log.durableEndOffset()
        let prefix = "\(logID) "
        for partition in 0..<log.partitionCount {
            var lastSource: [UInt64: UInt64] = [:]
            var inStreamOrder: [(source: UInt64, isBatch: Bool)] = []
            defer { found.outOfPartitionOrder += StreamImports.partitionOrderBreaks(inStreamOrder) }
            var next = UInt64(0)
            for attempt in 1...readAttemptsMax {
                do {
                    try log.read(partition: partition, from: next, upTo: end, header: importHeader) {
                        record, value in
                        next = record.offset + 1
                        guard let value, value.hasPrefix(prefix),
                            let source = UInt64(value.dropFirst(prefix.count))
                        else {
                            found.foreign += 1
                            return true
                        }
                        let device = record.header.deviceKey
                        if let last = lastSource[device], last >= source { found.outOfDeviceOrder += 1 }
                        lastSource[device] = source
                        inStreamOrder.append((source, record.header.type == EventType.fixBatch.rawValue))
                        found.stored.append(
                            StoredImport(
                                sourceOffset: source, offset: record.offset, partition: partition,
                                digest: digest(
                                    EncodedEvent(header: record.header, payload: record.storedPayload))))
                        return true
                    }
                    break
                } catch let error as JetStreamLogError where attempt < readAttemptsMax {
                    guard case .readFailed = error else { throw error }
                    writeStandardError(
                        "import: reading partition \(partition) again from offset \(next): \(error)")
                }
            }
        }
        return found
    }

    // MARK: - import

    package static func runImport(
        file: String, openLog: () throws -> JetStreamLog, mapPath: String, verify: Bool,
        publishersPerPartition: Int = LogTransfer.publishersPerPartitionDefault
    ) throws -> Int32 {
        let (header, trailer) = try checkExport(file)
        let log = try openLog()
        defer { log.close() }
        printLine("import: stream \(log.configuration.streamName), \(log.partitionCount) partitions")
        let map = try recordsImportedBefore(into: log, header: header, trailer: trailer)
        let already = map.withLock { $0.count }
        if already > 0 {
            printLine("import: \(already) records already in the stream (an earlier run): skipped")
        }
        let publishers = ImportPublishers(
            log: log, header: header, map: map, lanesPerPartition: publishersPerPartition)
        let started = monotonicMicros()
        var lastProgress = started
        var queued = UInt64(0)
        do {
            try readExport(file) { record in
                queued += 1
                if map.withLock({ $0[record.sourceOffset] }) == nil { try publishers.enqueue(record) }
                let now = monotonicMicros()
                if now - lastProgress >= progressIntervalMicros {
                    lastProgress = now
                    let stored = publishers.stored
                    printLine(
                        "import: \(queued)/\(trailer.records) records read, \(stored) stored, "
                            + "\(rate(stored, micros: now - started)) records/s")
                }
            }
        } catch {
            publishers.abandon()
            throw error
        }
        do {
            try publishers.finish()
        } catch {
            writeStandardError(
                "import: stopped after storing \(publishers.stored) records: \(error); run the same import again "
                    + "to resume (it skips what the stream holds)")
            throw error
        }
        let elapsed = monotonicMicros() - started
        let stored = publishers.stored
        let final = map.withLock { $0 }
        try writeMap(final, to: mapPath, header: header, log: log)
        let newOffsets = final.values
        printLine(
            "import: done: \(stored) records stored, \(already) were there already, \(final.count) of "
                + "\(trailer.records) in the stream; \(publishers.answersRewritten) command answers pointed at "
                + "their batch's new offset (\(publishers.answersOfGoneBatches) at a batch no longer in the log)"
        )
        printLine(
            "import: offsets \(final.keys.min().map { "\($0)" } ?? "-")...\(final.keys.max().map { "\($0)" } ?? "-")"
                + " -> \(newOffsets.min().map { "\($0)" } ?? "-")...\(newOffsets.max().map { "\($0)" } ?? "-")"
                + " (map: \(mapPath == "-" ? "above" : mapPath)); \(String(format1: Double(elapsed) / 1e6)) s, "
                + "\(rate(stored, micros: elapsed)) records/s")
        printLine(
            "import: now rebuild what refers to offsets: a new PostgreSQL projection with `findmy projector "
                + "--log ...` (docs/scale.md, \"Migrating a single-machine log\")")
        guard verify else { return 0 }
        return try runVerify(file: file, log: log, header: header)
    }

    /// Reads the whole export before anything is stored, so that a damaged export stores nothing,
    /// and says what it holds.
    private static func checkExport(_ file: String) throws -> (LogExportHeader, LogExportTrailer) {
        // The whole file is checked before anything is stored: a damaged export stores nothing.
        let header: LogExportHeader
        let trailer: LogExportTrailer
        do {
            (header, trailer) = try readExport(file)
        } catch var damaged as DamagedExport {
            damaged.consequence = "; nothing was imported (export the log again)"
            throw damaged
        }
        printLine(
            "import: \(file) holds \(trailer.records) records (\(trailer.fixes) fixes) of log \(header.logID), "
                + "offsets below \(header.endOffset)")
        if header.serverWasRunning {
            writeStandardError(
                "import: warning: the export was taken while a server held the log; records after offset "
                    + "\(header.endOffset) are not in it")
        }
        return (header, trailer)
    }

    /// What an earlier run of this import stored in the stream, as old offset → new offset; a
    /// stream that holds anything else is refused.
    private static func recordsImportedBefore(
        into log: JetStreamLog, header: LogExportHeader, trailer: LogExportTrailer
    ) throws -> Locked<[UInt64: UInt64]> {
        let before = try scanStream(log, logID: header.logID)
        guard before.foreign == 0 else {
            throw UsageError(
                "the stream \(log.configuration.streamName) holds \(before.foreign) messages that are not this "
                    + "log's import: importing into a stream in use would mix two registries (user and device ids "
                    + "would clash); import into a new stream (nothing was imported)")
        }
        let map = Locked([UInt64: UInt64](minimumCapacity: Int(trailer.records)))
        map.withLock { map in
            for stored in before.stored where map[stored.sourceOffset] == nil {
                map[stored.sourceOffset] = stored.offset
            }
        }
        return map
    }

    static func rate(_ count: UInt64, micros: Int64) -> Int {
        micros > 0 ? Int(Double(count) * 1e6 / Double(micros)) : 0
    }

    /// `old new` per line in source order, after a comment line naming both logs.
    static func writeMap(_ map: [UInt64: UInt64], to path: String, header: LogExportHeader, log: JetStreamLog)
        throws
    {
        var text =
            "# findmy offset map 1: log \(header.logID) -> stream \(log.configuration.streamName) "
            + "(log \(try log.logID())), \(map.count) records: old offset, new offset\n"
        for (old, new) in map.sorted(by: { $0.key < $1.key }) { text += "\(old) \(new)\n" }
        let output = try ExportOutput(path)
        try output.write(Array(text.utf8))
        try output.finish()
    }

    // MARK: - verify

    /// Reads the stream back and checks that every exported record is in it exactly once, in its
    /// device's partition, with the bytes the export holds (answers mapped), in device order.
    static func runVerify(file: String, log: JetStreamLog, header: LogExportHeader) throws -> Int32 {
        let found = try scanStream(log, logID: header.logID)
        var bySource: [UInt64: [StoredImport]] = [:]
        for stored in found.stored { bySource[stored.sourceOffset, default: []].append(stored) }
        var (records, once, missing, twice, different, wrongPartition) = (0, 0, 0, 0, 0, 0)
        var exported = Set<UInt64>()
        try readExport(file) { record in
            records += 1
            exported.insert(record.sourceOffset)
            guard let copies = bySource[record.sourceOffset] else {
                missing += 1
                return
            }
            if copies.count > 1 { twice += 1 }
            let expected = try rewritten(record) { bySource[$0]?.first?.offset }
            let partition = log.partition(ofDevice: record.header.deviceKey)
            if copies.contains(where: { $0.digest != digest(expected) }) { different += 1 }
            if copies.contains(where: { $0.partition != partition }) { wrongPartition += 1 }
            if copies.count == 1 { once += 1 }
        }
        let unknown = bySource.keys.filter { !exported.contains($0) }.count
        printLine(
            "verify: \(records) records exported; in the stream: \(once) once, \(missing) missing, \(twice) more "
                + "than once, \(different) different, \(wrongPartition) in another partition, "
                + "\(found.outOfDeviceOrder) out of device order, \(found.outOfPartitionOrder) out of partition "
                + "order, \(unknown) not in the export, \(found.foreign) "
                + "other messages")
        let ok =
            missing == 0 && twice == 0 && different == 0 && wrongPartition == 0 && found.outOfDeviceOrder == 0
            && found.outOfPartitionOrder == 0
            && unknown == 0
        printLine(ok ? "verify: ok" : "verify: MISMATCH")
        return ok ? 0 : 1
    }
}

/// Publisher threads ("lanes"), `lanesPerPartition` per partition, fed through bounded queues by
/// the reader of the file. Each lane waits for JetStream's acknowledgement of one publish before the
/// next, so lanes are the publishes in flight: one per partition left the import bound by round
/// trips (about 3,000 records/s).
///
/// What order is kept, and why it is enough (docs/scale.md, "What is mapped"):
/// - a fix batch goes to its device's lane (always the same one), so a device's batches keep their
///   order among themselves; a batch depends on nothing but its device's earlier records;
/// - every other record (a user, a device's enrolment, a share, a command, a fence, an erasure...)
///   is a barrier of its partition: it is published once every earlier record of the partition is
///   stored, and no later one of the partition before it is. Such records refer to other keys (a
///   device's enrolment to its user, in partition 0 with it), and within a partition the fold
///   takes them in stream order for good, so their source order must hold there. Across
///   partitions nothing was ever ordered: the partitioned projector retries a transaction that
///   needs a row another partition has not folded yet.
/// Barriers are rare beside batches, so the lanes carry the volume.
final class ImportPublishers: @unchecked Sendable {
    private let log: JetStreamLog
    private let header: LogExportHeader
    private let map: Locked<[UInt64: UInt64]>
    private let lanesPerPartition: Int
    /// Condition 0: a lane has work or should end; 1: queue room, a lane idle, a barrier stored.
    private let lock = ConditionLock(conditions: 2)
    private var queues: [[LogExportRecord]]
    /// A lane is storing the record it took (its queue may be empty meanwhile).
    private var busy: [Bool]
    /// A partition's barrier is queued or being stored: nothing more of the partition goes in.
    private var barrierPending: [Bool]
    private var closed = false
    private var failure: Error?
    private var threads: [pthread_t] = []
    private(set) var storedCount = UInt64(0)
    private(set) var answersRewritten = 0
    private(set) var answersOfGoneBatches = 0

    init(log: JetStreamLog, header: LogExportHeader, map: Locked<[UInt64: UInt64]>, lanesPerPartition: Int) {
        precondition(lanesPerPartition >= 1, "at least one publisher per partition")
        self.log = log
        self.header = header
        self.map = map
        self.lanesPerPartition = lanesPerPartition
        queues = Array(repeating: [], count: log.partitionCount * lanesPerPartition)
        busy = Array(repeating: false, count: queues.count)
        barrierPending = Array(repeating: false, count: log.partitionCount)
        for lane in 0..<queues.count {
            threads.append(spawnThread { [self] in publish(lane) })
        }
    }

    /// The lane of a device within its partition: a second hash of its key (SplitMix64's
    /// finaliser), independent of the one that chose the partition (FNV-1a modulo the partition
    /// count), so that every lane of a partition gets devices.
    private func lane(ofDevice deviceKey: UInt64, partition: Int) -> Int {
        var mixed = deviceKey &+ 0x9E37_79B9_7F4A_7C15
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        mixed ^= mixed >> 31
        return partition * lanesPerPartition + Int(mixed % UInt64(lanesPerPartition))
    }

    private static func isBarrier(_ record: LogExportRecord) -> Bool {
        record.header.type != EventType.fixBatch.rawValue
    }

    /// Whether every record of `partition` queued so far is stored. Under `lock`.
    private func drained(_ partition: Int) -> Bool {
        let lanes = partition * lanesPerPartition..<(partition + 1) * lanesPerPartition
        return lanes.allSatisfy { queues[$0].isEmpty && !busy[$0] }
    }

    var stored: UInt64 { lock.withLock { storedCount } }

    /// Queues a record for its partition's publisher; waits while that queue is full. Throws the
    /// first publisher's failure.
    func enqueue(_ record: LogExportRecord) throws {
        let partition = log.partition(ofDevice: record.header.deviceKey)
        try lock.withLock {
            while barrierPending[partition] && failure == nil { lock.wait(1) }
            let lane: Int
            if Self.isBarrier(record) {
                while !drained(partition) && failure == nil { lock.wait(1) }
                lane = partition * lanesPerPartition
                barrierPending[partition] = true
            } else {
                lane = self.lane(ofDevice: record.header.deviceKey, partition: partition)
                while queues[lane].count >= LogTransfer.queuedRecordsMax && failure == nil { lock.wait(1) }
            }
            if let failure { throw failure }
            queues[lane].append(record)
            lock.broadcast(0)
        }
    }

    /// Waits until every queued record is stored; throws the first failure.
    func finish() throws {
        lock.withLock {
            closed = true
            lock.broadcast(0)
        }
        for thread in threads { pthread_join(thread, nil) }
        threads = []
        if let failure = lock.withLock({ failure }) { throw failure }
    }

    /// Stops the publishers after the records they hold (the reader failed).
    func abandon() {
        lock.withLock { failure = failure ?? CancellationError() }
        try? finish()
    }

    private struct CancellationError: Error {}

    private func publish(_ lane: Int) {
        while true {
            let record: LogExportRecord? = lock.withLock {
                while queues[lane].isEmpty && !closed && failure == nil { lock.wait(0) }
                guard failure == nil, !queues[lane].isEmpty else { return nil }
                let first = queues[lane].removeFirst()
                busy[lane] = true
                lock.broadcast(1)
                return first
            }
            guard let record else { return }
            do {
                try store(record)
                lock.withLock {
                    busy[lane] = false
                    if Self.isBarrier(record) { barrierPending[lane / lanesPerPartition] = false }
                    lock.broadcast(1)
                }
            } catch {
                lock.withLock {
                    failure = failure ?? error
                    lock.broadcast(0)
                    lock.broadcast(1)
                }
                return
            }
        }
    }

    private func store(_ record: LogExportRecord) throws {
        var gone = false
        let encoded = try LogTransfer.rewritten(record) { batch in
            // The batch is the device's, in this partition, earlier: already stored.
            let mapped = map.withLock { $0[batch] }
            gone = mapped == nil
            return mapped
        }
        let appended = try log.append(
            record: encoded, messageID: LogTransfer.messageID(header.logID, record.sourceOffset),
            headers: [(LogTransfer.importHeader, LogTransfer.headerValue(header.logID, record.sourceOffset))])
        map.withLock { $0[record.sourceOffset] = appended.offset }
        lock.withLock {
            storedCount += 1
            if record.header.type == EventType.commandAnswered.rawValue {
                answersRewritten += 1
                if gone { answersOfGoneBatches += 1 }
            }
        }
    }
}
