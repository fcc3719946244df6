import Crypto
import Events
import Import
import Testing

@Suite struct ImportChunkerTests {
    /// A CSV of `rows` fixes a minute apart from 2019-05-01, with `bad` rows made unreadable.
    static func csv(rows: Int, badRow: Int? = nil, startMicros: Int64 = 1_556_668_800_000_000) -> [UInt8] {
        var text = "time,lat,lon,activity\n"
        for row in 0..<rows {
            let seconds = (startMicros / 1_000_000) + Int64(row) * 60
            let latitude = row == badRow ? "north" : "52.\(row)"
            text += "\(seconds),\(latitude),13.4,\n"
        }
        return Array(text.utf8)
    }

    static func chunks(
        _ bytes: [UInt8], format: ImportFormat = .csv, chunkFixesMax: Int = 1000
    ) throws(ImportError) -> [ImportChunk] {
        var chunker = ImportChunker(
            reader: CSVReader(MemoryByteSource(bytes)), fileSHA256: SHA256.hash(bytes), format: format,
            chunkFixesMax: chunkFixesMax)
        var chunks: [ImportChunk] = []
        while let chunk = try chunker.next() { chunks.append(chunk) }
        return chunks
    }

    @Test func chunksHoldAtMostTheirMaximumInTheFilesOrderNumberedFromZero() throws {
        let bytes = Self.csv(rows: 2500)
        let chunks = try Self.chunks(bytes)
        #expect(chunks.map(\.fixes.count) == [1000, 1000, 500])
        #expect(chunks.map(\.index) == [0, 1, 2])
        let all = chunks.flatMap(\.fixes)
        #expect(all == fixes(try readAll(CSVReader(MemoryByteSource(bytes)))))
        #expect(Set(chunks.map(\.batchID)).count == 3)
    }

    @Test func theSameFileReadTwiceGivesTheSameBatchIdsAndAnotherFileOrFormatOthers() throws {
        let bytes = Self.csv(rows: 2500)
        let first = try Self.chunks(bytes).map(\.batchID)
        #expect(try Self.chunks(bytes).map(\.batchID) == first)
        var changed = bytes
        changed[20] = UInt8(ascii: "x")  // "activitx": a column not read, so the same fixes, other bytes
        #expect(try Self.chunks(changed).flatMap(\.fixes) == Self.chunks(bytes).flatMap(\.fixes))
        let other = try Self.chunks(changed).map(\.batchID)
        #expect(Set(other).isDisjoint(with: first))
        #expect(Set(try Self.chunks(bytes, format: .googleRecords).map(\.batchID)).isDisjoint(with: first))
    }

    @Test func theBatchIdIsTheDocumentedDerivationAsAVersion8UUID() {
        let digest = SHA256.hash(Array("findmy".utf8))
        let id = ImportChunker<CSVReader<MemoryByteSource>>.batchID(
            fileSHA256: digest, format: .gpx, chunkIndex: 3)
        var input = digest + Array("gpx".utf8)
        input += [0, 0, 0, 0, 0, 0, 0, 3]
        var expected = Array(SHA256.hash(input).prefix(16))
        expected[6] = expected[6] & 0x0F | 0x80
        expected[8] = expected[8] & 0x3F | 0x80
        #expect(id == UUID128(bytes: expected))
        // Pinned, so that a change to the derivation (which would make every re-import store its
        // file again) cannot pass unnoticed.
        #expect(id.description == "24f56a8b-3825-8712-a33b-49acc64125e9")
    }

    @Test func aFileWithNoFixesHasNoChunkAndItsOtherItemsAreCounted() throws {
        let bytes = Array("time,lat,lon\n,52.5,13.4\n1556668800,,13.4\n".utf8)
        var chunker = ImportChunker(
            reader: CSVReader(MemoryByteSource(bytes)), fileSHA256: SHA256.hash(bytes), format: .csv)
        #expect(try chunker.next() == nil)
        #expect(try chunker.next() == nil)
        #expect(chunker.summary.fixes == 0)
        #expect(chunker.summary.notAFixByKind == ["incomplete_row": 2])
    }

    @Test func aDamagedFileEndsTheImportWithoutHandingOutTheChunkItCouldNotReadWhole() throws {
        let bytes = Self.csv(rows: 2500, badRow: 1500)
        var chunker = ImportChunker(
            reader: CSVReader(MemoryByteSource(bytes)), fileSHA256: SHA256.hash(bytes), format: .csv)
        #expect(try chunker.next()?.fixes.count == 1000)
        let error = #expect(throws: ImportError.self) { try chunker.next() }
        #expect(error?.line == 1502, "\(String(describing: error))")
    }

    @Test func theSummaryCountsFixesTheirRangeTheBytesReadAndWhatRetentionWouldExpire() throws {
        let day: Int64 = 86_400_000_000
        let now: Int64 = 1_700_000_000_000_000
        // 100 fixes a minute apart, 31 days ago: all older than a 30-day window, none than 32 days.
        let start = now - 31 * day
        let bytes = Self.csv(rows: 100, startMicros: start) + Array(",1,2,\n".utf8)
        var policy = RetentionPolicy(settings: RetentionSettings(retentionDays: 30))
        let counter = ByteCounter()
        var chunker = ImportChunker(
            reader: CSVReader(CountingByteSource(MemoryByteSource(bytes), counter: counter)),
            fileSHA256: SHA256.hash(bytes), format: .csv,
            summary: ImportSummary(retention: .init(policy: policy, deviceID: 7, nowMicros: now)),
            bytesCounter: counter, chunkFixesMax: 30)
        while try chunker.next() != nil {}
        let summary = chunker.summary
        #expect(summary.fixes == 100)
        #expect(summary.notAFixByKind == ["incomplete_row": 1])
        #expect(summary.earliestRecordedAtMicros == start)
        #expect(summary.latestRecordedAtMicros == start + 99 * 60_000_000)
        #expect(summary.bytesRead == Int64(bytes.count))
        #expect(summary.outsideRetention == 100)
        // The device's own window (RetentionPolicy's rule, not a copy of it) decides.
        policy.apply(.retentionChanged(RetentionChanged(scope: .device(7), days: 32)), offset: 1)
        var widened = ImportSummary(retention: .init(policy: policy, deviceID: 7, nowMicros: now))
        for item in try readAll(CSVReader(MemoryByteSource(bytes))) { widened.add(item) }
        #expect(widened.outsideRetention == 0)
    }

    @Test func theFilesDigestIsReadABufferAtATime() throws {
        let bytes = Self.csv(rows: 20_000)
        #expect(bytes.count > ImportFileDigest.bufferBytes)
        let (digest, count) = try ImportFileDigest.sha256(PieceByteSource(bytes: bytes, piece: 1000))
        #expect(digest == SHA256.hash(bytes))
        #expect(count == Int64(bytes.count))
    }
}
