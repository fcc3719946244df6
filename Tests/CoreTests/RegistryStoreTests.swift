import Events
import Foundation
import Synchronization
import Testing

@testable import Core

/// The store's one append path on this machine's log: a change is durable and folded when
/// `appendAndApply` returns, a restart folds the same registry from the log, and a log that cannot
/// store says so as `AppendFailure.logUnavailable`, with nothing applied.
@Suite struct RegistryStoreTests {
    final class Scratch: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "/findmy-store-\(UInt64.random(in: 0...UInt64.max))"
        init() { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    /// What the store told its caller to log, in order.
    final class Notes: Sendable {
        let seen = Mutex<[StoreNote]>([])
        var all: [StoreNote] { seen.withLock { $0 } }
    }

    static func open(_ scratch: Scratch, _ notes: Notes = Notes()) throws -> RegistryStore {
        var options = LogOptions()
        options.diagnostics = { _ in }
        return try RegistryStore(
            log: LogWriter(directory: scratch.path + "/log", options: options), recentBatchesPerDeviceMax: 8,
            clockMicros: { 1_000 }, appendObserver: { _ in },
            notes: { note in notes.seen.withLock { $0.append(note) } }, snapshots: nil)
    }

    static let ada = Event.userCreated(
        UserCreated(userID: 1, name: "ada", role: .member, tokenHash: [UInt8](repeating: 7, count: 32)))

    @Test func aChangeIsFoldedWhenItsAppendReturnsAndAgainFromTheLogAfterARestart() throws {
        let scratch = Scratch()
        let store = try Self.open(scratch)
        let offset = try store.appendAndApply(Self.ada, receivedAtMicros: 5)
        #expect(offset == 0 && store.durableEnd == 1)
        #expect(store.registrySnapshot.users[1]?.name == "ada")
        #expect(store.appenderFolds && store.log.healthName == "writable")
        store.writer.close()

        let restarted = try Self.open(scratch)
        defer { restarted.writer.close() }
        #expect(restarted.registrySnapshot.users[1]?.name == "ada")
        #expect(restarted.startReport.recordsReplayed == 1)
    }

    @Test func aLogThatCannotStoreFailsTheChangeAppliesNothingAndIsNoted() throws {
        let scratch = Scratch()
        let notes = Notes()
        let store = try Self.open(scratch, notes)
        store.writer.close()
        var failure: AppendFailure?
        do {
            _ = try store.appendAndApply(Self.ada, receivedAtMicros: 5)
        } catch {
            failure = error
        }
        guard case .logUnavailable(let reason)? = failure else {
            Issue.record("expected logUnavailable, got \(String(describing: failure))")
            return
        }
        #expect(store.registrySnapshot.users.isEmpty)
        let failing = store.logFailing.load(ordering: .relaxed)
        #expect(failing)
        #expect(notes.all == [.appendFailed(error: reason)])
    }

    @Test func anAppendWithoutWaitingReportsTheSameFailure() throws {
        let scratch = Scratch()
        let store = try Self.open(scratch)
        store.writer.close()
        let result = Mutex<Result<SharedAppend, AppendFailure>?>(nil)
        let done = DispatchSemaphore(value: 0)
        store.appendReportingDuplicates(EventCodec.encode(Self.ada, receivedAtMicros: 5)) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        guard case .failure(.logUnavailable)? = result.withLock({ $0 }) else {
            Issue.record("expected logUnavailable, got \(String(describing: result.withLock { $0 }))")
            return
        }
        #expect(store.registrySnapshot.users.isEmpty)
    }

    @Test func onThisMachinesLogADecisionRunsOnceAndAConflictIsNotRetried() throws {
        let scratch = Scratch()
        let store = try Self.open(scratch)
        defer { store.writer.close() }
        var attempts = 0
        #expect(throws: AppendFailure.registryConflict) {
            try store.mutations.withLock { _ throws(AppendFailure) in
                attempts += 1
                throw .registryConflict
            }
        }
        #expect(attempts == 1 && store.decisionSeesWholeLog)
    }
}
