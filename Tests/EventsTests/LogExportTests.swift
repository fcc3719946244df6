import Events
import Testing
import Workload

/// The export file codec (LogExport.swift): the same items whole or a byte at a time, every cut
/// and every changed byte refused, and group members exported as the records JetStream holds.
struct LogExportTests {
    static let logID = UUID128(high: 0x1122_3344_5566_7788, low: 0x99AA_BBCC_DDEE_FF00)

    static func events() -> [EncodedEvent] {
        let user = EventCodec.encode(
            .userCreated(
                UserCreated(userID: 1, name: "ada", role: .member, tokenHash: Array(repeating: 7, count: 32))),
            receivedAtMicros: 1_000)
        let fixes = (0..<5).map { index in
            Fix(
                latitude: 52.5 + Double(index) * 0.001, longitude: 13.4, accuracyMeters: 10,
                batteryPercent: 80,
                source: "significant", recordedAtMicros: 1_700_000_000_000_000 + Int64(index) * 1_000_000)
        }
        let one = EventCodec.encode(
            .fixBatch(FixBatch(deviceID: 3, batchID: UUID128(high: 1, low: 2), fixes: [fixes[0]])),
            receivedAtMicros: 2_000)
        let many = EventCodec.encode(
            .fixBatch(FixBatch(deviceID: 3, batchID: UUID128(high: 1, low: 3), fixes: fixes)),
            receivedAtMicros: 3_000)
        return [user, one, many]
    }

    /// A small export file of `events()` at offsets 0, 2 and 5 (gaps as a compaction leaves them).
    static func file() -> [UInt8] {
        let header = LogExportHeader(logID: logID, firstOffset: 0, endOffset: 7, exportedAtMicros: 42)
        var (writer, bytes) = LogExportWriter.start(header)
        for (offset, event) in zip([UInt64(0), 2, 5], events()) {
            bytes += writer.entry(sourceOffset: offset, event)
        }
        return bytes + writer.trailer()
    }

    /// Every item the decoder gives for `bytes` fed in pieces of `step`, and `finish()`'s verdict.
    static func decode(_ bytes: [UInt8], step: Int) -> (items: [String], damage: LogExportDamage?) {
        var decoder = LogExportDecoder()
        var items: [String] = []
        var index = 0
        func drain() -> LogExportDamage? {
            while true {
                switch decoder.next() {
                case .needMore: return nil
                case .damaged(let why, _): return why
                case .header(let header): items.append("header \(header.logID) \(header.endOffset)")
                case .record(let record):
                    items.append("record \(record.sourceOffset) \(Frame.message(record.encodedEvent))")
                case .trailer(let trailer): items.append("trailer \(trailer.records) \(trailer.fixes)")
                }
            }
        }
        while index < bytes.count {
            decoder.append(bytes[index..<min(bytes.count, index + step)])
            index += step
            if let damage = drain() { return (items, damage) }
        }
        return (items, decoder.finish()?.0)
    }

    @Test func oneByteAtATimeGivesWhatAllAtOnceGives() {
        let bytes = Self.file()
        let whole = Self.decode(bytes, step: bytes.count)
        #expect(whole.damage == nil)
        #expect(whole.items.count == 5)
        #expect(whole.items.first == "header \(Self.logID) 7")
        #expect(whole.items.last == "trailer 3 6")
        let expected = zip([0, 2, 5], Self.events()).map { "record \($0) \(Frame.message($1))" }
        #expect(Array(whole.items[1...3]) == expected)
        for step in [1, 2, 3, 7, 64] {
            let pieces = Self.decode(bytes, step: step)
            #expect(pieces.damage == nil, "step \(step)")
            #expect(pieces.items == whole.items, "step \(step)")
        }
    }

    @Test func aCutAtEveryByteIsRefused() {
        let bytes = Self.file()
        let whole = Self.decode(bytes, step: bytes.count).items
        for length in 0..<bytes.count {
            let cut = Self.decode(Array(bytes.prefix(length)), step: 1)
            #expect(cut.damage == .truncated, "cut at \(length)")
            // What came before the cut is a prefix of the whole file's items, never anything else.
            #expect(Array(whole.prefix(cut.items.count)) == cut.items, "cut at \(length)")
            #expect(!cut.items.contains { $0.hasPrefix("trailer") }, "cut at \(length)")
        }
    }

    @Test func aChangedByteAnywhereIsRefused() {
        let bytes = Self.file()
        for position in 0..<bytes.count {
            for flip: UInt8 in [0x01, 0x80] {
                var changed = bytes
                changed[position] ^= flip
                let result = Self.decode(changed, step: changed.count)
                #expect(result.damage != nil, "byte \(position) ^ \(flip)")
            }
        }
    }

    @Test func bytesAfterTheTrailerAreRefused() {
        let result = Self.decode(Self.file() + [0], step: 1)
        #expect(result.damage == .bytesAfterTrailer)
    }

    @Test func anotherVersionAndAnotherFileAreNamed() {
        var bytes = Self.file()
        #expect(Self.decode(Array("not an export at all".utf8), step: 1).damage == .notAnExport)
        bytes[8] = 2
        #expect(Self.decode(bytes, step: bytes.count).damage == .version(2))
    }

    /// A version-2 log whose group records hold several requests, exported through `LogReader`:
    /// each request is one entry, in the form `EventCodec.encode` gave it (small payloads that the
    /// group stored raw are compressed again), at its own offset.
    @Test func groupMembersBecomeTheRecordsJetStreamHolds() throws {
        let directory = TemporaryDirectory()
        let writer = try GroupRecordTests.groupingWriter(directory.log)
        var events = GroupRecordTests.singleFixReports(40)
        for device in 100..<110 {
            // Multi-fix batches: payloads large enough that the group keeps them compressed.
            var track = TrackGenerator(seed: UInt64(device), startMicros: 1_764_684_000_000_000)
            events.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(device), batchID: UUID128.random(), fixes: Array(track.next(30)))))
        }
        let offsets = try GroupRecordTests.appendAsOneGroup(
            writer, events, receivedAt: GroupRecordTests.receivedAt)
        writer.close()
        let frames = try GroupRecordTests.frames(try segmentFiles(directory.log)[0])
        #expect(frames.contains { ($0.group?.memberCount ?? 0) > 1 }, "the requests share a group record")
        let records = try readAll(directory.log)
        let header = LogExportHeader(
            logID: Self.logID, firstOffset: 0, endOffset: offsets.last! + 1, exportedAtMicros: 0)
        var (exporter, bytes) = LogExportWriter.start(header)
        for record in records { bytes += exporter.entry(record) }
        bytes += exporter.trailer()
        let decoded = Self.decode(bytes, step: 4096)
        #expect(decoded.damage == nil)
        let expected = zip(offsets, events.enumerated()).map { offset, indexed in
            let encoded = EventCodec.encode(
                indexed.element, receivedAtMicros: GroupRecordTests.receivedAt(indexed.offset))
            return "record \(offset) \(Frame.message(encoded))"
        }
        #expect(Array(decoded.items.dropFirst().dropLast()) == expected)
    }
}
