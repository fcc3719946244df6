import Compactor
import Events
import Foundation
import Synchronization
import Testing
import Threads

/// A server's stop during a compaction's first step, the policy scan over every record's header
/// (minutes at 100 M records), ends the scan within `policyRecordsPerStopCheck` records instead of
/// waiting for it, and the run then changes nothing: no segment rolled, rewritten or deleted; the
/// whole run is the next one's (docs/retention.md, "Stopping during a compaction").
@Suite struct StopDuringPolicyScanTests {
    typealias Data = SnapshotAfterCompactionTests

    /// Set by the phase hook, waited for by the test: a condition, not a sleep.
    final class Seen: Sendable {
        let scanBegan = StopSignal()
        let offsets = Mutex<[UInt64]>([])
    }

    func segmentFiles(_ data: Data.DataDirectory) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: data.path + "/log")) ?? [])
            .filter { $0.hasSuffix(".seg") }.sorted()
    }

    @Test func aStopDuringThePolicyScanEndsItAndChangesNothing() throws {
        let data = Data.DataDirectory()
        let seen = Seen()
        let outcome = Mutex<Result<CompactionReport, any Error>?>(nil)
        let log = try data.openLog()
        defer { log.close() }
        try Data.appendRegistry(to: log)
        try Data.appendRecentBatchesThenErasure(to: log, batchIDHigh: 6)
        let end = log.durableEnd
        let filesBefore = segmentFiles(data)

        var options = Compactor.Options()
        options.policyRecordsPerStopCheck = 100
        let compactorBox = Mutex<Compactor?>(nil)
        let compactor = Compactor(
            writer: log, client: nil, options: options,
            observePhase: { phase in
                guard case .readingPolicy(let offset, _) = phase else { return }
                seen.offsets.withLock { $0.append(offset) }
                // Held at the scan's first check until the test has stopped the service: the scan goes
                // on only with the stop requested, so its next check sees it.
                guard offset > 0, !seen.scanBegan.isRequested,
                    let compactor = compactorBox.withLock({ $0 })
                else { return }
                seen.scanBegan.request()
                compactor.stopSignal.wait(micros: 120_000_000)
            })
        compactorBox.withLock { $0 = compactor }
        var schedule = CompactorService.Schedule()
        schedule.firstRunDelayMicros = 0
        let service = CompactorService(compactor: compactor, schedule: schedule) { result in
            outcome.withLock { $0 = result }
        }
        try service.start()
        let began = seen.scanBegan.wait(micros: 120_000_000)
        service.stop(graceMicros: 0)
        try #require(began, "the compactor never reached the policy scan")

        let report = try #require(outcome.withLock { $0 }).get()
        #expect(report.stoppedEarly)
        #expect(report.log == LogCompactionReport(), "the run went on after the scan: \(report.log)")
        #expect(segmentFiles(data) == filesBefore)
        // The scan stopped within one check of the stop: far short of the log's end.
        let offsets = seen.offsets.withLock { $0 }
        #expect(offsets.count <= 3, "\(offsets)")
        #expect((offsets.max() ?? 0) < end / 2, "\(offsets) of \(end)")

        // The next run, not stopped, does the work.
        let next = try Compactor(writer: log, client: nil, options: options).run()
        #expect(!next.stoppedEarly)
        #expect(next.log.segmentsRewritten + next.log.segmentsDeleted > 0)
        #expect(next.log.activeSegmentRolled)
    }
}
