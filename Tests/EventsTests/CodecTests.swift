import Events
import Testing
import Workload

@Suite struct CodecTests {
    static let seed = UInt64.random(in: 0...UInt64.max)

    @Test func everyEventTypeRoundTrips() throws {
        print("CodecTests seed: \(Self.seed)")
        var fuzzer = EventFuzzer(seed: Self.seed)
        var seenTypes = Set<UInt8>()
        for _ in 0..<2_000 {
            let event = fuzzer.event()
            let encoded = EventCodec.encode(event, receivedAtMicros: fuzzer.time())
            seenTypes.insert(encoded.header.type)
            let decoded = try EventCodec.decode(header: encoded.header, stored: encoded.payload)
            #expect(decoded == event, "seed \(Self.seed)")
        }
        #expect(seenTypes == Set(EventType.allCases.map(\.rawValue)))
    }

    @Test func headerSummarisesTheBatch() {
        var track = TrackGenerator(seed: 7, startMicros: 1_700_000_000_000_000)
        let fixes = track.next(50)
        let batch = FixBatch(deviceID: 42, batchID: UUID128.random(), fixes: fixes.shuffled())
        let encoded = EventCodec.encode(.fixBatch(batch), receivedAtMicros: 5)
        #expect(encoded.header.fixCount == 50)
        #expect(encoded.header.recordedMinMicros == fixes.map(\.recordedAtMicros).min())
        #expect(encoded.header.recordedMaxMicros == fixes.map(\.recordedAtMicros).max())
        #expect(encoded.header.deviceKey == 42)
        #expect(encoded.header.idempotencyKey == batch.batchID)
        #expect(encoded.header.codec == Codec.lz4.rawValue)
    }

    @Test func manyDistinctSourcesWidenTheIndex() throws {
        let fixes = (0..<600).map { index in
            Fix(
                latitude: 1, longitude: 2, accuracyMeters: 3, source: "source-\(index % 300)",
                recordedAtMicros: Int64(index))
        }
        let event = Event.fixBatch(FixBatch(deviceID: 1, batchID: .zero, fixes: fixes))
        let encoded = EventCodec.encode(event, receivedAtMicros: 0)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
    }

