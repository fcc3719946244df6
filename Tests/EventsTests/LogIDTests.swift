import Events
import Foundation
import Testing
import Workload

/// The log's identity as it lies on disk: bytes 44..<60 of every segment header
/// (docs/log-format.md, "Log identity"). These tests read and patch the bytes themselves.
@Suite struct LogIDTests {
    static let idRange = 44..<60

    func idOnDisk(_ path: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path))[Self.idRange])
    }

    func idsOnDisk(_ directory: String) throws -> [[UInt8]] {
        try segmentFiles(directory).map(idOnDisk)
    }

    /// Writes `id` into a segment's header and fixes its CRC, as a writer of that id would have.
    func setIDOnDisk(_ path: String, _ id: [UInt8]) throws {
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes.replaceSubrange(Self.idRange, with: id)
        var crc = CRC32C.checksum(Array(bytes[0..<60])).littleEndian
        bytes.replaceSubrange(60..<64, with: withUnsafeBytes(of: &crc) { Array($0) })
        try bytes.write(to: URL(fileURLWithPath: path))
    }

    /// Makes every segment of the log look written before log ids (id zero), as findmy wrote them.
    func makeOld(_ directory: String) throws {
        for path in try segmentFiles(directory) { try setIDOnDisk(path, Array(repeating: 0, count: 16)) }
    }

    func batch(_ device: UInt64, _ fixes: [Fix]) -> Event {
        .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes))
    }

    /// A log of `batches` records in several segments, closed.
    func writeLog(_ directory: String, batches: Int, rollAtEnd: Bool = false) throws {
        var options = quietOptions()
        options.segmentBytesMax = 4_096
        let writer = try LogWriter(directory: directory, options: options)
        var track = TrackGenerator(seed: 3, startMicros: 1_700_000_000_000_000)
        for _ in 0..<batches { try writer.append(batch(1, track.next(10))) }
        if rollAtEnd { try writer.roll() }
        writer.close()
    }

    let zero = [UInt8](repeating: 0, count: 16)

    @Test func aNewLogCarriesOneNonZeroIDInEverySegmentThroughRollsAndReopens() throws {
        let directory = TemporaryDirectory()
        try writeLog(directory.log, batches: 40)
        let first = try idsOnDisk(directory.log)
        #expect(first.count > 3)
        #expect(first[0] != zero)
        #expect(Set(first).count == 1, "every segment carries the log's id")
        // Reopened: later segments copy the id from the log.
        var options = quietOptions()
        options.segmentBytesMax = 4_096
        let writer = try LogWriter(directory: directory.log, options: options)
        var track = TrackGenerator(seed: 4, startMicros: 1_700_000_000_000_000)
        // 40 batches: enough for at least 3 more 4 KiB segments with fix batch payload version 2.
        for _ in 0..<40 { try writer.append(batch(2, track.next(10))) }
        try writer.roll()
        try writer.append(batch(2, track.next(1)))
        writer.close()
        let after = try idsOnDisk(directory.log)
        #expect(after.count > first.count + 2)
        #expect(Set(after) == [first[0]])
        // Another log gets another id.
        let other = TemporaryDirectory()
        try writeLog(other.log, batches: 1)
        #expect(try idsOnDisk(other.log) != [first[0]] && idsOnDisk(other.log)[0] != zero)
    }

    @Test func aRewriteKeepsTheID() throws {
        let directory = TemporaryDirectory()
        try writeLog(directory.log, batches: 30)
        let id = try idsOnDisk(directory.log)[0]
        #expect(id != zero)
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        let first = try segmentFiles(directory.log)[0]
        let base = LogFormat.baseOffset(fileName: (first as NSString).lastPathComponent)!
        let report = try writer.rewriteSegment(base: base) { _ in .drop }
        #expect(report.recordsDropped > 0)
        writer.close()
        let header = try Data(contentsOf: URL(fileURLWithPath: first))
        #expect(header[40] == 1, "generation 1: the segment was rewritten")
        #expect(try idOnDisk(first) == id)
        #expect(try LogInspector(directory: directory.log).verify().ok)
    }

    @Test func anOldLogWithRecordsInItsActiveSegmentIsGivenAnIDAndKeepsReading() throws {
        let directory = TemporaryDirectory()
        try writeLog(directory.log, batches: 30)
        try makeOld(directory.log)
        let before = try readAll(directory.log)
        let files = try segmentFiles(directory.log)
        #expect(try idsOnDisk(directory.log).allSatisfy { $0 == zero })

        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        try writer.append(
            batch(
                3, [Fix(latitude: 1, longitude: 2, accuracyMeters: 3, source: "manual", recordedAtMicros: 4)])
        )
        writer.close()
        // The active segment was sealed and a new one, carrying the id, started after it.
        let after = try segmentFiles(directory.log)
        #expect(after.count == files.count + 1)
        let newest = try idOnDisk(after.last!)
        #expect(newest != zero)
        #expect(
            try after.dropLast().allSatisfy { try idOnDisk($0) == zero }, "old segments are not rewritten")
        let records = try readAll(directory.log)
        #expect(records.count == before.count + 1)
        #expect(try records.prefix(before.count).map { try $0.event() } == before.map { try $0.event() })
        let report = try LogInspector(directory: directory.log).verify()
        #expect(report.ok, "\(report.problems)")

        // Opening again changes nothing: the log has its id.
        try LogWriter(directory: directory.log, options: quietOptions()).close()
        #expect(try segmentFiles(directory.log) == after)
        #expect(try idOnDisk(after.last!) == newest)
    }

    @Test func anOldLogEndingInASealedOrEmptySegmentIsGivenAnID() throws {
        // Sealed last segment (a roll, then a stop).
        let sealed = TemporaryDirectory()
        try writeLog(sealed.log, batches: 12, rollAtEnd: true)
        try makeOld(sealed.log)
        let count = try readAll(sealed.log).count
        let files = try segmentFiles(sealed.log)
        try LogWriter(directory: sealed.log, options: quietOptions()).close()
        let after = try segmentFiles(sealed.log)
        #expect(after.count == files.count + 1)
        #expect(try idOnDisk(after.last!) != zero)
        #expect(try readAll(sealed.log).count == count)

        // An empty active segment (a log that never got a record) is made again at the same base.
        let empty = TemporaryDirectory()
        try LogWriter(directory: empty.log, options: quietOptions()).close()
        try makeOld(empty.log)
        let writer = try LogWriter(directory: empty.log, options: quietOptions())
        #expect(try writer.append(batch(1, [])) == 0)
        writer.close()
        let emptyFiles = try segmentFiles(empty.log)
        #expect(emptyFiles.map { ($0 as NSString).lastPathComponent } == ["00000000000000000000.seg"])
        #expect(try idOnDisk(emptyFiles[0]) != zero)
        #expect(try readAll(empty.log).map(\.offset) == [0])
    }

    @Test func aCrashWhileGivingTheIDLeavesALogThatOpens() throws {
        // The state a crash leaves between sealing the old active segment and writing the new
        // segment's header: a sealed last segment with id zero, and a new file of a few bytes.
        let directory = TemporaryDirectory()
        try writeLog(directory.log, batches: 12, rollAtEnd: true)
        try makeOld(directory.log)
        let count = try readAll(directory.log).count
        let files = try segmentFiles(directory.log)
        let next = directory.log + "/" + LogFormat.segmentFileName(baseOffset: UInt64(count))
        try Data([0x46, 0x49, 0x4e]).write(to: URL(fileURLWithPath: next))
        try LogWriter(directory: directory.log, options: quietOptions()).close()
        let after = try segmentFiles(directory.log)
        #expect(after.count == files.count + 1 && after.last == next)
        #expect(try idOnDisk(next) != zero)
        #expect(try readAll(directory.log).count == count)
    }

    @Test func anOlderWriterAfterANewerOneKeepsTheLogsID() throws {
        // Segments with an id, then segments an older findmy wrote (zero): the id is adopted, never
        // replaced by a fresh one (which would mix two ids in one log).
        let directory = TemporaryDirectory()
        try writeLog(directory.log, batches: 30)
        let files = try segmentFiles(directory.log)
        let id = try idOnDisk(files[0])
        #expect(id != zero)
        for path in files.suffix(2) { try setIDOnDisk(path, zero) }
        try LogWriter(directory: directory.log, options: quietOptions()).close()
        #expect(try idOnDisk(try segmentFiles(directory.log).last!) == id)
    }

    @Test func segmentsOfTwoLogsInOneDirectoryRefuseToOpen() throws {
        let directory = TemporaryDirectory()
        try writeLog(directory.log, batches: 30)
        let files = try segmentFiles(directory.log)
        let foreign = files[1]
        try setIDOnDisk(foreign, Array(repeating: 0xAB, count: 16))
        let name = (foreign as NSString).lastPathComponent
        #expect {
            try LogWriter(directory: directory.log, options: quietOptions()).close()
        } throws: { error in
            "\(error)".contains(name) && "\(error)".contains("abababab-abab-abab-abab-abababababab")
        }
        let report = try LogInspector(directory: directory.log).verify()
        #expect(!report.ok)
        #expect(report.problems.contains { $0.file == foreign })
        #expect(try idOnDisk(foreign) == Array(repeating: 0xAB, count: 16), "nothing was changed")
    }

    @Test func theGoldenSegmentsHaveIDZeroAndStillRead() throws {
        #expect(try idsOnDisk(GoldenTests.fixture).allSatisfy { $0 == zero })
        let copy = TemporaryDirectory()
        try FileManager.default.removeItem(atPath: copy.path)
        try FileManager.default.copyItem(atPath: GoldenTests.fixture, toPath: copy.path)
        try LogWriter(directory: copy.path, options: quietOptions()).close()
        #expect(try idOnDisk(try segmentFiles(copy.path).last!) != zero)
        #expect(try readAll(copy.path).map { try $0.event() } == GoldenTests.events)
    }
}
