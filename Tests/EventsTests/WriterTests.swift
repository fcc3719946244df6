import Events
import Foundation
import Testing
import Workload

@Suite struct WriterTests {
    func batch(_ device: UInt64, _ fixes: [Fix]) -> Event {
        .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes))
    }

    @Test func appendsAreDurableDenseAndReadBack() throws {
        let directory = TemporaryDirectory()
        var track = TrackGenerator(seed: 1, startMicros: 1_700_000_000_000_000)
        var events: [Event] = []
        do {
            let writer = try LogWriter(directory: directory.log, options: quietOptions())
            for index in 0..<50 {
                let event = batch(UInt64(index % 3 + 1), track.next(index % 7))
                events.append(event)
                #expect(try writer.append(event, receivedAtMicros: Int64(index)) == UInt64(index))
            }
            #expect(writer.durableEnd == 50)
            writer.close()
        }
        let records = try readAll(directory.log)
        #expect(records.map(\.offset) == Array(0..<50))
        #expect(try records.map { try $0.event() } == events)
        #expect(records.map(\.header.receivedAtMicros) == (0..<50).map { Int64($0) })
    }

    @Test func concurrentAppendersShareGroupCommits() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        let appenders = 32
        let perAppender = 50
        let offsets = Locked<[UInt64]>([])
        DispatchQueue.concurrentPerform(iterations: appenders) { appender in
            var track = TrackGenerator(seed: UInt64(appender), startMicros: 0)
            for _ in 0..<perAppender {
                let offset = try! writer.append(batch(UInt64(appender), [track.next()]))
                offsets.withLock { $0.append(offset) }
            }
        }
        writer.close()
        let all = offsets.withLock { $0 }
        #expect(all.sorted() == Array(0..<UInt64(appenders * perAppender)))
        let records = try readAll(directory.log)
        #expect(records.count == appenders * perAppender)
        var perDevice: [UInt64: Int] = [:]
        for record in records { perDevice[record.header.deviceKey, default: 0] += 1 }
        #expect(perDevice.values.allSatisfy { $0 == perAppender })
    }

    @Test func segmentsRollBySizeAndAgeAndStayContiguous() throws {
        let directory = TemporaryDirectory()
        let clock = Locked<Int64>(1_000_000)
        var options = quietOptions()
        options.segmentBytesMax = 4_096
        options.segmentAgeSecondsMax = 60
        options.clockMicros = { clock.withLock { $0 } }
        var track = TrackGenerator(seed: 2, startMicros: 0)
        do {
            let writer = try LogWriter(directory: directory.log, options: options)
            for _ in 0..<40 { try writer.append(batch(1, track.next(10))) }
            let bySize = try segmentFiles(directory.log).count
            #expect(bySize > 3)
            clock.withLock { $0 += 61_000_000 }
            try writer.append(batch(1, track.next(1)))
            #expect(try segmentFiles(directory.log).count == bySize + 1)
            writer.close()
        }
        let records = try readAll(directory.log)
        #expect(records.map(\.offset) == Array(0..<41))
        let report = try LogInspector(directory: directory.log).verify()
        #expect(report.ok, "\(report.problems)")
        #expect(report.records == 41)
        // Reading from the middle of any segment starts at exactly that offset.
        for start in [UInt64(0), 7, 20, 40] {
            #expect(try readAll(directory.log, from: start).first?.offset == start)
        }
    }

    @Test func aSecondWriterIsRefusedClearly() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(throws: LogError.locked(directory: directory.log)) {
            _ = try LogWriter(directory: directory.log, options: quietOptions())
        }
        writer.close()
        _ = try LogWriter(directory: directory.log, options: quietOptions())
    }

    @Test func readersSeeOnlyDurableRecordsAndCanTail() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        let seen = Locked<[UInt64]>([])
        let stop = Locked(false)
        let done = DispatchSemaphore(value: 0)
        // A reader with no access to the writer: it learns of new records from log/durable only.
        Thread {
            let reader = LogReader(directory: directory.log)
            _ = try? reader.follow(from: 0, shouldStop: { stop.withLock { $0 } }) { record in
                seen.withLock { $0.append(record.offset) }
            }
            done.signal()
        }.start()
        var track = TrackGenerator(seed: 3, startMicros: 0)
        for _ in 0..<20 { try writer.append(batch(9, track.next(5))) }
        // A generous deadline: it only bounds a failing test.
        let deadline = Date().addingTimeInterval(120)
        while seen.withLock({ $0.count }) < 20 && Date() < deadline { usleep(10_000) }
        stop.withLock { $0 = true }
        done.wait()
        #expect(seen.withLock { $0 } == Array(0..<20))
        writer.close()
    }

    @Test func headerOnlyScansSkipPayloads() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        var track = TrackGenerator(seed: 4, startMicros: 0)
        try writer.append(
            .userCreated(
                UserCreated(userID: 1, name: "ada", role: .admin, tokenHash: Array(repeating: 1, count: 32))))
        for _ in 0..<5 { try writer.append(batch(1, track.next(100))) }
        writer.close()
        var payloadBytes = 0
        var types: [UInt8] = []
        let skipFixes: (RecordHeader) -> Bool = { $0.type != EventType.fixBatch.rawValue }
        try LogReader(directory: directory.log).read(from: 0, wantPayload: skipFixes) { record in
            payloadBytes += record.storedPayload.count
            types.append(record.header.type)
            return true
        }
        #expect(types == [2, 1, 1, 1, 1, 1])
        #expect(payloadBytes > 0 && payloadBytes < 100)
    }
}

