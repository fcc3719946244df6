import Compactor
import Core
import Events
import Foundation
import Identity
import Synchronization
import Testing
import Threads

/// A server's stop during a compaction does not wait for the registry refold, which folds the whole
/// compacted log (minutes at 100 M single-fix records, longer than a service manager's stop
/// timeout): the refold ends within a few hundred records of the stop, the snapshotter's last
/// snapshot at stop holds what was folded, and the next start folds the rest. Never a wrong
/// registry (docs/retention.md, "Stopping during a compaction").
@Suite struct StopDuringCompactionTests {
    typealias Data = SnapshotAfterCompactionTests

    /// Set by a hook, waited for by the test: a condition, not a sleep.
    final class Flag: Sendable {
        let signal = StopSignal()
    }

    @Test func aStopDuringTheRefoldEndsItAndTheNextStartEqualsAFullScan() throws {
        let data = Data.DataDirectory()
        let refoldStarted = Flag()
        let outcome = Mutex<Result<CompactionReport, any Error>?>(nil)
        var end: UInt64 = 0
        do {
            let log = try data.openLog()
            defer { log.close() }
            let identity = try IdentityService(log: log, limits: data.limits, snapshots: data.store)
            // Set once the compactor exists; the hook below waits for its stop signal.
            let compactorBox = Mutex<Compactor?>(nil)
            let snapshotter = RegistrySnapshotter(
                registry: identity.store, store: data.store,
                report: { event in
                    guard case .refolding = event, let compactor = compactorBox.withLock({ $0 }) else {
                        return
                    }
                    // The refold has begun (on the compactor's thread): the test stops the service
                    // now; the fold goes on only once the stop is requested, so it sees it.
                    refoldStarted.signal.request()
                    compactor.stopSignal.wait(micros: 120_000_000)
                })
            try Data.appendRegistry(to: log)
            // The service's run compacts as of the wall clock: recent batches, enough that a refold
            // stopped promptly is visibly short of the end; device 2's erased, in every segment.
            try Data.appendRecentBatchesThenErasure(to: log, batchIDHigh: 5)
            #expect(snapshotter.snapshotNow() != nil)
            end = log.durableEnd

            let compactor = Compactor(
                writer: log, client: nil, options: Compactor.Options(),
                snapshotAfterRewrite: { snapshotter.snapshotAfterCompaction(stop: $0) })
            compactorBox.withLock { $0 = compactor }
            var schedule = CompactorService.Schedule()
            schedule.firstRunDelayMicros = 0
            let service = CompactorService(compactor: compactor, schedule: schedule) { result in
                outcome.withLock { $0 = result }
            }
            try service.start()
            let began = refoldStarted.signal.wait(micros: 120_000_000)
            // Stopped whether or not the refold was reached, so that no thread outlives the test.
            service.stop(graceMicros: 0)
            try #require(began, "the compactor never reached the registry refold")
            // The snapshotter stops after the compactor (the server's reverse order), with no grace
            // left: its last snapshot is of what was folded, not of the whole log.
            snapshotter.stop(graceMicros: 0)
        }
        let result = try #require(outcome.withLock { $0 })
        let report = try result.get()
        #expect(report.stoppedEarly)
        #expect(report.log.segmentsRewritten + report.log.segmentsDeleted > 0)
        #expect(report.registrySnapshotOffset == nil)

        let reference = try data.fullScan()
        let restarted = try data.start()
        // The start loads the snapshot written at stop, short of the end, and folds the rest.
        let loaded = try #require(restarted.store.startReport.snapshotOffset)
        #expect(loaded < end)
        #expect(restarted.store.startReport.recordsReplayed > 0)
        #expect(restarted.store.startReport.skipped.allSatisfy { $0.deleted })
        #expect(restarted.registrySnapshot.differences(from: reference) == [])
        // The snapshots from before the compaction held what it removed: none is left.
        #expect(data.snapshotFiles() == [RegistrySnapshotFormat.fileName(offset: loaded)])
    }
}
