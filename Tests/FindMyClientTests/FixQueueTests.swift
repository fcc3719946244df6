import FindMyClient
import Foundation
import Testing

/// The queue's promises, checked by reopening its directory at each point a crash can hit.
@Suite struct FixQueueTests {
    let directory: String

    init() throws {
        directory = FileManager.default.temporaryDirectory.path + "/fixqueue-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    func fix(_ index: Int) -> ClientFix {
        ClientFix(
            latitude: 52 + Double(index) / 10_000, longitude: 13.4, accuracyMeters: 10, source: "gps",
            recordedAtMicros: (1_800_000_000 + Int64(index)) * 1_000_000)
    }

    func files() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
    }

    @Test func aFixAppendedIsThereAfterAReopenWithoutAClose() throws {
        do {
            let queue = try FixQueue(directory: directory, batchFixesMax: 10)
            try queue.append([fix(1), fix(2)])
        }
        let reopened = try FixQueue(directory: directory, batchFixesMax: 10)
        #expect(reopened.counts.openFixes == 2)
        try reopened.sealNow()
        let batch = try #require(try reopened.nextBatch())
        #expect(batch.fixLines.count == 2)
        #expect(batch.fixLines[0].contains("\"latitude\":52.0001"))
        #expect(batch.fixLines[0].contains("\"recorded_at\":\"2027-01-15T08:00:01.000000Z\""))
    }

    @Test func batchesAreCutByCountAndKeepTheirIdAcrossAReopen() throws {
        let firstID: String
        do {
            let queue = try FixQueue(directory: directory, batchFixesMax: 3)
            try queue.append((0..<7).map(fix))
            #expect(queue.counts.sealedBatches == 2)
            #expect(queue.counts.openFixes == 1)
            firstID = try #require(try queue.nextBatch()).batchID
        }
        // A batch file written, not sent (or sent with no answer): the same batch, the same id.
        let reopened = try FixQueue(directory: directory, batchFixesMax: 3)
        let again = try #require(try reopened.nextBatch())
        #expect(again.batchID == firstID)
        #expect(again.fixLines.count == 3)
        #expect(reopened.counts.sealedBatches == 2)
    }

    @Test func aRemovedBatchIsGoneAndTheNextComesInOrder() throws {
        let queue = try FixQueue(directory: directory, batchFixesMax: 2)
        try queue.append((0..<4).map(fix))
        let first = try #require(try queue.nextBatch())
        try queue.remove(first)
        let second = try #require(try queue.nextBatch())
        #expect(second.batchID != first.batchID)
        #expect(second.fixLines[0].contains("52.0002"))
        let reopened = try FixQueue(directory: directory, batchFixesMax: 2)
        #expect(try reopened.nextBatch()?.batchID == second.batchID)
    }

    @Test func aTornLastLineIsCutOffAndTheQueueGoesOn() throws {
        do {
            let queue = try FixQueue(directory: directory, batchFixesMax: 10)
            try queue.append([fix(1)])
        }
        let open = try #require(try files().first { $0.hasSuffix(".open") })
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/" + open))
        handle.seekToEndOfFile()
        handle.write(Data("{\"latitude\":52.5,\"longi".utf8))
        try handle.close()
        let reopened = try FixQueue(directory: directory, batchFixesMax: 10)
        #expect(reopened.counts.openFixes == 1)
        try reopened.append([fix(2)])
        try reopened.sealNow()
        let batch = try #require(try reopened.nextBatch())
        #expect(batch.fixLines.count == 2)
        let body = try JSONSerialization.jsonObject(with: Data(batch.reportBody)) as? [String: Any]
        #expect((body?["fixes"] as? [Any])?.count == 2)
    }

    @Test func anOpenFileWithATornHeaderHeldNothingAndIsRemoved() throws {
        try Data("{\"batch_id\":\"0b7f".utf8).write(
            to: URL(fileURLWithPath: directory + "/0000000000000004.open"))
        try Data("half".utf8).write(to: URL(fileURLWithPath: directory + "/0000000000000005.tmp"))
        let queue = try FixQueue(directory: directory)
        #expect(queue.counts.openFixes == 0)
        #expect(try files().isEmpty)
        try queue.append([fix(1)])
        // Sequence numbers go on past what was found.
        #expect(try files() == ["0000000000000006.open"])
    }

    @Test func theAgeRuleSealsOnlyWhenNoOtherBatchWaits() throws {
        let start: Int64 = 1_800_000_000 * 1_000_000
        let queue = try FixQueue(directory: directory, batchFixesMax: 2, batchAgeSeconds: 60)
        try queue.append([fix(1), fix(2)], nowMicros: start)  // sealed by count
        try queue.append([fix(3)], nowMicros: start)
        #expect(try queue.sealIfDue(nowMicros: start + 61_000_000) == start + 60_000_000)
        #expect(queue.counts == (1, 1))
        try queue.remove(try #require(try queue.nextBatch()))
        #expect(try queue.sealIfDue(nowMicros: start + 30_000_000) == start + 60_000_000)
        #expect(try queue.sealIfDue(nowMicros: start + 61_000_000) == nil)
        #expect(queue.counts == (0, 1))
    }

    @Test func aReplyGoesFirstAndSaysWhatItAnswers() throws {
        let queue = try FixQueue(directory: directory, batchFixesMax: 2)
        try queue.append([fix(1), fix(2)])
        let line = try #require(queue.newestFixLine)
        try queue.appendReply(fixLine: line, inReplyTo: "3d1e6c1a-8f0b-4d5e-9a7c-2b4f6e8d0a1c")
        let reopened = try FixQueue(directory: directory, batchFixesMax: 2)
        let reply = try #require(try reopened.nextBatch())
        #expect(reply.inReplyTo == "3d1e6c1a-8f0b-4d5e-9a7c-2b4f6e8d0a1c")
        #expect(reply.fixLines == [line])
        let body = String(decoding: reply.reportBody, as: UTF8.self)
        #expect(body.contains("\"in_reply_to\":\"3d1e6c1a-8f0b-4d5e-9a7c-2b4f6e8d0a1c\""))
        try reopened.remove(reply)
        #expect(try reopened.nextBatch()?.inReplyTo == nil)
    }

    @Test func aRefusedBatchIsSetAsideNeverToBeSentAgain() throws {
        let queue = try FixQueue(directory: directory, batchFixesMax: 1)
        try queue.append([fix(1), fix(2)])
        let first = try #require(try queue.nextBatch())
        try queue.setAside(first)
        let reopened = try FixQueue(directory: directory, batchFixesMax: 1)
        #expect(try reopened.nextBatch()?.fixLines.first?.contains("52.0002") == true)
        #expect(try files().contains(first.fileName.replacingOccurrences(of: ".batch", with: ".refused")))
    }

    @Test func aPositionThatIsNotANumberIsNotTaken() throws {
        let queue = try FixQueue(directory: directory)
        var bad = fix(1)
        bad.latitude = .nan
        #expect(try queue.append([bad, fix(2)]) == 1)
        #expect(queue.counts.openFixes == 1)
    }
}
