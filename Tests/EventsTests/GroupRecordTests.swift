import Events
import Foundation
import Synchronization
import Testing
import Workload

/// Format version 2: the requests of one group commit are one record (docs/log-format.md, "Group
/// record"), and every reader still sees each request as a record with its own offset.
@Suite struct GroupRecordTests {
    /// A writer whose committer waits long enough for a test to queue a whole group behind it.
    static func groupingWriter(_ directory: String) throws -> LogWriter {
        var options = quietOptions()
        options.groupCommitDelayMicros = 1_000_000
        return try LogWriter(directory: directory, options: options)
    }

    /// Queues `events` without blocking, so that the committer (waiting out its delay) writes them
    /// as one group; returns their offsets once every one is durable.
    static func appendAsOneGroup(_ writer: LogWriter, _ events: [Event], receivedAt: (Int) -> Int64)
        throws -> [UInt64]
    {
        let done = DispatchSemaphore(value: 0)
        let results = Mutex<[Int: Result<UInt64, LogError>]>([:])
        for (index, event) in events.enumerated() {
            writer.append(EventCodec.encode(event, receivedAtMicros: receivedAt(index))) { result in
                results.withLock { $0[index] = result }
                done.signal()
            }
        }
        for _ in events { #expect(done.wait(timeout: .now() + 120) == .success) }
        return try results.withLock { all in try (0..<events.count).map { try all[$0]!.get() } }
    }

    /// Single-fix reports of `count` devices, the way phones send them.
    static func singleFixReports(_ count: Int, round: Int = 0) -> [Event] {
        (0..<count).map { index in
            var track = TrackGenerator(seed: UInt64(index), startMicros: 1_764_684_000_000_000)
            return .fixBatch(
                FixBatch(
                    deviceID: UInt64(index + 1), batchID: UUID128.random(),
                    fixes: track.next(1 + round).suffix(1).map { $0 },
                    clientProtocol: ClientProtocol(rawValue: UInt8(index % 5))!))
        }
    }

    static func receivedAt(_ index: Int) -> Int64 { 1_764_684_400_000_000 + Int64(index) * 1_731 }

    /// The frames of a segment file, as a scanner sees them.
    static func frames(_ path: String) throws -> [DecodedFrame] {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        var decoder = FrameDecoder(startPosition: 64)
        decoder.append(bytes.dropFirst(64))
        var frames: [DecodedFrame] = []
        while case .frame(let frame) = decoder.next() { frames.append(frame) }
        return frames
    }

    static func fileBytes(_ path: String) throws -> Int {
        try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
    }

    @Test func theRequestsOfOneGroupCommitAreOneRecord() throws {
        let directory = TemporaryDirectory()
        let writer = try Self.groupingWriter(directory.log)
        let events = Self.singleFixReports(64)
        let offsets = try Self.appendAsOneGroup(writer, events, receivedAt: Self.receivedAt)
        writer.close()
        #expect(offsets == Array(0..<64))
        let segment = (try segmentFiles(directory.log))[0]
        let frames = try Self.frames(segment)
        #expect(frames.count == 1 && frames[0].group?.memberCount == 64 && frames[0].header.fixCount == 64)
        // Every reader sees each request as a record of its own: offset, event, received_at, batch
        // id, device and client protocol.
        let records = try readAll(directory.log)
        #expect(records.map(\.offset) == Array(0..<64))
        #expect(try records.map { try $0.event() } == events)
        #expect(records.map(\.header.receivedAtMicros) == (0..<64).map(Self.receivedAt))
        for (record, event) in zip(records, events) {
            guard case .fixBatch(let batch) = event else { continue }
            #expect(
                record.header.idempotencyKey == batch.batchID && record.header.deviceKey == batch.deviceID)
            #expect(record.header.clientProtocol == batch.clientProtocol && record.header.fixCount == 1)
            #expect(record.header.recordedMinMicros == batch.fixes[0].recordedAtMicros)
        }
        // The point of it: a single-fix report costs at most 64 bytes on disk (168 as one record each).
        let bytesPerFix = Double(try Self.fileBytes(segment) - 64) / 64
        #expect(bytesPerFix <= 64, "\(bytesPerFix) bytes per fix")
        let report = try LogInspector(directory: directory.log).verify()
        #expect(report.ok && report.records == 64 && report.fixes == 64, "\(report.problems)")
    }

