import Events
import Foundation
import Testing
import Threads
import Workload

/// Faults injected through a file layer the test controls: what the durability rules promise
/// when the disk says no.
@Suite struct FaultInjectionTests {
    func fixBatch(_ index: Int) -> Event {
        var track = TrackGenerator(seed: UInt64(index), startMicros: 1_700_000_000_000_000)
        return .fixBatch(
            FixBatch(deviceID: 1, batchID: UUID128(high: 1, low: UInt64(index)), fixes: track.next(3)))
    }

    @Test func aFailedFdatasyncStopsTheProcess() async throws {
        let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let directory = TemporaryDirectory()
            let io = FaultyFileIO()
            var options = LogOptions()
            options.io = io
            options.diagnostics = { _ in }
            let writer = try! LogWriter(directory: directory.log, options: options)
            try! writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
            io.armSyncFailure(errno: EIO)
            // Must not return: a retried fsync could report success for pages the kernel dropped.
            _ = try? writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: false)))
        }
        #expect(
            String(decoding: result.standardErrorContent, as: UTF8.self).contains(
                "fdatasync failed, stopping"))
    }

    /// What `findmy serve` does with a failed fdatasync: the thread that failed tells the server
    /// and never returns, and the server closes the log while stopping. That close must neither wait
    /// for the group that failed nor acknowledge anything after it.
    @Test(.timeLimit(.minutes(1)))
    func afterAFailedFdatasyncCloseFailsWhatIsQueuedWithoutWaitingForTheFailedGroup() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let reported = StopSignal()
        var options = LogOptions()
        options.io = io
        options.diagnostics = { _ in }
        options.onSyncFailure = { _ in
            reported.request()
            StopSignal().wait()
            fatalError("unreachable")
        }
        let writer = try LogWriter(directory: directory.log, options: options)
        try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
        let durableBefore = writer.durableEnd
        io.armSyncFailure(errno: EIO)
        pthread_detach(
            spawnThread {
                _ = try? writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: false)))
            })
        reported.wait()
        let queued = Locked<Bool?>(nil)
        let appender = spawnThread {
            let appended =
                (try? writer.append(.reportingChanged(ReportingChanged(deviceID: 2, paused: true)))) != nil
            queued.withLock { $0 = appended }
        }
        writer.close()
        pthread_join(appender, nil)
        #expect(queued.withLock { $0 } == false, "an append after the failed group was acknowledged")
        #expect(writer.durableEnd == durableBefore)
        #expect(writer.state == .failed("fdatasync failed"))
    }

    /// The other order: `close` starts while the group's fdatasync is still running and waits for
    /// that group, which then fails. The failing thread never returns, so `close` must be woken by
    /// the failure itself, and then fail every append still waiting rather than wait for ever.
    @Test func aCloseWaitingForAGroupWhoseFdatasyncThenFailsReturnsAndFailsTheWaitingAppends() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let reported = StopSignal()
        var options = LogOptions()
        options.io = io
        options.diagnostics = { _ in }
        options.onSyncFailure = { _ in
            reported.request()
            StopSignal().wait()
            fatalError("unreachable")
        }
        let writer = try LogWriter(directory: directory.log, options: options)
        try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
        let durableBefore = writer.durableEnd
        let syncing = StopSignal()
        let release = StopSignal()
        io.armSyncFailure(errno: EIO, entered: syncing, release: release)
        pthread_detach(
            spawnThread {
                _ = try? writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: false)))
            })
        syncing.wait()
        // Queued behind the group in flight (or refused, if `close` got there first).
        let queued = Locked<Bool?>(nil)
        let appender = spawnThread {
            let appended =
                (try? writer.append(.reportingChanged(ReportingChanged(deviceID: 2, paused: true)))) != nil
            queued.withLock { $0 = appended }
        }
        let closed = Locked(false)
        let closer = spawnThread {
            writer.close()
            closed.withLock { $0 = true }
        }
        #expect(waitUntil { writer.isClosed })
        release.request()
        reported.wait()
        let closedInTime = waitUntil { closed.withLock { $0 } && queued.withLock { $0 } != nil }
        #expect(closedInTime, "close, or an append queued behind the failed group, is still waiting")
        guard closedInTime else {
            pthread_detach(closer)
            pthread_detach(appender)
            return
        }
        pthread_join(closer, nil)
        pthread_join(appender, nil)
        #expect(queued.withLock { $0 } == false, "an append after the failed group was acknowledged")
        #expect(writer.durableEnd == durableBefore)
        #expect(writer.state == .failed("fdatasync failed"))
    }

    @Test func noSpaceFailsTheAppendCleanlyAndTheLogStaysUsable() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let writer = try LogWriter(directory: directory.log, options: quietOptions(io))
        #expect(try writer.append(fixBatch(0)) == 0)
        io.armWriteFailure(errno: ENOSPC)
        #expect {
            try writer.append(fixBatch(1))
        } throws: { error in
            guard case LogError.writeFailed(let cause) = error else { return false }
            return cause.isNoSpace && "\(error)".contains("free disk space")
        }
        #expect(writer.durableEnd == 1)
        // Space is back: the next append takes the offset the failed one did not get.
        #expect(try writer.append(fixBatch(2)) == 1)
        writer.close()
        let records = try readAll(directory.log)
        #expect(records.map(\.offset) == [0, 1])
        #expect(records.map(\.header.idempotencyKey.low) == [0, 2])
        #expect(try LogInspector(directory: directory.log).verify().ok)
    }

    @Test func aPartialWriteIsUndoneBeforeAnythingIsBuiltOnIt() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let writer = try LogWriter(directory: directory.log, options: quietOptions(io))
        try writer.append(fixBatch(0))
        // Half a frame reaches the file, then the disk fills up.
        io.armShortWrite(bytes: 40)
        #expect(throws: (any Error).self) { try writer.append(fixBatch(1)) }
        #expect(try writer.append(fixBatch(2)) == 1)
        writer.close()
        #expect(try readAll(directory.log).map(\.header.idempotencyKey.low) == [0, 2])
        let report = try LogInspector(directory: directory.log).verify()
        #expect(report.ok && report.tornBytesTruncated == 0)
    }

    @Test func aPartialWriteLeftByACrashIsATornTail() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let writer = try LogWriter(directory: directory.log, options: quietOptions(io))
        try writer.append(fixBatch(0))
        writer.close()
        // What a crash in the middle of a write leaves: a frame's first bytes and nothing after.
        let segment = try segmentFiles(directory.log)[0]
        let frame = Frame.encoded(
            header: EventCodec.encode(fixBatch(1), receivedAtMicros: 1).header, payload: [1, 2, 3])
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: segment))
        try handle.seekToEnd()
        try handle.write(contentsOf: frame.prefix(frame.count / 2))
        try handle.close()
        let reopened = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(reopened.recovery.tornBytesTruncated == frame.count / 2)
        #expect(reopened.durableEnd == 1)
        reopened.close()
    }

    @Test func concurrentAppendersAllFailTogetherAndRecover() throws {
        let directory = TemporaryDirectory()
        let io = FaultyFileIO()
        let writer = try LogWriter(directory: directory.log, options: quietOptions(io))
        let succeeded = Locked<[UInt64]>([])
        let failed = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 16) { appender in
            for index in 0..<40 {
                if appender == 0 && index == 20 { io.armWriteFailure(errno: EIO) }
                do {
                    let offset = try writer.append(fixBatch(appender * 100 + index))
                    succeeded.withLock { $0.append(offset) }
                } catch {
                    failed.withLock { $0 += 1 }
                }
            }
        }
        writer.close()
        let offsets = succeeded.withLock { $0 }.sorted()
        // Acknowledged offsets are exactly the records in the log: dense, none lost, none extra.
        #expect(offsets == Array(0..<UInt64(offsets.count)))
        #expect(try readAll(directory.log).map(\.offset) == offsets)
        #expect(offsets.count + failed.withLock { $0 } == 16 * 40)
    }
}