@Suite struct ReaderResumeTests {
    @Test func readingInStepsMatchesReadingWhole() throws {
        let directory = TemporaryDirectory()
        var options = quietOptions()
        options.segmentBytesMax = 3_000
        let writer = try LogWriter(directory: directory.log, options: options)
        var track = TrackGenerator(seed: 11, startMicros: 0)
        for index in 0..<60 {
            let batch = FixBatch(
                deviceID: 1, batchID: UUID128(high: 0, low: UInt64(index)), fixes: track.next(3))
            try writer.append(.fixBatch(batch))
        }
        let wholeRecords = try readAll(directory.log)
        #expect(Set(wholeRecords.map(\.segmentPath)).count > 3)
        // One reader, reading a few records at a time as a projector does: it resumes in place.
        let reader = LogReader(directory: directory.log)
        var stepped: [RecordHeader] = []
        var next: UInt64 = 0
        var step = 1
        while next < 60 {
            next = try reader.read(from: next, upTo: min(60, next + UInt64(step))) { record in
                stepped.append(record.header)
                return true
            }
            step = step % 7 + 1
        }
        #expect(stepped == wholeRecords.map(\.header))

        // After a rewrite the remembered position is not trusted (the segment's salt changed).
        let firstPath = try segmentFiles(directory.log)[0]
        let first = LogFormat.baseOffset(fileName: (firstPath as NSString).lastPathComponent)!
        try reader.read(from: 0, upTo: 3) { _ in true }  // the reader now remembers a place in that segment
        _ = try writer.rewriteSegment(base: first) { record in record.offset % 2 == 0 ? .drop : .keep }
        let dropped = Set(
            wholeRecords.filter { $0.segmentPath == firstPath && $0.offset % 2 == 0 }.map(\.offset))
        var afterRewrite: [UInt64] = []
        var position: UInt64 = 3
        afterRewrite = wholeRecords.map(\.offset).filter { $0 < 3 && !dropped.contains($0) }
        while position < 60 {
            position = try reader.read(from: position, upTo: min(60, position + 2)) { record in
                afterRewrite.append(record.offset)
                return true
            }
        }
        #expect(afterRewrite == wholeRecords.map(\.offset).filter { !dropped.contains($0) })
        writer.close()
    }
}

/// What a tailing reader asks of the file: the new records, not a fixed chunk.
@Suite struct TailReadTests {
    /// A projector at the log's end reads each new record as it becomes durable: every read asks
    /// for the segment's header and the bytes past where the last one stopped, so the whole tail
    /// costs about one read of the file, however many reads it took.
    @Test func aTailingReaderAsksForTheNewBytesOnly() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        defer { writer.close() }
        let io = FaultyFileIO()
        let reader = LogReader(directory: directory.log, io: io)
        var track = TrackGenerator(seed: 12, startMicros: 0)
        var next: UInt64 = 0
        var reads = 0
        for _ in 0..<100 {
            try writer.append(
                .fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: [track.next()])))
            let before = next
            next = try reader.read(from: next) { _ in true }
            #expect(next == before + 1)
            reads += 1
        }
        let segmentBytes = try segmentFiles(directory.log).reduce(0) { total, path in
            total + ((try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0)
        }
        let asked = io.bytesAsked
        // Each read also asks for the segment's header and the durable watermark (log/durable, 24
        // bytes): this reader has no writer in its process.
        let perRead = LogFormat.segmentHeaderBytes + 24
        #expect(
            asked <= segmentBytes + reads * perRead,
            "\(asked) bytes asked for \(segmentBytes)")
    }
}

