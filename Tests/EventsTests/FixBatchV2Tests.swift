import Events
import Testing
import Workload

/// Fix batch payload version 2 (docs/log-format.md, "Fix batch payload (event version 2)"):
/// decimals as integers, times from the header, optional fields only when present. Every value
/// reads back bit for bit, whatever a client sent; version 1 records still read.
@Suite struct FixBatchV2Tests {
    static let seed = UInt64.random(in: 0...UInt64.max)

    static func roundTrip(_ fixes: [Fix], version: UInt16 = 2) throws -> (Event, EncodedEvent) {
        let event = Event.fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: fixes))
        let encoded = EventCodec.encode(
            event, receivedAtMicros: 1_764_684_400_000_000, fixBatchVersion: version)
        #expect(encoded.header.eventVersion == version)
        return (try EventCodec.decode(header: encoded.header, stored: encoded.payload), encoded)
    }

    static func fix(_ latitude: Double, _ longitude: Double, time: Int64 = 1_764_684_399_000_000) -> Fix {
        Fix(
            latitude: latitude, longitude: longitude, accuracyMeters: 12, altitudeMeters: 34.5,
            speedMetersPerSecond: 1.25, headingDegrees: 359.9, batteryPercent: 81, isCharging: false,
            source: "significant", recordedAtMicros: time)
    }

    /// What clients send, as JSON literals: the parser's double for each must come back exactly,
    /// so the read API answers what it answered before.
    @Test func theDoublesOfWhatClientsSendReadBackBitForBit() throws {
        let literals = [
            "52.5200066", "13.405", "-33.8688197", "151.2092955", "0", "90", "-90", "180", "-180",
            "179.9999999", "-0.0000001", "1e-7", "48.85837", "2.294481", "37.33233141",
            "-122.03121860", "51.507350912345", "0.1", "-0.3", "52.520006612345678",
            "37.332331410000004", "4.9E-324", "1.7976931348623157e308", "-0.0",
        ]
        for literal in literals {
            let value = Double(literal)!
            let fixes = [Self.fix(value, -value)]
            let (decoded, _) = try Self.roundTrip(fixes)
            #expect(
                decoded == .fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: fixes)),
                "\(literal)")
        }
        // Mixed in one batch: one value with more decimals than the others, or none at all.
        let mixed = literals.enumerated().map { index, literal in
            Self.fix(
                Double(literal)!, Double(literals[(index + 5) % literals.count])!,
                time: 1_764_684_000_000_000 + Int64(index))
        }
        let (decoded, _) = try Self.roundTrip(mixed)
        #expect(decoded == .fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: mixed)))
    }

    @Test func specialValuesKeepTheirBits() throws {
        let specials: [Double] = [
            -0.0, .nan, -.nan, Double(bitPattern: 0x7ff8_0000_dead_beef), .infinity, -.infinity,
            .leastNonzeroMagnitude, .greatestFiniteMagnitude, 9_007_199_254_740_994, 0.1 + 0.2,
        ]
        for special in specials {
            var fix = Self.fix(special, special)
            fix.accuracyMeters = special
            fix.altitudeMeters = special
            fix.headingDegrees = special
            let fixes = [fix, Self.fix(1.5, 2.5), fix]
            let (decoded, _) = try Self.roundTrip(fixes)
            #expect(
                decoded == .fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: fixes)),
                "\(special)")
        }
    }

    /// Unknown accuracy (nil, stored as +0.0 in version 1) and absent optional fields stay absent.
    @Test func absentFieldsStayAbsent() throws {
        let fixes = [
            Fix(latitude: 1, longitude: 2, accuracyMeters: nil, source: "gps", recordedAtMicros: 10),
            Fix(
                latitude: 1.5, longitude: 2.5, accuracyMeters: 3, altitudeMeters: 4, batteryPercent: 0,
                isCharging: true, source: "gps", recordedAtMicros: 20, clockSuspect: true),
            Fix(
                latitude: 1, longitude: 2, accuracyMeters: nil, speedMetersPerSecond: 0, source: "wifi",
                recordedAtMicros: 5),
        ]
        let (decoded, _) = try Self.roundTrip(fixes)
        #expect(decoded == .fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: fixes)))
    }

    @Test func timesInEveryUnitReadBack() throws {
        let cases: [[Int64]] = [
            [1_764_684_000_000_000, 1_764_684_060_000_000, 1_764_684_125_000_000],  // seconds
            [1_764_684_000_123_000, 1_764_684_000_001_000, 1_764_684_999_999_000],  // milliseconds, unsorted
            [1_764_684_000_000_001, 1_764_684_000_000_000],  // microseconds
            [Int64.min, Int64.max, 0, -1],
            [Int64.max],
        ]
        for times in cases {
            let fixes = times.map { Self.fix(52.1, 13.2, time: $0) }
            let (decoded, _) = try Self.roundTrip(fixes)
            #expect(
                decoded == .fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: fixes)),
                "\(times)")
        }
    }

    /// A payload whose fix count does not agree with its header, or whose times do not start
    /// at the header's recordedMin, is damage, never fewer fixes or shifted times.
    @Test func aPayloadThatDisagreesWithItsHeaderIsRefused() throws {
        let (_, encoded) = try Self.roundTrip([
            Self.fix(52.1, 13.2), Self.fix(52.2, 13.3, time: 1_764_684_399_500_000),
        ])
        var lying = encoded.header
        lying.fixCount = 3
        #expect(throws: DecodeError.self) { try EventCodec.decode(header: lying, stored: encoded.payload) }
        lying.fixCount = 1
        #expect(throws: DecodeError.self) { try EventCodec.decode(header: lying, stored: encoded.payload) }
        // The first time is stored as zigzag(0) = 0 units from recordedMin; make it 1 unit later,
        // so that no fix is at the header's recordedMin.
        var payload = try EventCodec.rawPayload(header: encoded.header, stored: encoded.payload)
        let firstTime = 2 + 2 + 1
        #expect(payload[firstTime] == 0)
        payload[firstTime] = 2
        var raw = encoded.header
        raw.codec = Codec.none.rawValue
        #expect(throws: DecodeError.self) { try EventCodec.decode(header: raw, stored: payload) }
    }

    /// Every cut is an error and every changed byte is an error or some event, never a trap:
    /// for a single-fix report, a track of 100 fixes and a batch of special values.
    @Test func everyTruncationAndEveryChangedByteIsSafe() throws {
        var track = TrackGenerator(seed: 3, startMicros: 1_764_684_000_000_000)
        var special = Self.fix(.nan, -0.0)
        special.source = "other"
        let batches = [[Self.fix(52.1, 13.2)], track.next(100), [special, Self.fix(1, 2), special]]
        for fixes in batches {
            let event = Event.fixBatch(
                FixBatch(
                    deviceID: 9, batchID: .zero, fixes: fixes,
                    rejections: [Rejection(index: 7, reason: "out_of_range")]))
            var encoded = EventCodec.encode(event, receivedAtMicros: 1)
            let raw = try EventCodec.rawPayload(header: encoded.header, stored: encoded.payload)
            encoded.header.codec = Codec.none.rawValue
            for cut in 0..<raw.count {
                var header = encoded.header
                header.uncompressedBytes = UInt32(cut)
                #expect(throws: (any Error).self) {
                    try EventCodec.decode(header: header, stored: Array(raw[..<cut]))
                }
            }
            for index in raw.indices {
                for change: UInt8 in [0x01, 0x80, 0xff] {
                    var changed = raw
                    changed[index] ^= change
                    _ = try? EventCodec.decode(header: encoded.header, stored: changed)
                    _ = try? EventCodec.fixBatchRejections(header: encoded.header, stored: changed)
                }
            }
        }
    }

    /// Version 1 records, which every log before this version holds, still decode; and random
    /// batches read back from both versions.
    @Test func bothVersionsReadBackRandomBatches() throws {
        print("FixBatchV2Tests seed: \(Self.seed)")
        var fuzzer = EventFuzzer(seed: Self.seed)
        var batches = 0
        while batches < 300 {
            let event = fuzzer.event()
            guard case .fixBatch = event else { continue }
            batches += 1
            for version: UInt16 in [1, 2] {
                let encoded = EventCodec.encode(
                    event, receivedAtMicros: fuzzer.time(), fixBatchVersion: version)
                #expect(encoded.header.eventVersion == version)
                #expect(
                    try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event,
                    "seed \(Self.seed)")
            }
        }
    }

    /// The point of it, in bytes: a phone's single fix and a 100-fix track, against version 1.
    @Test func version2IsSmallerForOneFixAndForAHundred() throws {
        var track = TrackGenerator(seed: 11, startMicros: 1_764_684_000_000_000)
        let single = [track.next()]
        let hundred = track.next(100)
        for fixes in [single, hundred] {
            let (_, version1) = try Self.roundTrip(fixes, version: 1)
            let (decoded, version2) = try Self.roundTrip(fixes, version: 2)
            #expect(
                decoded == .fixBatch(FixBatch(deviceID: 9, batchID: UUID128(high: 1, low: 2), fixes: fixes)))
            let raw1 = Int(version1.header.uncompressedBytes)
            let raw2 = Int(version2.header.uncompressedBytes)
            print(
                "\(fixes.count) fixes: version 1 \(raw1) raw / \(version1.payload.count) stored, version 2 \(raw2) raw / \(version2.payload.count) stored"
            )
            #expect(version2.payload.count * 3 <= version1.payload.count * 2, "\(fixes.count) fixes")
        }
    }
}
