import Events
import Foundation
import Postgres
import Projector
import Testing

/// A large transaction's history split between the projector's connection and a helper one
/// (`ProjectionStore.apply(..., helper:)`): the same rows as one connection writes, in two
/// transactions, and safe when the helper's half committed and the main transaction did not.
@Suite(ProjectorClusterTrait()) struct HelperConnectionTests {
    private func distinctTransactions(_ connection: PostgresConnection) throws -> Int64 {
        try count(connection, "SELECT count(DISTINCT xmin::text) FROM findmy.device_locations")
    }

    @Test func aSplitTransactionWritesWhatOneConnectionWrites() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 6, batches: 120, fixesPerBatch: 10)
        writer.close()
        let whole = try foldedBatch(log.path)
        let store = ProjectionStore()

        let (alone, unused) = try freshProjection()
        defer { alone.close() }
        unused.close()
        try store.apply(whole, nowMicros: wallClockMicros(), alone)

        let (split, helper) = try freshProjection()
        defer {
            split.close()
            helper.close()
        }
        try store.apply(whole, nowMicros: wallClockMicros(), split, helper: helper, splitFixesMin: 1)

        #expect(try projectionTables(split) == projectionTables(alone))
        #expect(try count(split, "SELECT count(*) FROM findmy.device_locations") == 1_200)
        // Two transactions wrote the history (each row's xmin names its inserting transaction):
        // the helper's half and the main one's.
        #expect(try distinctTransactions(alone) == 1)
        #expect(try distinctTransactions(split) == 2)
    }

    /// The helper committed its half, then the projector died before its own commit: the replay of
    /// the same records finds those rows as duplicates, and they are still the batch's own (the
    /// latest position included), as if nothing had happened.
    @Test func aHelperHalfCommittedBeforeACrashIsTheReplaysOwn() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 6, batches: 120, fixesPerBatch: 10)
        writer.close()
        let whole = try foldedBatch(log.path)
        let store = ProjectionStore()

        let (clean, unused) = try freshProjection()
        defer { clean.close() }
        unused.close()
        try store.apply(whole, nowMicros: wallClockMicros(), clean)

        let (crashed, other) = try freshProjection()
        defer { crashed.close() }
        other.close()
        // What a helper leaves when the main transaction never commits: devices 4-6's rows, alone,
        // committed, the checkpoint still at 0.
        let theirs = whole.locations.filter { $0.deviceID >= 4 }
        try store.copyLocations(theirs, nowMicros: wallClockMicros(), crashed)
        #expect(try count(crashed, "SELECT next_offset FROM findmy.projector_checkpoints") == 0)
        try store.apply(whole, nowMicros: wallClockMicros(), crashed)

        #expect(try projectionTables(crashed) == projectionTables(clean))
        #expect(try count(crashed, "SELECT count(*) FROM findmy.device_latest") == 6)
    }

    /// A fix of the helper's half already in history from an earlier transaction (a resend): the
    /// helper's COPY fails on the unique key, and the main transaction writes that half itself,
    /// skipping the duplicate.
    @Test func aDuplicateInTheHelpersHalfIsSkippedByTheMainTransaction() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 6, batches: 60, fixesPerBatch: 10)
        let firstEnd = writer.durableEnd
        // New fixes of devices 1-5, then device 6's first batch again under another batch id: in
        // index order device 6 comes last, in the helper's half.
        let earlier = try foldedBatch(log.path)
        for device in UInt64(1)...5 {
            let later = earlier.locations.filter { $0.deviceID == device }.prefix(10).map { row in
                var fix = row.fix
                fix.recordedAtMicros += 3_600_000_001
                return fix
            }
            try writer.append(.fixBatch(FixBatch(deviceID: device, batchID: .random(), fixes: later)))
        }
        let resent = earlier.locations.filter { $0.deviceID == 6 }.prefix(10).map(\.fix)
        try writer.append(.fixBatch(FixBatch(deviceID: 6, batchID: .random(), fixes: Array(resent))))
        writer.close()
        let second = try foldedBatch(log.path, from: firstEnd)
        #expect(second.locations.count == 60)
        let store = ProjectionStore()

        let (alone, unused) = try freshProjection()
        defer { alone.close() }
        unused.close()
        try store.apply(earlier, nowMicros: wallClockMicros(), alone)
        try store.apply(second, nowMicros: wallClockMicros(), alone)

        let (split, helper) = try freshProjection()
        defer {
            split.close()
            helper.close()
        }
        try store.apply(earlier, nowMicros: wallClockMicros(), split)
        try store.apply(second, nowMicros: wallClockMicros(), split, helper: helper, splitFixesMin: 1)

        #expect(try projectionTables(split) == projectionTables(alone))
        #expect(try count(split, "SELECT count(*) FROM findmy.device_locations") == 650)
    }
}