    @Test func aReaderResumesInsideAndAfterAGroup() throws {
        let directory = TemporaryDirectory()
        let writer = try Self.groupingWriter(directory.log)
        _ = try Self.appendAsOneGroup(writer, Self.singleFixReports(10), receivedAt: Self.receivedAt)
        _ = try Self.appendAsOneGroup(
            writer, Self.singleFixReports(10, round: 1), receivedAt: Self.receivedAt)
        writer.close()
        #expect(try readAll(directory.log, from: 7).map(\.offset) == Array(7..<20))
        #expect(try readAll(directory.log, from: 10).map(\.offset) == Array(10..<20))
        // One reader, stopped inside a group (as a projector's transaction may end), goes on from there.
        let reader = LogReader(directory: directory.log)
        var seen: [UInt64] = []
        var next: UInt64 = 0
        while next < 20 {
            var taken = 0
            next = try reader.read(from: next) { record in
                seen.append(record.offset)
                taken += 1
                return taken < 3
            }
        }
        #expect(seen == Array(0..<20))
        var upTo: [UInt64] = []
        try reader.read(from: 4, upTo: 13) { record in
            upTo.append(record.offset)
            return true
        }
        #expect(upTo == Array(4..<13))
    }

    @Test func aTornGroupRecordIsDroppedWhole() throws {
        let source = TemporaryDirectory()
        let writer = try Self.groupingWriter(source.log)
        _ = try Self.appendAsOneGroup(writer, Self.singleFixReports(8), receivedAt: Self.receivedAt)
        let segment = (try segmentFiles(source.log))[0]
        let firstEnd = try Self.fileBytes(segment)
        let watermarkAfterFirst = try Data(contentsOf: URL(fileURLWithPath: source.log + "/durable"))
        _ = try Self.appendAsOneGroup(writer, Self.singleFixReports(8, round: 1), receivedAt: Self.receivedAt)
        writer.close()
        let original = try Data(contentsOf: URL(fileURLWithPath: segment))
        #expect(try Self.frames(segment).count == 2)
        // A crash during the second group's write: its fdatasync never returned, so none of its
        // requests was acknowledged and the watermark says 8. Every cut inside it loses all of it.
        for cut in firstEnd..<original.count {
            let directory = TemporaryDirectory()
            try FileManager.default.createDirectory(atPath: directory.log, withIntermediateDirectories: true)
            try original.prefix(cut).write(
                to: URL(fileURLWithPath: directory.log + "/" + (segment as NSString).lastPathComponent))
            try watermarkAfterFirst.write(to: URL(fileURLWithPath: directory.log + "/durable"))
            let reopened = try LogWriter(directory: directory.log, options: quietOptions())
            #expect(reopened.durableEnd == 8, "cut at \(cut)")
            #expect(reopened.recovery.tornBytesTruncated == cut - firstEnd, "cut at \(cut)")
            #expect(
                try reopened.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true))) == 8)
            reopened.close()
            #expect(try readAll(directory.log).map(\.offset) == Array(0...8), "cut at \(cut)")
        }
    }

    @Test func aVersion1LogGoesOnInVersion2Segments() throws {
        let directory = TemporaryDirectory()
        try FileManager.default.removeItem(atPath: directory.path)
        try FileManager.default.copyItem(atPath: GoldenTests.fixture, toPath: directory.path)
        let writer = try Self.groupingWriter(directory.path)
        let events = Self.singleFixReports(5)
        let offsets = try Self.appendAsOneGroup(writer, events, receivedAt: Self.receivedAt)
        writer.close()
        let old = GoldenTests.events.count
        #expect(offsets == Array(UInt64(old)..<UInt64(old + 5)))
        let files = try segmentFiles(directory.path)
        let versions = try files.map { name in
            try Data(contentsOf: URL(fileURLWithPath: name))[8]
        }
        #expect(versions == [1, 1, 2], "\(files)")
        let records = try readAll(directory.path)
        #expect(try records.map { try $0.event() } == GoldenTests.events + events)
        let report = try LogInspector(directory: directory.path).verify()
        #expect(report.ok && report.records == old + 5, "\(report.problems)")
    }

    @Test func aRewriteKeepsTheSurvivorsOfAGroupInOneGroup() throws {
        let directory = TemporaryDirectory()
        let writer = try Self.groupingWriter(directory.log)
        let events = Self.singleFixReports(10)
        _ = try Self.appendAsOneGroup(writer, events, receivedAt: Self.receivedAt)
        try writer.roll()
        try writer.append(.reportingChanged(ReportingChanged(deviceID: 1, paused: true)))
        guard case .fixBatch(var shortened) = events[3] else { return }
        shortened.fixes = []
        let report = try writer.rewriteSegment(base: 0) { record in
            if record.offset == 3 {
                return .replace(EventCodec.encode(.fixBatch(shortened), receivedAtMicros: 0))
            }
            return record.offset % 2 == 0 || record.offset == 9 ? .drop : .keep
        }
        #expect(report.recordsDropped == 6 && report.recordsKept == 3 && report.recordsReplaced == 1)
        writer.close()
        let frames = try Self.frames((try segmentFiles(directory.log))[0])
        #expect(frames.count == 2 && frames[0].group?.memberCount == 4 && frames[0].group?.offsetSpan == 7)
        let records = try readAll(directory.log)
        #expect(records.map(\.offset) == [1, 3, 5, 7, 10])
        #expect(try records[1].event() == .fixBatch(shortened))
        #expect(records[1].header.receivedAtMicros == Self.receivedAt(3))
        #expect(
            try [records[0], records[2], records[3]].map { try $0.event() } == [
                events[1], events[5], events[7],
            ])
        let verify = try LogInspector(directory: directory.log).verify()
        #expect(verify.ok && verify.records == 5, "\(verify.problems)")
    }

    @Test func aGroupWhoseBodyDisagreesWithItsHeaderIsDamage() throws {
        var members = (0..<3).map { index in
            var member = GroupRecord.member(
                EventCodec.encode(Self.singleFixReports(3)[index], receivedAtMicros: Self.receivedAt(index)))
            member.header.offset = UInt64(index)
            return member
        }
        var stream: [UInt8] = []
        let (header, extent) = GroupRecord.append(members: members, salt: 7, to: &stream)
        var decoder = FrameDecoder()
        decoder.append(stream)
        guard case .frame(let frame) = decoder.next() else {
            Issue.record("no frame")
            return
        }
        #expect(frame.group == extent && frame.endOffset == 3)
        #expect(try GroupRecord.members(header: header, extent: extent, stored: frame.payload).count == 3)
        var lying = extent
        lying.memberCount = 2
        #expect(throws: DecodeError.self) {
            try GroupRecord.members(header: header, extent: lying, stored: frame.payload)
        }
        lying = extent
        lying.offsetSpan = 4
        #expect(throws: DecodeError.self) {
            try GroupRecord.members(header: header, extent: lying, stored: frame.payload)
        }
        members[2].header.offset = 1
        var unordered: [UInt8] = []
        let second = GroupRecord.append(members: members, salt: 7, to: &unordered)
        var secondDecoder = FrameDecoder()
        secondDecoder.append(unordered)
        guard case .frame(let bad) = secondDecoder.next() else { return }
        #expect(throws: DecodeError.self) {
            try GroupRecord.members(header: second.header, extent: second.extent, stored: bad.payload)
        }
    }
}