    /// The registry's fold reads a batch's rejections past its fixes without decoding them: it
    /// must find what a full decode finds, for every kind of batch, and nothing for other records.
    @Test func aBatchsRejectionsReadPastItsFixesAreTheFullDecodes() throws {
        var fuzzer = EventFuzzer(seed: Self.seed)
        var batches = 0
        for _ in 0..<2_000 {
            let event = fuzzer.event()
            let encoded = EventCodec.encode(event, receivedAtMicros: fuzzer.time())
            let rejections = try EventCodec.fixBatchRejections(
                header: encoded.header, stored: encoded.payload)
            if case .fixBatch(let batch) = event {
                batches += 1
                #expect(rejections == batch.rejections, "seed \(Self.seed)")
            } else {
                #expect(rejections == nil, "seed \(Self.seed)")
            }
        }
        #expect(batches > 0)
        let wide = (0..<600).map { index in
            Fix(
                latitude: 1, longitude: 2, accuracyMeters: 3, source: "source-\(index % 300)",
                recordedAtMicros: Int64(index))
        }
        let rejected = [
            Rejection(index: 600, reason: "latitude out of range"), Rejection(index: 601, reason: "é"),
        ]
        let encoded = EventCodec.encode(
            .fixBatch(FixBatch(deviceID: 1, batchID: .zero, fixes: wide, rejections: rejected)),
            receivedAtMicros: 0)
        #expect(
            try EventCodec.fixBatchRejections(header: encoded.header, stored: encoded.payload) == rejected)
        var lying = encoded.header
        lying.fixCount = 599
        #expect(throws: DecodeError.self) {
            try EventCodec.fixBatchRejections(header: lying, stored: encoded.payload)
        }
    }

    @Test func unknownTypesAndVersionsAreSkippable() throws {
        let future = EventCodec.encode(
            .unknown(type: 77, version: 1, payload: [1, 2, 3]), receivedAtMicros: 1)
        #expect(
            try EventCodec.decode(header: future.header, stored: future.payload)
                == .unknown(type: 77, version: 1, payload: [1, 2, 3]))
        var newer = EventCodec.encode(
            .reportingChanged(ReportingChanged(deviceID: 1, paused: true)), receivedAtMicros: 1)
        newer.header.eventVersion = 2
        guard
            case .unknown(let type, let version, _) = try EventCodec.decode(
                header: newer.header, stored: newer.payload)
        else {
            Issue.record("a newer version must decode as unknown")
            return
        }
        #expect(type == EventType.reportingChanged.rawValue && version == 2)
    }

    @Test func damagedPayloadsThrowInsteadOfTrapping() throws {
        var fuzzer = EventFuzzer(seed: Self.seed ^ 1)
        for _ in 0..<300 {
            let encoded = EventCodec.encode(fuzzer.event(), receivedAtMicros: 1)
            guard !encoded.payload.isEmpty else { continue }
            var payload = encoded.payload
            let cut = Int.random(in: 0..<payload.count, using: &fuzzer.random)
            payload.removeLast(payload.count - cut)
            // A payload cut short is an error, never a shorter event read as if whole.
            #expect(throws: (any Error).self) {
                try EventCodec.decode(header: encoded.header, stored: payload)
            }
            // A changed byte may still spell a valid event; it must not trap either way.
            var flipped = encoded.payload
            flipped[cut] ^= 0xFF
            _ = try? EventCodec.decode(header: encoded.header, stored: flipped)
        }
    }

    @Test func uuidTextRoundTrips() {
        var random = SeededGenerator(seed: Self.seed)
        for _ in 0..<100 {
            let uuid = UUID128.random(using: &random)
            #expect(UUID128(uuid.description) == uuid)
            #expect(UUID128(uuid.description.uppercased()) == uuid)
        }
        #expect(UUID128("not-a-uuid") == nil)
        #expect(UUID128("123e4567-e89b-12d3-a456-4266141740000") == nil)
    }
}

@Suite struct FrameDecoderTests {
    func frames(count: Int, seed: UInt64) -> ([UInt8], [RecordHeader]) {
        var fuzzer = EventFuzzer(seed: seed)
        var stream: [UInt8] = []
        var headers: [RecordHeader] = []
        for offset in 0..<count {
            var encoded = EventCodec.encode(fuzzer.event(), receivedAtMicros: Int64(offset))
            encoded.header.offset = UInt64(offset)
            encoded.header.salt = 99
            Frame.append(header: encoded.header, payload: encoded.payload, to: &stream)
            headers.append(encoded.header)
        }
        return (stream, headers)
    }

    func decode(_ stream: [UInt8], pieces: [Int]) -> [RecordHeader] {
        var decoder = FrameDecoder()
        var headers: [RecordHeader] = []
        var position = 0
        var pieceIndex = 0
        while position < stream.count {
            let size = pieces[pieceIndex % pieces.count]
            pieceIndex += 1
            decoder.append(stream[position..<min(stream.count, position + size)])
            position += size
            while case .frame(let frame) = decoder.next() { headers.append(frame.header) }
        }
        return headers
    }

    @Test func wholeOneByteAtATimeAndInPiecesAgree() {
        let (stream, expected) = frames(count: 40, seed: 3)
        #expect(decode(stream, pieces: [stream.count]) == expected)
        #expect(decode(stream, pieces: [1]) == expected)
        #expect(decode(stream, pieces: [7, 1, 300, 2, 4096]) == expected)
    }