/// `append(_:completion:)`: the non-blocking append the HTTP report route uses.
@Suite struct NonBlockingAppendTests {
    func batch(_ device: UInt64) -> EncodedEvent {
        var track = TrackGenerator(seed: device, startMicros: 0)
        return EventCodec.encode(
            .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: [track.next()])),
            receivedAtMicros: 0)
    }

    /// Waits for `count` completions, at most 10 s.
    func collect(_ count: Int, _ start: (@escaping @Sendable (Result<UInt64, LogError>) -> Void) -> Void)
        -> [Result<UInt64, LogError>]
    {
        let results = Locked<[Result<UInt64, LogError>]>([])
        let done = DispatchSemaphore(value: 0)
        start { result in
            results.withLock { $0.append(result) }
            done.signal()
        }
        for _ in 0..<count { _ = done.wait(timeout: .now() + 10) }
        return results.withLock { $0 }
    }

    @Test func completionsComeOnlyOnceDurableAndCoverEveryOffset() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        let durableAtCompletion = Locked<[Bool]>([])
        let results = collect(200) { completion in
            // Nobody waits on these tickets: only the writer's committer thread can lead them.
            for index in 0..<200 {
                writer.append(batch(UInt64(index))) { result in
                    if case .success(let offset) = result {
                        durableAtCompletion.withLock { $0.append(writer.durableEnd > offset) }
                    }
                    completion(result)
                }
            }
        }
        let offsets = results.compactMap { try? $0.get() }
        #expect(offsets.sorted() == Array(0..<200))
        #expect(durableAtCompletion.withLock { $0 }.allSatisfy { $0 })
        writer.close()
        #expect(try readAll(directory.log).map(\.offset) == Array(0..<200))
    }

    @Test func blockingAndNonBlockingAppendsMix() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        let blockingOffsets = Locked<[UInt64]>([])
        let results = collect(8 * 50) { completion in
            DispatchQueue.concurrentPerform(iterations: 16) { appender in
                for _ in 0..<50 {
                    if appender % 2 == 0 {
                        writer.append(batch(UInt64(appender)), completion: completion)
                    } else {
                        let offset = try! writer.append(batch(UInt64(appender)))
                        blockingOffsets.withLock { $0.append(offset) }
                    }
                }
            }
        }
        let all = results.compactMap { try? $0.get() } + blockingOffsets.withLock { $0 }
        #expect(all.sorted() == Array(0..<UInt64(16 * 50)))
        writer.close()
        #expect(try readAll(directory.log).count == 16 * 50)
    }

    @Test func aFailedWriteFailsTheCompletionAndNothingIsAcknowledged() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let writer = try LogWriter(directory: directory.log, options: quietOptions(io))
        #expect(collect(1) { writer.append(batch(0), completion: $0) }.map { try? $0.get() } == [0])
        io.armWriteFailure(errno: EIO)
        let failed = collect(1) { writer.append(batch(1), completion: $0) }
        #expect(failed.count == 1)
        #expect((try? failed.first?.get()) == nil)
        #expect(writer.durableEnd == 1)
        #expect(collect(1) { writer.append(batch(2), completion: $0) }.map { try? $0.get() } == [1])
        writer.close()
        #expect(try readAll(directory.log).map(\.offset) == [0, 1])
    }

    @Test func theCommitterWaitsTheGroupCommitDelayForMoreAppends() throws {
        let directory = TemporaryDirectory()
        var options = quietOptions()
        options.groupCommitDelayMicros = 20_000
        let writer = try LogWriter(directory: directory.log, options: options)
        let results = collect(40) { completion in
            for index in 0..<40 { writer.append(batch(UInt64(index)), completion: completion) }
        }
        #expect(results.compactMap { try? $0.get() }.sorted() == Array(0..<40))
        #expect(
            writer.statistics.groupCommits <= 4, "\(writer.statistics.groupCommits) groups for 40 appends")
        writer.close()
    }

    @Test func aClosedWriterFailsAtOnce() throws {
        let directory = TemporaryDirectory()
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        writer.close()
        let results = collect(1) { writer.append(batch(0), completion: $0) }
        #expect(results.count == 1)
        if case .failure(.closed) = results.first {
        } else {
            Issue.record("expected LogError.closed, got \(results)")
        }
    }
}