    /// `fill` (the segment scanner's way in: a read straight into the decoder's buffer), including
    /// reads that write fewer bytes than they were given room for, gives the frames `append` does.
    @Test func fillsOfAnySizeAgreeWithAppends() {
        let (stream, expected) = frames(count: 40, seed: 5)
        for (room, short) in [(stream.count, 0), (1, 0), (4096, 100), (300, 299), (9, 8)] {
            var decoder = FrameDecoder()
            var headers: [RecordHeader] = []
            var position = 0
            while position < stream.count {
                let got = decoder.fill(count: room) { buffer in
                    let count = min(buffer.count - short, stream.count - position)
                    stream.withUnsafeBytes { source in
                        buffer.copyMemory(
                            from: UnsafeRawBufferPointer(rebasing: source[position..<(position + count)]))
                    }
                    return count
                }
                position += got
                while case .frame(let frame) = decoder.next() { headers.append(frame.header) }
            }
            #expect(headers == expected, "room \(room), \(short) short")
            #expect(decoder.pendingBytes == 0)
        }
    }

    @Test func damageIsNamedByTheFirstBrokenRule() {
        let (stream, _) = frames(count: 1, seed: 4)
        var badCRC = stream
        badCRC[20] ^= 1
        var decoder = FrameDecoder()
        decoder.append(badCRC)
        guard case .damaged(.badCRC, 0) = decoder.next() else {
            Issue.record("expected bad-crc")
            return
        }
        var badLength = stream
        badLength[3] = 0x7F
        decoder = FrameDecoder()
        decoder.append(badLength)
        guard case .damaged(.badLength, 0) = decoder.next() else {
            Issue.record("expected bad-length")
            return
        }
        var badTrailer = stream
        badTrailer[badTrailer.count - 1] ^= 1
        decoder = FrameDecoder()
        decoder.append(badTrailer)
        guard case .damaged(.badTrailer, 0) = decoder.next() else {
            Issue.record("expected bad-trailer")
            return
        }
    }
}

@Suite struct UnknownAccuracyAndProtocolTests {
    /// Unknown accuracy is stored as 0, outside the accepted range, so a version-1 reader of any
    /// age reads the record; this version reads it back as unknown.
    @Test func unknownAccuracyRoundTripsAndKnownValuesStayBitForBit() throws {
        let fixes = [
            Fix(latitude: 1, longitude: 2, accuracyMeters: nil, source: "owntracks", recordedAtMicros: 10),
            Fix(latitude: 1, longitude: 2, accuracyMeters: 12.5, source: "owntracks", recordedAtMicros: 20),
            Fix(latitude: 1, longitude: 2, accuracyMeters: nil, source: "owntracks", recordedAtMicros: 30),
        ]
        let event = Event.fixBatch(
            FixBatch(deviceID: 3, batchID: UUID128.random(), fixes: fixes, clientProtocol: .owntracksHTTP))
        let encoded = EventCodec.encode(event, receivedAtMicros: 40)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
    }

    /// The protocol lives in header flag bits 12-15: an envelope (payload removed) still says it,
    /// and a record written before the field (flags 0) reads as native.
    @Test func theProtocolIsInTheHeaderAndZeroIsNative() throws {
        for clientProtocol in ClientProtocol.known {
            let batch = FixBatch(deviceID: 3, batchID: .zero, fixes: [], clientProtocol: clientProtocol)
            let header = EventCodec.encode(.fixBatch(batch), receivedAtMicros: 1).header
            #expect(header.clientProtocol == clientProtocol)
            #expect(header.flags & ~LogFormat.recordFlagProtocolMask == 0)
        }
        #expect(ClientProtocol.native.rawValue == 0)
        #expect(
            ClientProtocol.known.map(\.name) == [
                "native", "owntracks-http", "owntracks-mqtt", "overland", "osmand", "import:google-records",
                "import:google-semantic", "import:google-timeline", "import:gpx", "import:kml", "import:kmz",
                "import:geojson", "import:csv", "import:owntracks-recorder", "import:zip",
            ])
        #expect(ClientProtocol.imported(format: "gpx")?.rawValue == 8)
        #expect(ClientProtocol.imported(format: "gpx")?.importFormat == "gpx")
        #expect(ClientProtocol.imported(format: "kml5") == nil)
        #expect(ClientProtocol(rawValue: 15)?.name == "protocol-15")
        #expect(ClientProtocol.native.importFormat == nil)
    }
}
